package cell_test

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// A counter kept with check-generation transactions: several sessions
// read it and commit "if its generation is still what I read, write the
// next value", retrying when another got there first. Across a stop of
// the master in the middle, every increment a caller saw succeed is
// counted exactly once (a retried request id gets its first outcome, none
// applies twice) and none is lost.
func TestTxnCounterAcrossMasterStop(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: 3 * time.Second})
	ctx := ctxT(t, 2*time.Minute)
	const sessions, workers, each = 3, 2, 8
	clients := make([]*client.Client, sessions)
	for i := range clients {
		clients[i] = c.Client(t)
	}
	name := c.Name("counter")
	mustOpen(t, ctx, clients[0], name, client.Read|client.Write|client.Create, client.WithContents([]byte("0"))).Close()

	var done, conflicts atomic.Int64
	var wg sync.WaitGroup
	for s := range sessions {
		h := mustOpen(t, ctx, clients[s], name, client.Read)
		defer h.Close()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					for {
						data, st, err := h.GetContentsAndStat(ctx)
						if err != nil {
							t.Errorf("read: %v", err)
							return
						}
						v, err := strconv.Atoi(string(data))
						if err != nil {
							t.Errorf("counter %q: %v", data, err)
							return
						}
						res, err := clients[s].Txn(ctx).If(client.GenerationIs(name, st.ContentGen)).
							Then(client.OpSet(name, []byte(strconv.Itoa(v+1)))).Commit()
						var te *client.TxnError
						if errors.As(err, &te) && errors.Is(err, client.ErrGenerationMismatch) && te.Check == 0 && te.Path == name {
							conflicts.Add(1)
							continue
						}
						if err != nil {
							t.Errorf("commit: %v", err)
							return
						}
						if res.Generation <= st.ContentGen || len(res.Generations) != 1 || res.Generations[0] != res.Generation {
							t.Errorf("committed at generation %d (%v) after reading %d", res.Generation, res.Generations, st.ContentGen)
						}
						done.Add(1)
						break
					}
				}
			}()
		}
	}
	// Stop the master once some increments are in.
	for done.Load() < sessions*workers*each/3 && !t.Failed() {
		time.Sleep(5 * time.Millisecond) // a poll with the deadline of ctx
		if ctx.Err() != nil {
			t.Fatal("no increments")
		}
	}
	c.StopMaster()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	h := mustOpen(t, ctx, clients[0], name, client.Read)
	defer h.Close()
	data, _, err := h.GetContentsAndStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Itoa(sessions * workers * each); string(data) != want || done.Load() != sessions*workers*each {
		t.Fatalf("counter %s after %d increments seen to succeed, want %s", data, done.Load(), want)
	}
	t.Logf("%d increments, %d generation conflicts retried", done.Load(), conflicts.Load())

	// A failed check names itself and changes nothing, here in a
	// transaction that would also have made and removed names.
	cl := clients[1]
	_, err = cl.Txn(ctx).If(client.Exists(name), client.Missing(name)).
		Then(client.OpMkdir(c.Name("d")), client.OpCreate(c.Name("d/f"), []byte("x")), client.OpDelete(name)).Commit()
	var te *client.TxnError
	if !errors.As(err, &te) || te.Check != 1 || te.Op != -1 || te.Path != name || !errors.Is(err, client.ErrExists) {
		t.Fatalf("failed check answered %v", err)
	}
	if _, err := cl.Open(ctx, c.Name("d"), client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a failed transaction made d: %v", err)
	}
	// The same transaction whose checks hold applies whole.
	res, err := cl.Txn(ctx).If(client.Exists(name)).
		Then(client.OpMkdir(c.Name("d")), client.OpCreate(c.Name("d/f"), []byte("x")), client.OpDelete(name)).Commit()
	if err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, ctx, cl, c.Name("d/f"), client.Read)
	defer f.Close()
	if data, st, err := f.GetContentsAndStat(ctx); err != nil || string(data) != "x" || st.ContentGen != res.Generation {
		t.Fatalf("d/f: %q at %d (%v), want \"x\" at %d", data, st.ContentGen, err, res.Generation)
	}
	if _, err := cl.Open(ctx, name, client.Read); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the counter survived its delete: %v", err)
	}
	// Another session's cached copy is invalidated before the
	// transaction applies: its next read sees the new contents.
	other := mustOpen(t, ctx, clients[2], c.Name("d/f"), client.Read)
	defer other.Close()
	for range 2 { // the second read is served from the cache
		if data, _, err := other.GetContentsAndStat(ctx); err != nil || string(data) != "x" {
			t.Fatalf("d/f: %q, %v", data, err)
		}
	}
	if _, err := cl.Txn(ctx).Then(client.OpSet(c.Name("d/f"), []byte("z"))).Commit(); err != nil {
		t.Fatal(err)
	}
	if data, _, err := other.GetContentsAndStat(ctx); err != nil || string(data) != "z" {
		t.Fatalf("after the transaction another session reads d/f as %q (%v)", data, err)
	}
}

// Lock checks: Holds passes while a handle of the caller's session holds
// the lock (in the mode asked), SequencerValid while the sequencer's
// generation is the lock's; after the release both fail, naming the
// check, with the errors a single call gives; a malformed name is the
// call's error, typed as an invalid name.
func TestTxnLockChecks(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	ctx := ctxT(t, time.Minute)
	cl, other := c.Client(t), c.Client(t)
	lock := mustOpen(t, ctx, cl, c.Name("lock"), client.Read|client.Write|client.Create)
	defer lock.Close()
	data := c.Name("data")
	mustOpen(t, ctx, cl, data, client.Read|client.Write|client.Create).Close()
	if err := lock.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	seq, err := lock.GetSequencer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write := func(cl *client.Client, cs ...client.Cmp) error {
		_, err := cl.Txn(ctx).If(cs...).Then(client.OpSet(data, []byte("v"))).Commit()
		return err
	}
	if err := write(cl, client.Holds(c.Name("lock"), client.Exclusive), client.Holds(c.Name("lock"), 0), client.SequencerValid(seq)); err != nil {
		t.Fatalf("checks of a held lock: %v", err)
	}
	if err := write(cl, client.Holds(c.Name("lock"), client.Shared)); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("held exclusive, checked shared: %v", err)
	}
	if err := write(other, client.Holds(c.Name("lock"), 0)); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("another session's check of a lock it does not hold: %v", err)
	}
	if err := write(other, client.SequencerValid(seq)); err != nil {
		t.Fatalf("another session's check of a valid sequencer: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var te *client.TxnError
	if err := write(cl, client.Exists(data), client.SequencerValid(seq)); !errors.As(err, &te) || te.Check != 1 || !errors.Is(err, client.ErrStaleSequencer) {
		t.Fatalf("a released lock's sequencer: %v", err)
	}
	if err := write(cl, client.Holds(c.Name("lock"), 0)); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("a released lock: %v", err)
	}
	if _, err := cl.Txn(ctx).Then(client.OpSet(c.Name("a//b"), nil)).Commit(); !errors.Is(err, client.ErrInvalidName) {
		t.Fatalf("a bad name: %v", err)
	}
	if _, err := cl.Txn(ctx).If(client.SequencerValid(client.Sequencer("junk"))).Commit(); !errors.Is(err, client.ErrBadSequencer) {
		t.Fatalf("a malformed sequencer: %v", err)
	}
}
