package cell_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/sequencer"
)

// TestResumeSession is the whole life of a resumed session on a real
// cell over TLS: a second process of the same principal, given the
// first's ticket, takes the session over with its lock (no lock-delay,
// no queueing behind itself), at a new lock generation that makes the
// first process's sequencer stale; the first process is fenced out (its
// lock context ends, its calls fail with ErrSessionMoved, which is also
// ErrSessionExpired); a wrong secret, another principal's use of the
// ticket and a made-up session all get the same ErrUnknownSession; the
// resumed session's incarnation survives a master fail-over; and a
// ticket of a session that has ended fails with ErrSessionExpired, or
// makes a new session when the caller asks for that.
func TestResumeSession(t *testing.T) {
	certs := fixtures.TestCerts(t, "admin", "alice", "bob")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: certs, Admin: "admin"})
	ctx := ctxT(t, 120*time.Second)
	const rw = client.Read | client.Write | client.Create
	// Anyone may create in apps; alice's files are hers (their creator's).
	admin := c.ClientWith(t, c.ClientConfigAs("admin"))
	mustOpen(t, ctx, admin, c.Name("acl"), rw|client.Directory).Close()
	if err := mustOpen(t, ctx, admin, c.Name("acl/all"), rw).SetContents(ctx, []byte("*\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := mustOpen(t, ctx, admin, c.Name("apps"), rw|client.Directory).SetACL(ctx, client.ACL{Read: "all", Write: "all"}); err != nil {
		t.Fatal(err)
	}
	name := c.Name("apps/leader")

	a := c.ClientWith(t, c.ClientConfigAs("alice"))
	ha := mustOpen(t, ctx, a, name, rw)
	if err := ha.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	oldSeq, err := ha.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldLock := ha.LockContext()
	ticket := a.SessionTicket()
	if len(ticket) == 0 {
		t.Fatal("no session ticket")
	}

	// Refused, all alike: a flipped secret, bob with alice's ticket, a
	// session that never existed. A malformed ticket is a bad request.
	flipped := append([]byte(nil), ticket...)
	flipped[len(flipped)-1] ^= 1
	made := append([]byte(nil), ticket...)
	made[len(made)-33] ^= 0x40 // another session id, same secret
	for what, try := range map[string]client.Config{"flipped secret": withTicket(c.ClientConfigAs("alice"), flipped),
		"other principal": withTicket(c.ClientConfigAs("bob"), ticket), "made-up session": withTicket(c.ClientConfigAs("alice"), made)} {
		if cl, err := client.Dial(ctx, try); !errors.Is(err, client.ErrUnknownSession) {
			if cl != nil {
				cl.Close()
			}
			t.Fatalf("%s: dial %v, want ErrUnknownSession", what, err)
		}
	}
	if _, err := client.Dial(ctx, withTicket(c.ClientConfigAs("alice"), ticket[:10])); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("truncated ticket: %v, want ErrBadRequest", err)
	}
	if ok, err := a.CheckSequencer(ctx, oldSeq); !ok || err != nil {
		t.Fatalf("refused resumes changed the lock: %v %v", ok, err)
	}

	// The resume: the same session, the lock held, the handle found.
	began := time.Now()
	b := c.ClientWith(t, withTicket(c.ClientConfigAs("alice"), ticket))
	if b.Session() != a.Session() || !b.Resumed() {
		t.Fatalf("resumed session %d (resumed %v), want %d", b.Session(), b.Resumed(), a.Session())
	}
	old, _ := sequencer.Parse(oldSeq)
	left := b.ResumedHandles()
	if len(left) != 1 || left[0].Name != name || left[0].Lock != client.Exclusive || left[0].LockGen <= old.Generation {
		t.Fatalf("resumed handles %+v, want %s held exclusive past generation %d", left, name, old.Generation)
	}
	// What a restarted candidate runs (Campaign: Open, then Acquire)
	// finds the lock held at once.
	hb := mustOpen(t, ctx, b, name, rw)
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = hb.Acquire(actx, client.Exclusive)
	cancel()
	if err != nil {
		t.Fatalf("acquire of the lock the resumed session holds: %v", err)
	}
	if hb.LockContext().Err() != nil {
		t.Fatalf("adopted handle's lock context ended: %v", context.Cause(hb.LockContext()))
	}
	t.Logf("resumed and holding the lock %v after the resume began", time.Since(began))
	if len(b.ResumedHandles()) != 0 {
		t.Fatalf("the adopted handle is still listed: %+v", b.ResumedHandles())
	}
	newSeq, err := hb.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := sequencer.Parse(newSeq); s.Generation != left[0].LockGen {
		t.Fatalf("new holder's sequencer at generation %d, want %d", s.Generation, left[0].LockGen)
	}
	if ok, err := b.CheckSequencer(ctx, oldSeq); ok || err != nil {
		t.Fatalf("the old process's sequencer after the resume: valid %v %v", ok, err)
	}
	if ok, err := b.CheckSequencer(ctx, newSeq); !ok || err != nil {
		t.Fatalf("the new holder's sequencer: valid %v %v", ok, err)
	}

	// The old process is fenced: its lock context ends (its parked
	// KeepAlive is answered), and its calls fail typed.
	select {
	case <-oldLock.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the old process's lock context lives on after the resume")
	}
	if cause := context.Cause(oldLock); !errors.Is(cause, client.ErrSessionMoved) || !errors.Is(cause, client.ErrSessionExpired) {
		t.Fatalf("old lock context's cause %v, want ErrSessionMoved and ErrSessionExpired", cause)
	}
	if _, err := ha.GetStat(ctx); !errors.Is(err, client.ErrSessionMoved) || !errors.Is(err, client.ErrSessionExpired) {
		t.Fatalf("old process's call: %v, want ErrSessionMoved", err)
	}
	if err := hb.SetContents(ctx, []byte("b leads")); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}

	// The incarnation is replicated: after a fail-over the new master
	// takes the resumed process's calls, and the old sequencer stays
	// stale.
	c.StopMaster()
	c.WaitForMaster(30 * time.Second)
	if err := hb.SetContents(ctx, []byte("b still leads")); err != nil {
		t.Fatalf("resumed session's write after a fail-over: %v", err)
	}
	if ok, err := b.CheckSequencer(ctx, oldSeq); ok || err != nil {
		t.Fatalf("old sequencer after a fail-over: valid %v %v", ok, err)
	}
	// And a resume at the new master fences b in turn.
	d := c.ClientWith(t, withTicket(c.ClientConfigAs("alice"), ticket))
	hd := mustOpen(t, ctx, d, name, rw)
	if hd.LockContext().Err() != nil {
		t.Fatal("the lock was not adopted at the new master")
	}
	if _, err := hb.GetStat(ctx); !errors.Is(err, client.ErrSessionMoved) {
		t.Fatalf("b's call after d resumed: %v, want ErrSessionMoved", err)
	}

	// A session that has ended: its ticket fails typed, or, asked for,
	// makes a new session.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dial(ctx, withTicket(c.ClientConfigAs("alice"), ticket)); !errors.Is(err, client.ErrSessionExpired) {
		t.Fatalf("resume of a closed session: %v, want ErrSessionExpired", err)
	}
	cfg := withTicket(c.ClientConfigAs("alice"), ticket)
	cfg.ResumeOrCreate = true
	e := c.ClientWith(t, cfg)
	if e.Resumed() || e.Session() == a.Session() || len(e.SessionTicket()) == 0 {
		t.Fatalf("ResumeOrCreate: resumed %v session %d (old %d)", e.Resumed(), e.Session(), a.Session())
	}
}

// TestResumeAfterExpiry: the ticket of a session whose lease ran out
// (its process cut off, not closed) fails with ErrSessionExpired.
func TestResumeAfterExpiry(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	ctx := ctxT(t, 60*time.Second)
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer = cut.Dial
	a := c.ClientWith(t, cfg)
	name := c.Name("expiring")
	h := mustOpen(t, ctx, a, name, client.Read|client.Write|client.Create, client.WithLockDelay(time.Second))
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	ticket := a.SessionTicket()
	cut.Cut()
	// The session has expired once the cell freed its lock.
	watcher := c.Client(t)
	hw := mustOpen(t, ctx, watcher, name, client.Read)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := hw.GetStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.LockHolders == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cut-off session never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if cl, err := client.Dial(ctx, withTicket(c.ClientConfig(), ticket)); !errors.Is(err, client.ErrSessionExpired) {
		if cl != nil {
			cl.Close()
		}
		t.Fatalf("resume of an expired session: %v, want ErrSessionExpired", err)
	}
}

func withTicket(cfg client.Config, ticket []byte) client.Config {
	cfg.ResumeTicket = ticket
	return cfg
}
