package client

import (
	"context"
	"errors"
)

// Campaign runs the election recipe on the file name: every candidate
// opens it as an ephemeral file (creating it if needed) and blocks in
// Acquire; the winner writes identity as the contents and gets the handle
// back. The candidate leads for as long as it holds the lock: Release or
// Close on the handle resigns, and the session's end resigns too (the lock
// goes to the next candidate after the handle's lock-delay, opts may set
// it with WithLockDelay). When the file is deleted under the waiting
// candidates (it dies with its creator's session), they re-create it and
// queue again. Campaign returns only when this candidate leads, ctx ends,
// or the session fails.
func (c *Client) Campaign(ctx context.Context, name string, identity []byte, opts ...OpenOption) (*Handle, error) {
	for {
		h, err := c.Open(ctx, name, Read|Write|Create|Ephemeral, opts...)
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
// wrote, or ErrNotFound when nobody campaigns.
func (c *Client) Leader(ctx context.Context, name string) ([]byte, error) {
	h, err := c.Open(ctx, name, Read)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	data, _, err := h.GetContentsAndStat(ctx)
	return data, err
}
