package sequencer

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Checker asks the cell whether a sequencer is still valid: correctly
// signed, and its lock still held at that generation in that mode.
// *client.Client satisfies it.
type Checker interface {
	CheckSequencer(ctx context.Context, seq []byte) (bool, error)
}

// GuardConfig configures a Guard.
type GuardConfig struct {
	// Checker, when set, is asked before the guard accepts a sequencer it
	// has not recently confirmed. Without it the guard fences locally only:
	// it trusts that sequencers come from the cell, so a client could
	// forge a high generation and lock everyone else out; give it a
	// Checker wherever clients are not trusted.
	Checker Checker
	// CacheTTL is how long a confirmation from the cell is reused for the
	// same sequencer (default 1 s; negative disables the cache). A holder
	// that lost its lock within that window is still fenced locally once
	// its successor has written. Permit sequencers are never cached: the
	// cell is asked on each of their requests.
	CacheTTL time.Duration
	// Cell, when set, rejects sequencers of other cells.
	Cell string
}

// Guard fences a resource server's writes: it remembers, per lock, the
// highest generation it has accepted and rejects any request whose
// sequencer is older. A semaphore holder's sequencer (mode Permit) is the
// exception: it is accepted exactly when the cell confirms it, whatever
// generations were seen, and a Guard without a Checker refuses it with
// ErrNeedsChecker. It is safe for concurrent use; its state can be
// saved and restored (State, Restore, or JSON) so fencing survives a
// restart of the resource server.
type Guard struct {
	cfg GuardConfig

	mu      sync.Mutex
	highest map[string]uint64        // lock key -> highest accepted generation
	locks   map[string]chan struct{} // lock key -> its fence: a one-slot semaphore, so a wait can end with ctx
	checked map[string]time.Time     // sequencer bytes -> when the cell confirmed it
}

// NewGuard returns an empty guard.
func NewGuard(cfg GuardConfig) *Guard {
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = time.Second
	}
	return &Guard{cfg: cfg, highest: map[string]uint64{}, locks: map[string]chan struct{}{}, checked: map[string]time.Time{}}
}

// Do runs fn only if seq is acceptable, holding the lock's fence for the
// whole of fn, so no older holder's request can be accepted while a newer
// one is being applied and no two requests of one lock interleave their
// check and their effect. It returns the parsed sequencer and fn's error,
// or an error wrapping ErrStale, ErrMalformed, ErrNeedsChecker or the
// Checker's error, or ctx's error when ctx ends while it waits for the
// fence. The requests of a semaphore's permit holders share its fence
// too: they do not interleave at one guard, though none fences another.
func (g *Guard) Do(ctx context.Context, seq []byte, fn func(Sequencer) error) (Sequencer, error) {
	s, err := Parse(seq)
	if err != nil {
		return s, err
	}
	if g.cfg.Cell != "" && s.Cell != g.cfg.Cell {
		return s, fmt.Errorf("%w: sequencer of cell %q, this guard serves %q", ErrStale, s.Cell, g.cfg.Cell)
	}
	key := s.Key()
	g.mu.Lock()
	fence := g.locks[key]
	if fence == nil {
		fence = make(chan struct{}, 1)
		g.locks[key] = fence
	}
	g.mu.Unlock()
	select {
	case fence <- struct{}{}:
	case <-ctx.Done():
		return s, fmt.Errorf("sequencer: waiting for the fence of %s: %w", s.Path, ctx.Err())
	}
	defer func() { <-fence }()
	if err := g.admit(ctx, s, seq); err != nil {
		return s, err
	}
	if fn == nil {
		return s, nil
	}
	return s, fn(s)
}

// Check is Do without an action: it reports whether seq would be accepted
// now, and records its generation if so (a Permit sequencer's is never
// recorded). Prefer Do, which holds the fence
// across the write it protects.
func (g *Guard) Check(ctx context.Context, seq []byte) (Sequencer, error) {
	return g.Do(ctx, seq, nil)
}

