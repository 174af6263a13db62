package master

import (
	"sort"
	"sync"
	"testing"
	"time"

	"lockcell/wire"
)

// fakeClock is a Clock that moves only when the test advances it. Due
// callbacks run in Advance's goroutine, in deadline order, before it
// returns, so a test knows what fired.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]bool
}

type fakeTimer struct {
	c  *fakeClock
	at time.Time
	f  func()
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), timers: map[*fakeTimer]bool{}}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers[t] = true
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	armed := t.c.timers[t]
	delete(t.c.timers, t)
	return armed
}

// Advance moves the clock on by d and runs every callback now due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
			delete(c.timers, t)
		}
	}
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

// armedIn reports whether a timer is set to fire d from now.
func (c *fakeClock) armedIn(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.timers {
		if t.at.Equal(c.now.Add(d)) {
			return true
		}
	}
	return false
}

// armed counts the timers set and not yet fired or stopped.
func (c *fakeClock) armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// fakeSessions is the sessions part as the invalidator sees it: leases
// the test creates, acknowledges, extends and ends by hand. Every session
// it holds counts as heard on a KeepAlive (the real rule is tested on the
// real sessions part).
type fakeSessions struct {
	mu     sync.Mutex
	seq    uint64
	leases map[uint64]*lease
}

func newFakeSessions() *fakeSessions { return &fakeSessions{leases: map[uint64]*lease{}} }

func (f *fakeSessions) add(session uint64, end time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leases[session] = newLease(end)
}

func (f *fakeSessions) cacheable(session, seq uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.leases[session]
	return l != nil && !l.closed && l.acked >= seq
}

func (f *fakeSessions) queueInvalidation(session uint64, name string) (*lease, uint64, time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.leases[session]
	if l == nil || l.closed {
		return nil, 0, time.Time{}, false
	}
	f.seq++
	l.events = append(l.events, wire.Event{Seq: f.seq, Kind: wire.EventInvalidate, Path: name})
	return l, f.seq, l.end, true
}

func (f *fakeSessions) ackState(l *lease, seq uint64) (bool, bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return l.acked >= seq || l.closed, l.ignored > 0 && l.delivered >= seq, l.ackChLocked()
}

func (f *fakeSessions) drainingLease(l *lease) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return l.idle
}

// queued returns the invalidations queued for session, oldest first.
func (f *fakeSessions) queued(session uint64) []wire.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.Event(nil), f.leases[session].events...)
}

// ackAll acknowledges every event queued for session, as its next
// KeepAlive would.
func (f *fakeSessions) ackAll(session uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.leases[session]
	if n := len(l.events); n > 0 {
		l.acked = l.events[n-1].Seq
		l.events = nil
		l.signalAckLocked()
	}
}

// ackEverySession acknowledges every event queued for every session at
// one instant, under one lock.
func (f *fakeSessions) ackEverySession() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.leases {
		if n := len(l.events); n > 0 {
			l.acked = l.events[n-1].Seq
			l.events = nil
			l.signalAckLocked()
		}
	}
}

// ignore records that session was sent its queued events on a reply and
// then kept calling without acknowledging them.
func (f *fakeSessions) ignore(session uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.leases[session]
	if n := len(l.events); n > 0 {
		l.delivered = l.events[n-1].Seq
	}
	l.ignored++
}

// extend moves session's lease end, as a KeepAlive would.
func (f *fakeSessions) extend(session uint64, end time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leases[session].end = end
}

// end closes session, as its expiry or CloseSession would.
func (f *fakeSessions) end(session uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.leases[session]
	l.closed = true
	l.signalAckLocked()
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
