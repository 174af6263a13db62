package cell_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"lockcell/cell/certs"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/wire"
)

// Every replica reports the same state hash at the same applied index; a
// write changes it. The chaos tests rely on this to compare replicas after
// healing.
func TestReplicasAgreeOnStateHash(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Client(t)
	h, err := cl.Open(ctx, c.Name("f"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("one")); err != nil {
		t.Fatal(err)
	}
	agree := func() []byte {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var idx []uint64
			var sums [][]byte
			for _, a := range c.Addrs() {
				i, sum, err := admin.StateHash(ctx, c.ClientConfig(), a)
				if errors.Is(err, client.ErrTooMany) {
					// Hashes are rationed per replica: ask again later.
					i, sum = 0, nil
				} else if err != nil {
					t.Fatalf("state hash of %s: %v", a, err)
				}
				idx, sums = append(idx, i), append(sums, sum)
			}
			if idx[0] != 0 && idx[0] == idx[1] && idx[1] == idx[2] {
				if !bytes.Equal(sums[0], sums[1]) || !bytes.Equal(sums[1], sums[2]) {
					t.Fatalf("replicas at index %d disagree: %x %x %x", idx[0], sums[0], sums[1], sums[2])
				}
				return sums[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("replicas never reached one index: %v", idx)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	before := agree()
	if len(before) != 32 {
		t.Fatalf("hash of %d bytes", len(before))
	}
	if err := h.SetContents(ctx, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if after := agree(); bytes.Equal(before, after) {
		t.Fatal("a write left the state hash unchanged")
	}
}

// A state hash encodes the whole state while holding off the replica's
// applies, so it is the admin's alone and rationed: a non-admin is
// refused, concurrent askers share one computation, a result still
// current is served again, any other ask within the interval is refused
// TooMany, and the serving master declines unless the admin allows it.
func TestStateHashIsAdminOnlyAndRationed(t *testing.T) {
	set := fixtures.TestCerts(t, "alice")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, StateHashInterval: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := c.WaitForMaster(30 * time.Second)
	follower := c.Addrs()[(m+1)%3]

	if _, _, err := admin.StateHash(ctx, c.ClientConfigAs("alice"), follower); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("state hash asked by a non-admin: %v, want ErrPermission", err)
	}

	// Sixteen admins at once: one computation, one answer, or TooMany.
	type answer struct {
		idx uint64
		sum []byte
		err error
	}
	answers := make([]answer, 16)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idx, sum, err := admin.StateHash(ctx, c.ClientConfig(), follower)
			answers[i] = answer{idx, sum, err}
		}()
	}
	wg.Wait()
	var first *answer
	for i := range answers {
		a := &answers[i]
		switch {
		case a.err == nil && first == nil:
			first = a
		case a.err == nil:
			if a.idx != first.idx || !bytes.Equal(a.sum, first.sum) {
				t.Fatalf("concurrent askers got two computations: %d/%x and %d/%x", first.idx, first.sum, a.idx, a.sum)
			}
		case !errors.Is(a.err, client.ErrTooMany):
			t.Fatalf("asker %d: %v, want a hash or ErrTooMany", i, a.err)
		}
	}
	if first == nil {
		t.Fatal("no asker got a hash")
	}

	// The state changes: within the interval the follower computes no
	// other hash (a write moved its applied index past the one it hashed).
	cl := c.Client(t)
	h, err := cl.Open(ctx, c.Name("f"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetContents(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := admin.QueryStatusWith(ctx, c.ClientConfig(), follower)
		if err != nil {
			t.Fatal(err)
		}
		if st.AppliedIndex > first.idx {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("follower never applied past %d", first.idx)
		}
		time.Sleep(20 * time.Millisecond) // poll
	}
	if _, _, err := admin.StateHash(ctx, c.ClientConfig(), follower); !errors.Is(err, client.ErrTooMany) {
		t.Fatalf("a second hash within the interval: %v, want ErrTooMany", err)
	}

	// The serving master declines without AllowMaster (it would pause the
	// cell's writes), even for the admin.
	st := rawStateHash(t, set, c.Addrs()[m], false)
	if st.Code != wire.CodeUnavailable {
		t.Fatalf("the master asked for a hash without AllowMaster: %+v, want Unavailable", st)
	}
	if st := rawStateHash(t, set, c.Addrs()[m], true); st.Code != wire.CodeOK {
		t.Fatalf("the master asked with AllowMaster: %+v, want a hash", st)
	}
}

// rawStateHash asks addr for a state hash as the admin over the raw wire
// (the client library always allows the master) and returns the status.
func rawStateHash(t *testing.T, set *fixtures.CertSet, addr string, allowMaster bool) wire.Status {
	t.Helper()
	sess := dialRawMux(t, addr, set.ClientTLS(t, certs.AdminUser))
	defer sess.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var resp wire.CellStatusResponse
	st, err := sess.Call(ctx, wire.Header{Method: wire.MethodCellStatus},
		&wire.CellStatusRequest{StateHash: true, AllowMaster: allowMaster}, &resp)
	if err != nil {
		t.Fatal(err)
	}
	if st.Code == wire.CodeOK {
		if len(resp.StateHash) != 32 {
			t.Fatalf("hash of %d bytes", len(resp.StateHash))
		}
	}
	return st
}
