package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/sequencer"
	"lockcell/wire"
)

const (
	// lockEnv names, in the command's environment, the lock it runs under.
	lockEnv = "LOCKCELL_LOCK"
	// defaultKillAfter is how long, unless --kill-after says otherwise, a
	// command stopped for a lost lock has between SIGTERM and SIGKILL.
	defaultKillAfter = 10 * time.Second
	// waitDelay bounds how long lock waits, once the command has exited,
	// for processes it left behind to close the pipes it shares with them
	// (only when lockcell's streams are not plain files, as in tests).
	waitDelay = 2 * time.Second
	// maxLockDelay is the longest lock-delay the cell accepts
	// (docs/spec.md#lock-delay).
	maxLockDelay = time.Minute
	// defaultGrace is the client library's grace period
	// (docs/spec.md#jeopardy-and-grace).
	defaultGrace = 45 * time.Second
	// exitTimeout is lock's exit code when --timeout (or --wait) ended
	// the wait for the lock: EX_TEMPFAIL of sysexits.h, "try again later".
	exitTimeout = 75
	// exitLockLost is lock's exit code when it stopped the command because
	// the lock may be lost (or could not start it for that reason):
	// EX_UNAVAILABLE of sysexits.h, so scripts tell it from the command's
	// own failures.
	exitLockLost = 69
)

// lockCommand runs a command while holding a lock.
func lockCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "lock",
		Usage:     "hold a lock while a command runs",
		ArgsUsage: "NAME [NAME...] -- CMD [ARGS...]",
		Description: "Opens NAME (creating it and its missing parents when needed), takes its lock, " +
			"and runs CMD with $" + seqEnv + " (the lock's sequencer, for seq check and for resource " +
			"servers to fence with) and $" + lockEnv + " (the lock's full name) added to its environment " +
			"and lockcell's stdin, stdout and stderr. When CMD exits the lock is released and lockcell " +
			"exits with CMD's status (128+N if signal N killed it; 127 if CMD is not found, 126 if it " +
			"cannot be run). SIGINT, SIGTERM and SIGHUP are passed on to CMD.\n\n" +
			"Without --try lock waits for the lock for as long as it takes (as flock does), through " +
			"another holder's lock-delay and master fail-overs; --timeout D (or --wait D) bounds the wait, " +
			"not CMD, and when it runs out lockcell exits " + fmt.Sprint(exitTimeout) + " without running CMD. " +
			"NAME must be a file: a directory is refused.\n\n" +
			"With --ephemeral (not with --shared) lockcell deletes NAME when it is done with it, while still holding the lock, " +
			"unless another lock run is waiting for it; a run waiting for a file deleted this way creates it " +
			"again and goes on waiting. A holder that dies leaves NAME in place: its lock-delay, which keeps " +
			"the next holder out for a while, lives on the file.\n\n" +
			"The moment lockcell can no longer be sure it holds the lock while CMD runs (the session is in " +
			"jeopardy: no answer from the cell within the lease, which is before the cell can hand the lock " +
			"to anyone else; or it expired, or NAME was deleted), CMD is sent SIGTERM, SIGKILL --kill-after " +
			"later if it is still running, and lockcell exits " + fmt.Sprint(exitLockLost) + " saying why. " +
			"Unless stdin is a terminal CMD runs in its own process group, and " +
			"signals reach the whole group.\n\n" +
			"When another session asks for the lock (lockcell request-release), lockcell says who and why on " +
			"stderr and, with --on-release-request SIGNAL, sends CMD that signal so it can finish and exit; " +
			"the lock is held until CMD exits. A request is advice: CMD decides.\n\n" +
			"With -n N, NAME is a counting semaphore of N permits (made so if it does not exist; an existing one " +
			"must have N): up to N lock runs hold it at once, the others wait in FIFO order, and each holder's " +
			"$" + seqEnv + " is its own. With several NAMEs lockcell takes all their locks at once, or none, " +
			"in one step at the cell (a multi-lock): two runs naming the same files in any order never deadlock. " +
			"$" + lockEnv + " then holds the names and $" + seqEnv + " the sequencers, space-separated, in the order given." +
			"\n\nExample: lockcell lock --lock-delay 10s jobs/etl -- ./run-etl.sh\n" +
			"Example: lockcell lock -n 3 pools/gpu -- ./train.sh\n" +
			"Example: lockcell lock accounts/a accounts/b -- ./transfer.sh",
		// NAME is free text: "lock help -- CMD" must not show help.
		HideHelpCommand: true,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "shared", Usage: "take the lock in shared (reader) mode instead of exclusive"},
			&cli.IntFlag{Name: "limit", Aliases: []string{"n"}, DefaultText: "a plain lock",
				Usage: "NAME is a counting semaphore of `N` permits: up to N runs hold it at once"},
			&cli.BoolFlag{Name: "try", Usage: "fail (exit 1) at once if the lock is held instead of waiting"},
			&cli.DurationFlag{Name: "wait", DefaultText: "no limit",
				Usage: "give up waiting for the lock after `D` (exit " + fmt.Sprint(exitTimeout) + "); the same as --timeout"},
			&cli.BoolFlag{Name: "ephemeral", Usage: "delete NAME when done with it, unless another lock run is waiting for it"},
			&cli.DurationFlag{Name: "lock-delay", DefaultText: "the cell's",
				Usage: "if this session fails while holding the lock, others cannot take it for `D` (1ms to 1m)"},
			&cli.DurationFlag{Name: "kill-after", Value: defaultKillAfter,
				Usage: "when the lock may be lost, send SIGKILL `D` after SIGTERM if CMD is still running"},
			&cli.StringFlag{Name: "on-release-request", DefaultText: "none",
				Usage: "when another session asks for the lock, send CMD `SIGNAL` (USR1, USR2, HUP, INT or TERM)"},
			// For tests: a session that cannot reach the cell expires
			// after its lease plus this.
			&cli.DurationFlag{Name: "grace", Value: defaultGrace, Hidden: true,
				Usage: "how long a session in jeopardy keeps looking for the cell before it expires"},
			// For tests: how long one call keeps looking for a master
			// (client.Config.RetryTimeout); the wait for the lock itself
			// is not bounded by it.
			&cli.DurationFlag{Name: "retry-timeout", Hidden: true,
				Usage: "how long one call keeps looking for a master"},
		},
		Action: e.lock,
	}
}

