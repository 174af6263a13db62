package cell_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// A Stat read names the lock's holders (session, principal, declared
// identity, since when) next to its mode, generation and waiters, through
// real mutual-TLS connections; a caller that may write but not read the
// node learns nothing of them, neither from a Stat nor from a listing.
func TestStatShowsLockHolders(t *testing.T) {
	certs := fixtures.TestCerts(t, "admin", "alice", "bob", "outsider")
	c := fixtures.NewCell(t, 1, fixtures.Options{TLS: certs, Admin: "admin"})
	ctx := ctxT(t, 30*time.Second)
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	idAlice := client.Identity{Host: "alice-host", PID: 11, Program: "alice-prog"}
	idBob := client.Identity{Host: "bob-host", PID: 22, Program: "bob-prog"}
	cfgAlice, cfgBob := c.ClientConfigAs("alice"), c.ClientConfigAs("bob")
	cfgAlice.Identity, cfgBob.Identity = idAlice, idBob
	alice := c.ClientWith(t, cfgAlice)
	bob := c.ClientWith(t, cfgBob)
	outsider := c.ClientWith(t, c.ClientConfigAs("outsider"))
	const rwc = client.Read | client.Write | client.Create
	mustOpen(t, ctx, admin, c.Name("acl"), rwc|client.Directory).Close()
	if err := mustOpen(t, ctx, admin, c.Name("acl/lockers"), rwc).SetContents(ctx, []byte("alice\nbob\n")); err != nil {
		t.Fatal(err)
	}
	if err := mustOpen(t, ctx, admin, c.Name("acl/writers"), rwc).SetContents(ctx, []byte("alice\nbob\noutsider\n")); err != nil {
		t.Fatal(err)
	}
	lock := mustOpen(t, ctx, admin, c.Name("lock"), rwc)
	if _, err := lock.SetACL(ctx, client.ACL{Read: "lockers", Write: "writers"}); err != nil {
		t.Fatal(err)
	}

	if st, err := lock.GetStat(ctx); err != nil || st.Holders != nil || st.LockMode.String() != "free" {
		t.Fatalf("free lock: %+v, %v", st, err)
	}
	ha := mustOpen(t, ctx, alice, c.Name("lock"), client.Read|client.Write)
	if ok, err := ha.TryAcquire(ctx, client.Shared); !ok || err != nil {
		t.Fatalf("alice: %v %v", ok, err)
	}
	st, err := lock.GetStat(ctx)
	want := []client.LockHolder{{Session: alice.Session(), Principal: "alice", Identity: idAlice}}
	if err != nil || st.LockMode != client.Shared || !slices.Equal(untimed(t, st.Holders), want) || st.LockHolders != 1 || st.LockGen == 0 {
		t.Fatalf("held by alice: %+v, %v; want holders %+v", st, err, want)
	}
	gen := st.LockGen
	hb := mustOpen(t, ctx, bob, c.Name("lock"), client.Read|client.Write)
	if ok, err := hb.TryAcquire(ctx, client.Shared); !ok || err != nil {
		t.Fatalf("bob: %v %v", ok, err)
	}
	// Holders read with the contents too, here by a holder.
	_, st, err = hb.GetContentsAndStat(ctx)
	want = append(want, client.LockHolder{Session: bob.Session(), Principal: "bob", Identity: idBob})
	if err != nil || !slices.Equal(untimed(t, st.Holders), want) || st.LockHolders != 2 || st.LockGen != gen {
		t.Fatalf("shared by alice and bob: %+v, %v; want holders %+v at generation %d", st, err, want, gen)
	}

	// May write, may not read: the Stat is refused, holders and all.
	ho := mustOpen(t, ctx, outsider, c.Name("lock"), client.Write)
	if st, err := ho.GetStat(ctx); !errors.Is(err, client.ErrPermission) || st.Holders != nil || st.LockDelayBy != nil {
		t.Fatalf("stat without read permission: %+v, %v; want ErrPermission", st, err)
	}
	if _, _, err := ho.GetContentsAndStat(ctx); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("read without read permission: %v; want ErrPermission", err)
	}
	if locks, _, err := lcadmin.New(outsider).Locks(ctx, c.Name("")); err != nil || len(locks) != 0 {
		t.Fatalf("listing without read permission: %+v, %v; want nothing", locks, err)
	}

	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := lock.GetStat(ctx); err != nil || st.Holders != nil || st.LockHolders != 0 {
		t.Fatalf("released: %+v, %v", st, err)
	}
}

// untimed checks each holder's acquisition time is known and recent, and
// returns the holders without it, to compare the rest exactly.
func untimed(t *testing.T, hs []client.LockHolder) []client.LockHolder {
	t.Helper()
	out := slices.Clone(hs)
	for i := range out {
		if age := time.Since(out[i].Since); out[i].Since.IsZero() || age < -time.Minute || age > time.Minute {
			t.Errorf("holder %d since %v", out[i].Session, out[i].Since)
		}
		out[i].Since = time.Time{}
	}
	return out
}
