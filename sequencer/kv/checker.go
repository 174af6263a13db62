package kv

import (
	"context"
	"errors"
	"sync"

	"lockcell/client"
)

// CellChecker is a sequencer.Checker that asks a lockcell cell through a
// client.Client, as a long-running resource server needs: when the
// client's session has expired (the cell was unreachable for longer than
// the grace period) it dials a new one instead of failing forever. It is
// safe for concurrent use.
type CellChecker struct {
	cfg client.Config

	mu sync.Mutex
	c  *client.Client
}

// DialChecker dials the cell once (so a wrong configuration fails at
// start) and returns a checker over that session.
func DialChecker(ctx context.Context, cfg client.Config) (*CellChecker, error) {
	k := &CellChecker{cfg: cfg}
	if _, err := k.client(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// CheckSequencer asks the cell whether seq is still valid. A malformed or
// forged sequencer is an error wrapping client.ErrBadSequencer.
func (k *CellChecker) CheckSequencer(ctx context.Context, seq []byte) (bool, error) {
	for try := 0; ; try++ {
		c, err := k.client(ctx)
		if err != nil {
			return false, err
		}
		ok, err := c.CheckSequencer(ctx, seq)
		if try == 0 && (errors.Is(err, client.ErrSessionExpired) || errors.Is(err, client.ErrUnknownSession)) {
			k.drop(c)
			continue
		}
		return ok, err
	}
}

// Close ends the checker's session.
func (k *CellChecker) Close() error {
	k.mu.Lock()
	c := k.c
	k.c = nil
	k.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Close()
}

func (k *CellChecker) client(ctx context.Context) (*client.Client, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		return k.c, nil
	}
	c, err := client.Dial(ctx, k.cfg)
	if err != nil {
		return nil, err
	}
	k.c = c
	return c, nil
}

// drop forgets a dead client (if it is still the current one).
func (k *CellChecker) drop(c *client.Client) {
	k.mu.Lock()
	if k.c == c {
		k.c = nil
	}
	k.mu.Unlock()
	go c.Close() // an expired session closes without asking the cell
}
