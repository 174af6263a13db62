package client

import (
	"context"
	"time"
)

// Clock is the client library's source of time for everything measured
// against the session lease: the local lease end, jeopardy, the grace
// period, the RetryTimeout budget of a call and the back-off waits between
// tries. Network I/O timeouts (dial, a connection's write deadline, the
// bound on a closing call) are the operating system's and use the real
// clock.
//
// Only differences between readings of one Clock are used, never its
// absolute value, so a wall-clock step changes nothing as long as Now
// carries a monotonic reading (time.Now's does). What the library does
// assume is a bound on the clock's rate: see Config.Clock.
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

// realClock is the default Clock: time.Now and time.AfterFunc.
type realClock struct{}

// Now returns time.Now().
func (realClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// sleep waits d on the client's clock. It returns nil when d has passed,
// ctx's error when ctx ends first, and ErrClosed when the client closes
// first.
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	done := make(chan struct{})
	t := c.clock.AfterFunc(d, func() { close(done) })
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stop:
		return ErrClosed
	}
}

// withDeadline is context.WithDeadline with deadline read on the client's
// clock: the returned context's Err is context.DeadlineExceeded once the
// clock reaches deadline, as with context.WithDeadline. On the real clock
// it is context.WithDeadline itself.
func (c *Client) withDeadline(parent context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if _, ok := c.clock.(realClock); ok {
		return context.WithDeadline(parent, deadline)
	}
	ctx, cancel := context.WithCancelCause(parent)
	t := c.clock.AfterFunc(deadline.Sub(c.clock.Now()), func() { cancel(context.DeadlineExceeded) })
	return clockDeadlineCtx{ctx}, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// clockDeadlineCtx reports the cause of its end as its error, so a
// deadline on the client's clock reads as context.DeadlineExceeded (which
// the KeepAlive loop takes to mean "the local lease ran out"), not as
// context.Canceled. It has no Deadline: the real time at which the
// client's clock reaches one is not known in advance.
type clockDeadlineCtx struct{ context.Context }

func (c clockDeadlineCtx) Err() error {
	if c.Context.Err() == nil {
		return nil
	}
	return context.Cause(c.Context)
}
