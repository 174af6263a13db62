package client

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoLeader means nobody leads the election on a name: no candidate
// holds its lock (none campaigns, the leader resigned, or its session
// failed and the lock is under lock-delay), or the candidate that just
// took the lock has not yet written its identity. When the election's file
// does not exist at all the error also matches ErrNotFound.
var ErrNoLeader = errors.New("lockcell: no leader")

// Campaign runs the election recipe on the file name: every candidate
// opens it (creating it if needed) and blocks in Acquire; the winner
// writes identity as the contents and gets the handle back. The candidate
// leads for as long as it holds the lock: Release or Close on the handle
// resigns at once, and so does a clean Client.Close.
//
// When the leader's session fails instead (its process dies, or it loses
// the cell for longer than its lease), no other candidate leads before the
// handle's lock-delay has passed since the session expired (opts may set
// it with WithLockDelay; the cell's default otherwise), so a deposed
// leader that is still running has that long to notice and stop. That is
// why the file is permanent, not ephemeral: an ephemeral file dies with
// its creator's session, and its lock-delay with it. The file outlives the
// election too, holding the last leader's identity; Leader tells from the
// lock whether anyone leads. Candidates need write permission on name.
//
// When the file is deleted under the waiting candidates, they re-create
// it and queue again. Campaign returns only when this candidate leads, ctx
// ends, or the session fails.
func (c *Client) Campaign(ctx context.Context, name string, identity []byte, opts ...OpenOption) (*Handle, error) {
	for {
		h, err := c.Open(ctx, name, Read|Write|Create, opts...)
		if err != nil {
			return nil, err
		}
		err = h.Acquire(ctx, Exclusive)
		if err == nil {
			if err = h.SetContents(ctx, identity); err == nil {
				return h, nil
			}
		}
		h.Close()
		if !errors.Is(err, ErrHandleInvalid) {
			return nil, err
		}
	}
}

// Leader returns the identity the current leader of the election on name
// wrote. It fails with ErrNoLeader while nobody holds the election's lock
// exclusively, and also while the holder has not yet written its identity
// (the contents are older than its hold, so they name an earlier leader).
func (c *Client) Leader(ctx context.Context, name string) ([]byte, error) {
	h, err := c.Open(ctx, name, Read)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w: %w", ErrNoLeader, err)
		}
		return nil, err
	}
	defer h.Close()
	data, st, err := h.GetContentsAndStat(ctx)
	switch {
	case errors.Is(err, ErrHandleInvalid): // deleted since the Open
		return nil, fmt.Errorf("%w: %w", ErrNoLeader, err)
	case err != nil:
		return nil, err
	case st.LockMode != Exclusive || st.ContentGen <= st.LockGen:
		// Generations are the indexes of the entries that set them: a
		// leader's identity is written after its Acquire, so contents no
		// newer than the hold are a predecessor's.
		return nil, opErr("leader", name, ErrNoLeader)
	}
	return data, nil
}
