package client

import (
	"fmt"

	"lockcell/wire"
)

// lockBroken ends the lock context of the handle a LockBroken event names
// (only that handle: others of this client on the same name may be
// waiting, or be the new holder).
func (c *Client) lockBroken(ev wire.Event) {
	cause := fmt.Errorf("%w: %s held at generation %d (reason: %q)", ErrLockBroken, ev.Path, ev.Gen, ev.Reason)
	c.locks.mu.Lock()
	var hs []*Handle
	for h := range c.locks.byPath[ev.Path] {
		if h.id.Load() == ev.Handle {
			hs = append(hs, h)
		}
	}
	c.locks.mu.Unlock()
	for _, h := range hs {
		h.endBrokenLock(ev.Gen, cause)
	}
}

// endBrokenLock ends the handle's lock context if it is still that of the
// broken generation: a grant at a later generation, heard before this
// event, stays live.
func (h *Handle) endBrokenLock(gen uint64, cause error) {
	h.mu.Lock()
	held := h.held
	h.mu.Unlock()
	if held == nil || held.gen != gen {
		return
	}
	h.endLock(cause)
}
