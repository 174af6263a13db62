package mirror

import (
	"context"
	"sync"
	"time"
)

// target is one target cell's queue of changes not yet applied, and its
// re-sync request. Its mutex is a leaf, held across no call.
type target struct {
	name string
	root string // where the source subtree goes

	mu sync.Mutex
	// pending are source names changed and not yet applied, each with
	// when the mirror first heard of a change to it not yet applied;
	// queue holds them in that order (each once).
	pending map[string]time.Time
	queue   []string
	// inflight is the name being applied (or retried) and since when it
	// waits; zero when none.
	inflight     string
	inflightSeen time.Time
	// resync asks for a full re-sync: since when the target may lack
	// changes (the oldest one it waited for when asked), and a count that
	// a re-sync compares to know no newer request came while it walked.
	resync      bool
	resyncSince time.Time
	resyncGen   uint64
	wake        chan struct{}

	resyncs map[string]uint64 // by reason
	applied uint64
	lastErr string
	synced  bool // a full copy has completed at least once
}

func (t *target) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// changed queues a change to src heard at now; past max names it asks
// for a re-sync instead.
func (t *target) changed(src string, now time.Time, max int) {
	t.mu.Lock()
	if _, ok := t.pending[src]; !ok {
		if len(t.pending) >= max {
			t.mu.Unlock()
			t.requestResync(ReasonOverflow, now)
			return
		}
		t.pending[src] = now
		t.queue = append(t.queue, src)
	}
	t.mu.Unlock()
	t.poke()
}

// requestResync asks for a full re-sync: it replaces the queue (the walk
// reads every name as it is once it starts, after this request), keeping
// the oldest waiting change's time for the lag.
func (t *target) requestResync(reason string, now time.Time) {
	t.mu.Lock()
	since := now
	if len(t.queue) > 0 {
		since = t.pending[t.queue[0]]
	}
	if t.resync && t.resyncSince.Before(since) {
		since = t.resyncSince
	}
	t.resync, t.resyncSince = true, since
	t.resyncGen++
	t.resyncs[reason]++
	t.pending, t.queue = map[string]time.Time{}, nil
	t.mu.Unlock()
	t.poke()
}

// oldest is when the oldest change not yet applied was heard, and
// whether there is one.
func (t *target) oldest() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var o time.Time
	take := func(s time.Time) {
		if o.IsZero() || s.Before(o) {
			o = s
		}
	}
	if t.resync {
		take(t.resyncSince)
	}
	if t.inflight != "" {
		take(t.inflightSeen)
	}
	if len(t.queue) > 0 {
		take(t.pending[t.queue[0]])
	}
	return o, !o.IsZero()
}

// next returns the work to do: a re-sync (with its request count), or a
// name to apply (taken off the queue into inflight), or nothing.
func (t *target) next() (resync bool, gen uint64, src string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.resync {
		return true, t.resyncGen, ""
	}
	if t.inflight != "" {
		return false, 0, t.inflight
	}
	if len(t.queue) == 0 {
		return false, 0, ""
	}
	src = t.queue[0]
	t.queue = t.queue[1:]
	if len(t.queue) == 0 {
		t.queue = nil
	}
	t.inflight, t.inflightSeen = src, t.pending[src]
	delete(t.pending, src)
	return false, 0, src
}

// done records the outcome of a step.
func (t *target) done(resync bool, gen uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.lastErr = err.Error()
		return
	}
	t.lastErr = ""
	switch {
	case resync && gen == t.resyncGen:
		t.resync, t.synced = false, true
	case !resync:
		t.inflight = ""
		t.applied++
	}
}

// runTarget applies the target's work until ctx ends: re-syncs first,
// then changes in the order heard, one at a time; a failed step is tried
// again after a growing wait, the lag growing meanwhile.
func (m *Mirror) runTarget(ctx context.Context, t *target) {
	wait := backoff{max: m.cfg.Retry}
	for ctx.Err() == nil {
		resync, gen, src := t.next()
		var err error
		switch {
		case resync:
			err = m.resync(ctx, t)
		case src != "":
			err = m.apply(ctx, t, src)
		default:
			select {
			case <-t.wake:
			case <-ctx.Done():
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		t.done(resync, gen, err)
		if err != nil {
			m.log.Warn("mirror: a step in a target failed; trying again", "target", t.name, "name", src, "resync", resync, "err", err)
			if sleep(ctx, wait.next()) != nil {
				return
			}
			continue
		}
		wait = backoff{max: m.cfg.Retry}
	}
}