// admit runs under the lock's fence.
func (g *Guard) admit(ctx context.Context, s Sequencer, seq []byte) error {
	if s.Mode == Permit {
		return g.admitPermit(ctx, s, seq)
	}
	key := s.Key()
	g.mu.Lock()
	high := g.highest[key]
	g.mu.Unlock()
	if s.Generation < high && !bugNoFence {
		return fmt.Errorf("%w: %s generation %d is older than %d, already accepted", ErrStale, s.Path, s.Generation, high)
	}
	if g.cfg.Checker != nil && !g.recentlyConfirmed(seq) {
		ok, err := g.cfg.Checker.CheckSequencer(ctx, seq)
		if err != nil {
			return fmt.Errorf("sequencer: asking the cell: %w", err)
		}
		if !ok {
			return fmt.Errorf("%w: the cell says %s generation %d no longer holds the lock", ErrStale, s.Path, s.Generation)
		}
		if g.cfg.CacheTTL > 0 {
			g.mu.Lock()
			g.checked[string(seq)] = time.Now()
			if len(g.checked) > 4096 {
				g.pruneLocked()
			}
			g.mu.Unlock()
		}
	}
	g.mu.Lock()
	if s.Generation > g.highest[key] {
		g.highest[key] = s.Generation
	}
	g.mu.Unlock()
	return nil
}

// admitPermit admits a semaphore holder's sequencer on the cell's word
// alone, asked every time. The highest-generation rule does not apply:
// the holders of one semaphore hold at once, so a holder with a lower
// generation is not superseded by one with a higher. Nor is the answer
// cached: a lock holder that loses its lock is fenced locally once its
// successor writes here, which bounds what a cached confirmation can let
// through, but a permit holder that loses its permit has no successor
// whose write would fence it, so a cached confirmation would let it
// write for the whole TTL after the cell stopped vouching for it. Its
// generation is not recorded either, so it never raises Highest.
func (g *Guard) admitPermit(ctx context.Context, s Sequencer, seq []byte) error {
	if g.cfg.Checker == nil {
		return fmt.Errorf("%w (%s generation %d)", ErrNeedsChecker, s.Path, s.Generation)
	}
	ok, err := g.cfg.Checker.CheckSequencer(ctx, seq)
	if err != nil {
		return fmt.Errorf("sequencer: asking the cell: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: the cell says %s generation %d no longer holds its permit", ErrStale, s.Path, s.Generation)
	}
	return nil
}

func (g *Guard) recentlyConfirmed(seq []byte) bool {
	if g.cfg.CacheTTL <= 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.checked[string(seq)]
	return ok && time.Since(t) < g.cfg.CacheTTL
}

func (g *Guard) pruneLocked() {
	for k, t := range g.checked {
		if time.Since(t) >= g.cfg.CacheTTL {
			delete(g.checked, k)
		}
	}
}

// State returns the highest accepted generation per lock, keyed by
// "cell\x00path", for the resource server to persist.
func (g *Guard) State() map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]uint64, len(g.highest))
	for k, v := range g.highest {
		out[k] = v
	}
	return out
}

// Restore merges saved state: generations only ever rise.
func (g *Guard) Restore(state map[string]uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.highest == nil { // a zero Guard being unmarshalled
		g.highest, g.locks, g.checked = map[string]uint64{}, map[string]chan struct{}{}, map[string]time.Time{}
		if g.cfg.CacheTTL == 0 {
			g.cfg.CacheTTL = time.Second
		}
	}
	for k, v := range state {
		if v > g.highest[k] {
			g.highest[k] = v
		}
	}
}

// MarshalJSON saves the guard's fencing state.
func (g *Guard) MarshalJSON() ([]byte, error) { return json.Marshal(g.State()) }

// UnmarshalJSON restores state saved by MarshalJSON.
func (g *Guard) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	g.Restore(m)
	return nil
}

// Highest returns the highest generation of s's lock (its cell and path)
// the guard has accepted, 0 if none.
func (g *Guard) Highest(s Sequencer) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest[s.Key()]
}
