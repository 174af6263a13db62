package master

import "time"

// Clock is the master's one source of time: lease ends, invalidation
// deadlines, caching bars, lock-delay hand-offs, KeepAlive parking, the
// expiry and proof loops and read rations all read it. Tests drive a
// master's parts with a clock they advance by hand; a cell runs on
// RealClock. Context deadlines that only bound a call to Raft stay on the
// real clock: they are not part of any lease arithmetic; so does the
// membership upkeep, which compares Raft's own last-contact times.
type Clock interface {
	// Now returns the current time on this clock.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed on this
	// clock, unless the returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call made by Clock.AfterFunc. *time.Timer is one.
type Timer interface {
	// Stop prevents the call if it has not started, and reports whether
	// it did (time.Timer's contract).
	Stop() bool
}

// RealClock is the default Clock: time.Now and time.AfterFunc.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// after returns a channel closed once d has passed on clk, and the stop
// that releases its timer early. Every wait in the master that selects on
// time uses it, so a test clock moves all of them.
func after(clk Clock, d time.Duration) (<-chan struct{}, func() bool) {
	ch := make(chan struct{})
	t := clk.AfterFunc(d, func() { close(ch) })
	return ch, t.Stop
}
