package master

import (
	"context"
	"errors"
	"sync"
	"time"
)

// leadershipProof shares rounds of contact with a quorum (VerifyLeader)
// among the calls that need one, so that the master grants a client lease
// only on evidence of its leadership, not on belief.
//
// Why belief is not enough: Raft's leader believes it leads until its
// leader-lease check says otherwise, and that check runs on Raft's leader
// loop. A leader loop stuck in a log write (a stalled disk) or a process
// frozen after the check never runs it, so a master could go on
// extending client leases after a successor was elected, and its clients
// would go on trusting their caches and their locks. A round of contact
// that began at time V and succeeded proves no successor was elected
// before V (a quorum still followed this term after V), and a successor
// waits a whole lease from its own start before it expires anyone
// (docs/spec.md#fail-over).
// So a lease that ends by V + LeaseTTL can never outlast what a successor
// honours.
type leadershipProof struct {
	verify func(context.Context) error
	now    func() time.Time

	mu      sync.Mutex
	proven  time.Time // start of the latest round that succeeded
	pending *proofRound
	// stale is closed while the master is unproven (see setStale); nil
	// until first asked for.
	stale       chan struct{}
	staleClosed bool
	// roundCtx bounds the rounds until roundEnd (roundContext).
	roundCtx    context.Context
	roundCancel context.CancelFunc
	roundEnd    time.Time
}

// staleSignal returns a channel that is closed when the master has gone
// half a lease without a proof, so that calls parked on the master's
// word (KeepAlives) can give up at once instead of at their own timers.
func (p *leadershipProof) staleSignal() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stale == nil {
		p.stale = make(chan struct{})
	}
	return p.stale
}

// setStale closes the stale signal when stale, and opens a new one once a
// proof came back.
func (p *leadershipProof) setStale(stale bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stale == nil {
		p.stale = make(chan struct{})
	}
	switch {
	case stale && !p.staleClosed:
		close(p.stale)
		p.staleClosed = true
	case !stale && p.staleClosed:
		p.stale, p.staleClosed = make(chan struct{}), false
	}
}

// provenSince reports whether a round of contact that began at or after t
// has succeeded.
func (p *leadershipProof) provenSince(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.proven.Before(t)
}

// note records a proof obtained another way: a command proposed at t
// committed, so a quorum followed this leader after t.
func (p *leadershipProof) note(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.After(p.proven) {
		p.proven = t
	}
}

type proofRound struct {
	start time.Time
	done  chan struct{}
	err   error
	ctx   context.Context // bounds the round (roundContext)
}

// Rounds are bounded by a minute at most and roundMinBound at least.
const (
	roundMaxBound = time.Minute
	roundMinBound = roundMaxBound / 2
)

// roundContext returns the context that bounds a new round, on the real
// clock (it bounds a call to Raft). Rounds share one for up to half a
// minute, so that a round, which a read may cost, allocates no context
// and timer of its own: each round ends within a minute of its start and
// has at least half a minute. Called under p.mu, when no round is in
// flight, so replacing (and cancelling) the shared context cuts no round
// short.
func (p *leadershipProof) roundContext() context.Context {
	if p.roundCtx == nil || time.Until(p.roundEnd) < roundMinBound {
		if p.roundCancel != nil {
			p.roundCancel()
		}
		p.roundEnd = time.Now().Add(roundMaxBound)
		p.roundCtx, p.roundCancel = context.WithDeadline(context.Background(), p.roundEnd)
	}
	return p.roundCtx
}

// since returns the start of a successful round of contact that began no
// earlier than notBefore: a round already proven, a round in flight, or a
// new one. Concurrent callers share one round.
func (p *leadershipProof) since(ctx context.Context, notBefore time.Time) (time.Time, error) {
	return p.sinceWithin(ctx, notBefore, 0)
}

// errProofTimeout is sinceWithin's answer when its bound ran out first.
var errProofTimeout = errors.New("master: no proof of leadership within the bound")