// lockArgs splits lock's arguments into NAME [NAME...] and CMD [ARGS...].
func lockArgs(c *cli.Context) ([]string, []string, error) {
	args := c.Args().Slice()
	dash := slices.Index(args, "--")
	switch {
	case dash < 0:
		return nil, nil, usageErrorf(c, "no -- before the command (want %s)", c.Command.ArgsUsage)
	case dash == 0:
		return nil, nil, usageErrorf(c, "no NAME before -- (want %s)", c.Command.ArgsUsage)
	case dash == len(args)-1:
		return nil, nil, usageErrorf(c, "no command after -- (want %s)", c.Command.ArgsUsage)
	}
	for _, a := range args[:dash] {
		if isOptionWord(a) {
			// arrangeArgs moved every known option out of the way.
			return nil, nil, usageErrorf(c, "%s is not an option of lock", a)
		}
	}
	if dash > client.MaxMultiLock {
		return nil, nil, usageErrorf(c, "at most %d NAMEs at once, got %d", client.MaxMultiLock, dash)
	}
	return args[:dash], args[dash+1:], nil
}

// lock is lock's Action.
func (e *env) lock(c *cli.Context) error {
	args, argv, err := lockArgs(c)
	if err != nil {
		return err
	}
	arg := args[0]
	mode := client.Exclusive
	var opts []client.OpenOption
	if c.IsSet("limit") {
		n := c.Int("limit")
		switch {
		case n < 1 || n > client.MaxSemLimit:
			return usageErrorf(c, "-n must be from 1 to %d, got %d", client.MaxSemLimit, n)
		case c.Bool("shared") || c.Bool("ephemeral") || len(args) > 1:
			return usageErrorf(c, "-n takes one NAME, and neither --shared nor --ephemeral: a semaphore's permits are its own mode")
		}
		mode = client.Shared // a semaphore's permits are taken shared
		opts = append(opts, client.WithSemaphore(n))
	}
	if len(args) > 1 && (c.Bool("shared") || c.Bool("ephemeral")) {
		return usageErrorf(c, "several NAMEs are taken exclusively all at once: not with --shared or --ephemeral")
	}
	if c.Bool("shared") {
		mode = client.Shared
		if c.Bool("ephemeral") {
			// Another shared holder may join between looking and
			// deleting: only an exclusive holder can delete safely.
			return usageErrorf(c, "--ephemeral needs an exclusive lock: a shared holder cannot delete the file under the others")
		}
	}
	if c.IsSet("lock-delay") {
		// The wire protocol reads 0 ms as "the cell's default", so the
		// shortest delay one can ask for is 1 ms.
		d := c.Duration("lock-delay")
		if d < time.Millisecond || d > maxLockDelay {
			return usageErrorf(c, "--lock-delay must be from 1ms to %v, got %v", maxLockDelay, d)
		}
		opts = append(opts, client.WithLockDelay(d))
	}
	killAfter := c.Duration("kill-after")
	if killAfter <= 0 {
		return usageErrorf(c, "--kill-after must be positive, got %v", killAfter)
	}
	var onAsked os.Signal // what a release request sends CMD (nil: nothing)
	if c.IsSet("on-release-request") {
		if onAsked, err = parseReleaseSignal(c.String("on-release-request")); err != nil {
			return usageErrorf(c, "%v", err)
		}
	}
	if e.grace = c.Duration("grace"); e.grace <= 0 {
		return usageErrorf(c, "--grace must be positive, got %v", e.grace)
	}
	if c.IsSet("retry-timeout") {
		if e.retry = c.Duration("retry-timeout"); e.retry <= 0 {
			return usageErrorf(c, "--retry-timeout must be positive, got %v", e.retry)
		}
	}
	// The wait is bounded only when asked for: --wait is lock's name for
	// --timeout.
	wait, bounded := e.timeout, e.timeoutSet
	if c.IsSet("wait") {
		if w := c.Duration("wait"); bounded && w != wait {
			return usageErrorf(c, "--wait and --timeout are the same option for lock; give one")
		} else if w <= 0 {
			return usageErrorf(c, "--wait must be positive, got %v", w)
		} else {
			wait, bounded = w, true
		}
	}
	e.cancel() // the whole-command deadline setup armed: lock has its own
	if bounded {
		e.ctx, e.cancel = context.WithTimeout(c.Context, wait)
	} else {
		e.ctx, e.cancel = context.WithCancel(c.Context)
	}
	name, err := e.name("lock", arg)
	if err != nil {
		return err
	}
	var others []string // a multi-lock's further names
	for _, a := range args[1:] {
		n, err := e.name("lock", a)
		if err != nil {
			return err
		}
		if n == name || slices.Contains(others, n) {
			return usageErrorf(c, "%s is named twice", n)
		}
		others = append(others, n)
	}
	// Look CMD up before touching the cell: a typo must not take the lock.
	// (exec.Command checks only names without a slash.)
	if _, err := exec.LookPath(argv[0]); err != nil {
		return cannotRun(name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if cmd.Err != nil {
		return cannotRun(name, cmd.Err)
	}
	// Deletion of NAME while CMD runs must end the lock's context at once.
	opts = append(opts, client.WithEvents(client.OnHandleInvalid))
	l := &locker{e: e, name: name, others: others, ephemeral: c.Bool("ephemeral"), semLimit: c.Int("limit")}
	if l.ephemeral {
		// done counts the waiters: a cached stat could miss one.
		opts = append(opts, client.WithoutCache())
	}
	l.sharedStreams()
	defer l.finish()

	// Signals are caught from the start: one that arrives while lockcell
	// is still getting the lock gives up the wait, and one that arrives
	// while CMD runs is passed on to CMD.
	sigc := make(chan os.Signal, 4)
	for _, sig := range forwardedSignals {
		// An ignored signal (nohup, or & in a script) stays ignored, by
		// lockcell and by CMD, which inherits that.
		if !signal.Ignored(sig) {
			signal.Notify(sigc, sig)
		}
	}
	defer signal.Stop(sigc)

	// A signal cancels everything getting the lock involves, dialing
	// and creating parents included.
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	e.ctx = ctx
	got := make(chan error, 1)
	go func() { got <- l.acquire(mode, c.Bool("try"), opts) }()
	select {
	case err = <-got:
	case sig := <-sigc:
		cancel()
		<-got // the wait is withdrawn; closing the session drops any lock
		return &exitStatus{code: 128 + signalNumber(sig), kind: "interrupted",
			err: fmt.Errorf("lock %s: interrupted by %v while getting the lock", name, sig)}
	}
	if bounded && errors.Is(err, context.DeadlineExceeded) {
		why := "the cell did not answer in time"
		if l.waiting {
			why = "another session still holds it"
		}
		return &exitStatus{code: exitTimeout, kind: "timeout",
			err: fmt.Errorf("lock %s: not acquired within %v (%s); the command was not run", name, wait, why)}
	}
	if err != nil {
		return err
	}
	if e.verbose {
		l.warnf("holding %s (%s, lock generation %d)", name, l.seq.Mode(), l.seq.Generation())
	}

	seqs, names := sequencer.EncodeText(l.seq), name
	for i, h := range l.more {
		seqs += " " + sequencer.EncodeText(l.moreSeqs[i])
		names += " " + h.Name()
	}
	cmd.Env = append(os.Environ(), seqEnv+"="+seqs, lockEnv+"="+names)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	cmd.WaitDelay = waitDelay
	ch := newChild(cmd, e.stdin)
	// The lock's context ends the moment the lock may be gone (any of a
	// multi-lock's).
	held, stopHeld := l.lockContext()
	defer stopHeld()
	if held.Err() != nil {
		return l.lostError(context.Cause(held), "the command was not run")
	}
	if err := cmd.Start(); err != nil {
		return cannotRun(name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait() // the status is in cmd.ProcessState
		close(done)
	}()

	lost := held.Done()
	// The handle's stream carries the release requests (and the
	// deletion, which ends the lock's context too).
	asked := l.h.Events()
	var why error // the lock's context's cause, once it ended
	var kill <-chan time.Time
	for running := true; running; {
		select {
		case <-done:
			running = false
		case sig := <-sigc:
			ch.signal(sig)
		case ev, ok := <-asked:
			switch {
			case !ok:
				asked = nil // closed with the session: the lock's context says why
			case ev.Kind == client.ReleaseRequested:
				l.askedToRelease(*ev.ReleaseRequest, onAsked, ch)
			}
		case <-lost:
			lost, asked, why = nil, nil, context.Cause(held)
			l.warnf("lock %s may be lost (%s): stopping the command (SIGTERM, SIGKILL in %v)", name, errText(why), killAfter)
			ch.signal(syscall.SIGTERM)
			kill = time.After(killAfter)
		case <-kill:
			kill = nil
			l.warnf("the command is still running %v after SIGTERM: SIGKILL", killAfter)
			ch.signal(syscall.SIGKILL)
		}
	}
	if why != nil {
		// Closing the session (finish) gives up a lock the cell may
		// still hold for us.
		return l.lostError(why, "the command was stopped")
	}
	if cmd.ProcessState == nil {
		return fail("lock", name, errors.New("lost track of the command"))
	}
	code := exitCode(cmd.ProcessState)
	if err := l.done(); err != nil {
		if errors.Is(err, client.ErrSessionExpired) || l.isLost() {
			// The lock went before the command ended, even if the
			// Expired event had not arrived yet.
			return l.lostError(err, "the command ended before lockcell noticed")
		}
		// The session's end releases the lock anyway: the command's
		// status is still the answer.
		l.warnf("%v", fail("unlock", name, err))
	}
	if code != exitOK {
		return &exitStatus{code: code}
	}
	return nil
}

// cannotRun reports a command that could not be started the way shells do:
// exit 127 when it is not found, 126 when it cannot be executed.
func cannotRun(name string, err error) error {
	code := 126
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = 127
	}
	return &exitStatus{code: code, kind: "cannot_run", err: fmt.Errorf("lock %s: %w", name, err)}
}

// locker is the state of one lock run.
type locker struct {
	e         *env
	name      string
	ephemeral bool // --ephemeral: delete the file when done, if nobody waits
	h         *client.Handle
	seq       client.Sequencer
	// others are a multi-lock's further names; more and moreSeqs their
	// handles and sequencers, once held.
	others   []string
	more     []*client.Handle
	moreSeqs []client.Sequencer
	semLimit int // -n: the lock is a semaphore of this many permits
	// waiting: the lock's node is open and the wait for the lock has
	// begun (set by acquire, read once acquire has returned).
	waiting bool

	lost      chan struct{} // closed when the session expires
	watchDone chan struct{} // closed when the event watcher ends
}

// sharedStreams makes lockcell's own stderr messages safe to interleave
// with the command's output: when the streams are not files, exec copies
// the command's output into them from its own goroutines.
func (l *locker) sharedStreams() {
	e := l.e
	if _, ok := e.stderr.(*os.File); ok {
		return
	}
	sw := &syncWriter{w: e.stderr}
	if sameWriter(e.stdout, e.stderr) {
		e.stdout = sw
	}
	e.stderr = sw
}

func sameWriter(a, b io.Writer) bool {
	return reflect.TypeOf(a) == reflect.TypeOf(b) && reflect.TypeOf(a).Comparable() && a == b
}

// syncWriter serializes writes to a writer shared by goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// warnf prints a message of lockcell's own on stderr.
func (l *locker) warnf(format string, args ...any) {
	fmt.Fprintf(l.e.stderr, "lockcell: "+format+"\n", args...)
}

// acquire dials, starts watching the session, opens the lock's node
// (creating it and its parents as put does), takes the lock and gets its
// sequencer.
func (l *locker) acquire(mode client.LockMode, try bool, opts []client.OpenOption) error {
	e, ctx := l.e, l.e.ctx
	cl, err := e.client()
	if err != nil {
		return fail("lock", l.name, err)
	}
	l.watch(cl)
	if len(l.others) > 0 {
		return l.acquireAll(cl, try, opts)
	}
	for {
		h, err := l.open(cl, opts)
		if err != nil {
			return err
		}
		l.h = h
		l.waiting = true
		if try {
			var ok bool
			if ok, err = h.TryAcquire(ctx, mode); err == nil && !ok {
				return &opError{op: "lock", path: l.name, err: client.ErrLockHeld,
					hint: "another session holds it; --try does not wait"}
			}
		} else {
			err = h.Acquire(ctx, mode)
		}
		if err == nil {
			l.seq, err = h.GetSequencer(ctx)
		}
		if errors.Is(err, client.ErrHandleInvalid) && ctx.Err() == nil {
			// The file was deleted under us (another run's --ephemeral,
			// or rm): the lock of a file that is gone protects nothing,
			// so make the file again and queue anew.
			h.Close()
			l.h = nil
			continue
		}
		if err != nil {
			return fail("lock", l.name, err)
		}
		return nil
	}
}

// acquireAll opens every name of a multi-lock and takes their locks all
// at once (client.AcquireAll), then gets each one's sequencer.
func (l *locker) acquireAll(cl *client.Client, try bool, opts []client.OpenOption) error {
	ctx := l.e.ctx
	h, err := l.open(cl, opts)
	if err != nil {
		return err
	}
	l.h = h
	for _, name := range l.others {
		h, err := l.openName(cl, name, opts)
		if err != nil {
			return err
		}
		l.more = append(l.more, h)
	}
	all := append([]*client.Handle{l.h}, l.more...)
	l.waiting = true
	if try {
		ok, err := cl.TryAcquireAll(ctx, all...)
		if err == nil && !ok {
			return &opError{op: "lock", path: l.name, err: client.ErrLockHeld,
				hint: "another session holds one of them or waits; --try does not wait"}
		}
		if err != nil {
			return fail("lock", l.name, err)
		}
	} else if err := cl.AcquireAll(ctx, all...); err != nil {
		return fail("lock", l.name, err)
	}
	if l.seq, err = l.h.GetSequencer(ctx); err != nil {
		return fail("lock", l.name, err)
	}
	for _, h := range l.more {
		seq, err := h.GetSequencer(ctx)
		if err != nil {
			return fail("lock", h.Name(), err)
		}
		l.moreSeqs = append(l.moreSeqs, seq)
	}
	return nil
}

// lockContext is the context of the locks held: it ends when any of
// them may be lost. The caller calls stop when done with it.
func (l *locker) lockContext() (held context.Context, stop func()) {
	if len(l.more) == 0 {
		return l.h.LockContext(), func() {}
	}
	// The first holding to end ends it, with its cause.
	ctx, cancel := context.WithCancelCause(context.Background())
	for _, h := range append([]*client.Handle{l.h}, l.more...) {
		one := h.LockContext()
		context.AfterFunc(one, func() { cancel(context.Cause(one)) })
	}
	return ctx, func() { cancel(nil) }
}

// open opens the lock's file, creating it and its missing parents as put
// does; a directory is refused with a message that says so.
func (l *locker) open(cl *client.Client, opts []client.OpenOption) (*client.Handle, error) {
	return l.openName(cl, l.name, opts)
}

// openName is open of one of a multi-lock's names.
func (l *locker) openName(cl *client.Client, name string, opts []client.OpenOption) (*client.Handle, error) {
	const open = client.Read | client.Write | client.Create
	h, err := cl.Open(l.e.ctx, name, open, append(opts, client.WithParents())...)
	var oe *client.OpError
	if errors.Is(err, client.ErrExists) && errors.As(err, &oe) && oe.Path == name && l.semLimit != 0 {
		// A file that is not a semaphore of -n permits (or a directory).
		return nil, &opError{op: "lock", path: name, err: err,
			hint: fmt.Sprintf("-n %d needs a semaphore of %d permits: the name is taken by something else", l.semLimit, l.semLimit)}
	}
	if errors.Is(err, client.ErrExists) && errors.As(err, &oe) && oe.Path == name {
		// Create without Excl fails only on a node of the other kind (a
		// parent's failure is MkdirAll's, naming the parent).
		return nil, &opError{op: "lock", path: name, err: wire.Errorf(wire.CodeIsDir, "%s is a directory", name),
			hint: "lock takes a file's lock: name a file, such as " + name + "/lock"}
	}
	if err != nil {
		return nil, fail("lock", name, err)
	}
	return h, nil
}

// watch reads the session's events until the client is closed, so the
// warnings come as things happen and Expired (how lock learns that its
// lock is gone) arrives as itself: a stream nobody reads fills up, and
// the library then puts an Overflow in place of what it cannot keep.
func (l *locker) watch(cl *client.Client) {
	l.lost, l.watchDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(l.watchDone)
		expired := false
		for ev := range cl.Events() {
			switch ev.Kind {
			case client.Jeopardy:
				l.warnf("warning: session in jeopardy: no answer from the cell within the lease; the lock may be lost")
			case client.Safe:
				l.warnf("session safe again: the lock is still held")
			case client.Expired:
				if !expired {
					expired = true
					close(l.lost)
				}
			case client.MasterFailover:
				if l.e.verbose {
					l.warnf("the cell has a new master (epoch %d); the lock is still held", ev.Epoch)
				}
			}
		}
	}()
}

func (l *locker) isLost() bool {
	if l.lost == nil {
		return false
	}
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

// lostError is lock's answer when the lock may be lost: exit
// exitLockLost, naming why (the lock context's cause).
func (l *locker) lostError(why error, hint string) error {
	return &exitStatus{code: exitLockLost, kind: "lock_lost",
		err: &opError{op: "lock", path: l.name, err: fmt.Errorf("the lock may be lost: %s", errText(why)), hint: hint}}
}

// done gives the lock up once the command has ended, with a deadline of
// its own: --timeout bounds getting the lock, and the command may have run
// far longer. With --ephemeral it deletes the file instead, while still
// holding the lock, when nobody waits for it: a run that opened the file
// meanwhile finds it gone and makes it again.
func (l *locker) done() error {
	ctx, cancel := context.WithTimeout(context.Background(), l.e.timeout)
	defer cancel()
	if len(l.more) > 0 {
		return l.e.cl.ReleaseAll(ctx, append([]*client.Handle{l.h}, l.more...)...)
	}
	if l.ephemeral {
		st, err := l.h.GetStat(ctx)
		if err == nil && st.LockWaiters == 0 {
			err = l.h.Delete(ctx)
			if err == nil || errors.Is(err, client.ErrSessionExpired) {
				return err
			}
		}
		if errors.Is(err, client.ErrSessionExpired) {
			return err
		}
		// Someone waits (or the delete failed): hand the lock on.
	}
	return l.h.Release(ctx)
}

// finish ends the session (which releases whatever is still held) and
// waits for the event watcher, so nothing writes to stderr after lock
// returns.
func (l *locker) finish() {
	l.e.close()
	if l.watchDone != nil {
		<-l.watchDone
	}
}
