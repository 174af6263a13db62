package cell_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// A resource server that saw the new generation refuses the old one
	// locally, whatever the cell would say.
	guard := sequencer.NewGuard(sequencer.GuardConfig{Cell: c.Options().Cell})
	if _, err := guard.Check(ctx, newSeq); err != nil {
		t.Fatalf("guard, new sequencer: %v", err)
	}
	if _, err := guard.Check(ctx, oldSeq); !errors.Is(err, sequencer.ErrStale) {
		t.Fatalf("guard, old sequencer after the new: %v, want ErrStale", err)
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

const (
	helperResumeEnv   = "LOCKCELL_HELPER_RESUME"
	helperTicketEnv   = "LOCKCELL_HELPER_TICKET"
	helperResumeName  = "resume-lock"
	helperResumeDelay = time.Minute
)

// TestHelperResumeLock is not a test: it is the client process that
// TestKilledProcessResumesItsLock starts and kills. It does what an
// election candidate does (Open with Create, then a blocking Acquire),
// first on a new session, whose ticket it saves to the file named in
// its environment (mode 0600), and, when started again with that file
// holding a ticket, on the session the ticket names. It prints "ready"
// once it holds the lock and blocks until it is killed.
func TestHelperResumeLock(t *testing.T) {
	if os.Getenv(helperResumeEnv) != "1" {
		t.Skip("helper process of TestKilledProcessResumesItsLock")
	}
	fixtures.DieWithParent()
	cellName := os.Getenv(helperCellEnv)
	ticketFile := os.Getenv(helperTicketEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := client.Config{Cell: cellName, Replicas: strings.Split(os.Getenv(helperAddrsEnv), ","),
		RetryTimeout: 20 * time.Second, Logger: fixtures.Logger()}
	if b, err := os.ReadFile(ticketFile); err == nil && len(b) > 0 {
		cfg.ResumeTicket = b
	}
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("helper: dial: %v", err)
	}
	if err := os.WriteFile(ticketFile, cl.SessionTicket(), 0o600); err != nil {
		t.Fatalf("helper: save ticket: %v", err)
	}
	h, err := cl.Open(ctx, "/ls/"+cellName+"/"+helperResumeName, client.Read|client.Write|client.Create,
		client.WithLockDelay(helperResumeDelay))
	if err != nil {
		t.Fatalf("helper: open: %v", err)
	}
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatalf("helper: acquire: %v", err)
	}
	fmt.Fprintln(os.Stdout, "ready")
	<-ctx.Done() // killed long before this
	t.Fatal("helper: not killed within its deadline")
}

// A process holding a lock is killed with SIGKILL; a new process started
// with its saved ticket holds the lock again within the lease: the same
// session, a newer lock generation, no lock-delay (a minute here) and no
// wait behind a candidate queued meanwhile, who keeps waiting.
func TestKilledProcessResumesItsLock(t *testing.T) {
	const lease = 6 * time.Second
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease})
	ctx := ctxT(t, 90*time.Second)
	ticketFile := filepath.Join(t.TempDir(), "ticket")
	env := []string{helperResumeEnv + "=1", helperCellEnv + "=" + c.Options().Cell,
		helperAddrsEnv + "=" + strings.Join(c.Addrs(), ","), helperTicketEnv + "=" + ticketFile}
	first := fixtures.StartTestProc(t, "TestHelperResumeLock", env...)
	if err := first.WaitLine("ready", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(ticketFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved ticket: %v %v", fi, err)
	}
	// Another candidate queues behind the holder.
	other := c.Client(t)
	ho := mustOpen(t, ctx, other, c.Name(helperResumeName), client.Read|client.Write)
	st0, err := ho.GetStat(ctx)
	if err != nil || st0.LockHolders != 1 {
		t.Fatalf("the first process does not hold the lock: %+v %v", st0, err)
	}
	holder := st0.Holders[0].Session
	granted := make(chan error, 1)
	go func() { granted <- ho.Acquire(ctx, client.Exclusive) }()
	pollUntil(t, 10*time.Second, "the other candidate queued", func() bool { s, _ := ho.GetStat(ctx); return s.LockWaiters == 1 })

	killedAt := time.Now()
	first.Kill()
	second := fixtures.StartTestProc(t, "TestHelperResumeLock", env...)
	if err := second.WaitLine("ready", lease); err != nil {
		t.Fatalf("the restarted process did not hold the lock within the lease: %v", err)
	}
	took := time.Since(killedAt)
	st, err := ho.GetStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LockHolders != 1 || st.Holders[0].Session != holder || st.LockGen <= st0.LockGen || st.LockWaiters != 1 {
		t.Fatalf("after the restart: %+v, want session %d holding at a generation past %d, one waiter", st, holder, st0.LockGen)
	}
	select {
	case err := <-granted:
		t.Fatalf("the queued candidate got the lock (%v) while the restarted process holds it", err)
	default:
	}
	if !st.LockDelayUntil.IsZero() {
		t.Fatalf("a lock-delay was imposed: %v", st.LockDelayUntil)
	}
	t.Logf("killed at T; the restarted process held the lock again at T+%v (lease %v, lock-delay %v)",
		took.Round(time.Millisecond), lease, helperResumeDelay)
}
