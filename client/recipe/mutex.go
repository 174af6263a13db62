package recipe

import (
	"context"
	"fmt"
	"sync"

	"lockcell/client"
)

// Mutex is a re-entrant exclusive lock on a file (Curator's
// InterProcessMutex): the first Acquire takes the cell's lock, nested
// Acquires on the same Mutex value only count, and the lock is released
// when Release has been called as many times as Acquire.
//
// Re-entrancy is per Mutex value, as Curator's is per thread: Go has no
// goroutine identity to key it on, so the value is the holder. Every
// Acquire on a value that holds the lock succeeds at once, whichever
// goroutine calls it; give each independent holder (each goroutine or
// request that must exclude the others) its own Mutex, even in one
// process, and pass a holder's value down to the code it calls that
// locks again. A Mutex value is safe for concurrent use: an Acquire that
// finds another Acquire of the same value waiting at the cell waits for
// it (or for ctx).
//
// Failure modes: the lock is the file's exclusive lock, so the cell's
// rules hold: it is lost when the session expires (then LockContext ends
// with client.ErrLockLost, and the next Acquire on this value fails with
// that cause instead of counting, until Release has unwound the nesting),
// and through a jeopardy LockContext ends although the lock may survive.
// Work under the lock should run under LockContext and be fenced with
// the sequencer of Handle where a resource server checks it. The file is
// permanent, so its lock-delay (client.WithLockDelay in the options)
// holds after a failed holder's session.
type Mutex struct {
	c     *client.Client
	name  string
	opts  []client.OpenOption
	gate  chan struct{} // serialises Acquire and Release: a token while one runs
	mu    sync.Mutex    // guards h and depth, for Depth and Handle
	h     *client.Handle
	depth int
}

// NewMutex returns a re-entrant lock on the file name (resolved as by
// client.Client.Open; created with its parents on the first Acquire),
// opened with opts. It makes no call.
func NewMutex(c *client.Client, name string, opts ...client.OpenOption) *Mutex {
	return &Mutex{c: c, name: client.ResolveName(c.Cell(), name), opts: opts, gate: make(chan struct{}, 1)}
}

func (m *Mutex) lock(ctx context.Context) error {
	select {
	case m.gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Mutex) unlock() { <-m.gate }

// Acquire takes the lock, waiting for other holders in FIFO order, or
// counts one more level when this value holds it already. It fails,
// without counting, when the held lock may have been lost (its
// LockContext ended): the error wraps the cause.
func (m *Mutex) Acquire(ctx context.Context) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.unlock()
	if m.depth > 0 {
		if lc := m.h.LockContext(); lc.Err() != nil {
			return &client.OpError{Op: "acquire", Path: m.name, Err: context.Cause(lc)}
		}
		m.mu.Lock()
		m.depth++
		m.mu.Unlock()
		return nil
	}
	opts := append([]client.OpenOption{client.WithParents()}, m.opts...)
	h, err := m.c.Open(ctx, m.name, client.Read|client.Write|client.Create, opts...)
	if err != nil {
		return err
	}
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		h.Close()
		return err
	}
	m.mu.Lock()
	m.h, m.depth = h, 1
	m.mu.Unlock()
	return nil
}

// Release undoes one Acquire; the last one releases the cell's lock (and
// closes the file's handle). Releasing a Mutex that is not held fails with
// client.ErrNotHeld. The error of the final release is the handle's
// Close's: the lock is gone either way (a lock the session lost is not
// held by it any more).
func (m *Mutex) Release(ctx context.Context) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.unlock()
	if m.depth == 0 {
		return &client.OpError{Op: "release", Path: m.name, Err: fmt.Errorf("%w: not acquired", client.ErrNotHeld)}
	}
	m.mu.Lock()
	m.depth--
	h := m.h
	if m.depth == 0 {
		m.h = nil
	}
	m.mu.Unlock()
	if m.depth > 0 {
		return nil
	}
	return h.CloseContext(ctx)
}

// Depth is how many Acquires are not yet released: 0 when not held.
func (m *Mutex) Depth() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.depth
}

// Handle is the handle holding the lock while held (nil otherwise): its
// LockContext ends the moment the lock may be lost, and its GetSequencer
// fences writes made under it. Do not Release or Close it.
func (m *Mutex) Handle() *client.Handle {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.h
}