// sinceWithin is since, giving up with errProofTimeout after bound (on
// the real clock: it bounds a call to Raft) unless bound is 0. A read
// bounds its wait this way rather than with a context.WithTimeout, which
// costs a context, a timer and a channel on every read; the timer here
// is pooled.
func (p *leadershipProof) sinceWithin(ctx context.Context, notBefore time.Time, bound time.Duration) (time.Time, error) {
	var timer *time.Timer // taken from proofTimers once a wait begins
	defer func() {
		if timer != nil {
			timer.Stop() // since Go 1.23 no stale tick is left in timer.C for its next user
			proofTimers.Put(timer)
		}
	}()
	var expired <-chan time.Time
	for {
		p.mu.Lock()
		if !p.proven.Before(notBefore) {
			v := p.proven
			p.mu.Unlock()
			return v, nil
		}
		// One round at a time: while Raft cannot answer (a stalled
		// leader loop) callers wait for the round in flight instead of
		// piling up more.
		r := p.pending
		if r == nil {
			r = &proofRound{start: p.now(), done: make(chan struct{}), ctx: p.roundContext()}
			p.pending = r
			go p.run(r)
		}
		p.mu.Unlock()
		if bound > 0 && timer == nil {
			timer = proofTimers.Get().(*time.Timer)
			timer.Reset(bound)
			expired = timer.C
		}
		select {
		case <-r.done:
			if r.err != nil {
				return time.Time{}, r.err
			}
			if !r.start.Before(notBefore) {
				return r.start, nil
			}
			// It began too early to vouch for this caller: go again.
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-expired:
			return time.Time{}, errProofTimeout
		}
	}
}

// proofTimers are sinceWithin's timers, stopped while in the pool.
var proofTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// run carries out round r. It is bounded (roundContext) so that a Raft
// that never answers does not leak rounds; callers stop waiting at their
// own deadlines.
func (p *leadershipProof) run(r *proofRound) {
	r.err = p.verify(r.ctx)
	p.mu.Lock()
	if r.err == nil && r.start.After(p.proven) {
		p.proven = r.start
	}
	if p.pending == r {
		p.pending = nil
	}
	p.mu.Unlock()
	close(r.done)
}

// proveLoop renews the leadership proof every tenth of a lease while the
// master serves (its owner is Server.wg; it ends with stop). Calls that
// propose a command are admitted only while the proof is fresh (see
// unproven): a master whose Raft cannot confirm its leadership, as when
// its leader loop hangs on a stalled disk, stops taking calls it could
// only hold until they time out, and its clients go on to a successor.
func (s *Server) proveLoop(stop <-chan struct{}) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.wg.Add(1)
	go func() { // a round in flight ends with the term of service
		defer s.wg.Done()
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	every := max(s.cfg.LeaseTTL/10, 10*time.Millisecond)
	s.mu.Lock()
	since := s.servingSince
	s.mu.Unlock()
	defer s.proof.setStale(false) // a later term starts unsignalled
	for {
		tick, stopTick := after(s.cfg.Clock, every)
		select {
		case <-stop:
			stopTick()
			return
		case <-tick:
		}
		// Wait for the round only until the next tick: a round Raft
		// cannot answer goes on without us (since shares it), and the
		// stale check below runs on time.
		rctx, rcancel := context.WithTimeout(ctx, every)
		s.proof.since(rctx, s.cfg.Clock.Now().Add(-every))
		rcancel()
		// Parked KeepAlives learn at once that this master cannot
		// prove it leads: their clients go on to a successor a quarter
		// lease sooner, most before their leases make them doubt.
		s.proof.setStale(s.unproven(since))
	}
}

// unproven reports whether the master has gone half a lease without a
// proof of leadership, after serving at least that long (since).
func (s *Server) unproven(since time.Time) bool {
	bound := s.cfg.Clock.Now().Add(-s.cfg.LeaseTTL / 2)
	return since.Before(bound) && !s.proof.provenSince(bound)
}
