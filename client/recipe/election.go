package recipe

import (
	"context"
	"errors"
	"fmt"

	"lockcell/client"
)

// ErrNoLeader means nobody leads the election on a name: no candidate
// holds its lock (none campaigns, the leader resigned, or its session
// failed and the lock is under lock-delay), or the candidate that just
// took the lock has not yet written its identity. When the election's file
// does not exist at all the error also matches client.ErrNotFound.
var ErrNoLeader = errors.New("lockcell: no leader")

// Campaign runs the election recipe on the file name (resolved as by
// client.Client.Open): every candidate opens it (creating it if needed)
// and blocks in Acquire; the winner writes identity as the contents and
// gets the handle back. The candidate leads for as long as it holds the
// lock: Release or Close on the handle resigns at once, and so does a
// clean Client.Close. Handle.LockContext ends the moment leadership may
// be lost; Handle.GetSequencer gives the sequencer that fences the
// leader's writes. Lead runs this loop for a program that leads for as
// long as it runs.
//
// When the leader's session fails instead (its process dies, or it loses
// the cell for longer than its lease), no other candidate leads before the
// handle's lock-delay has passed since the session expired (opts may set
// it with client.WithLockDelay; the cell's default otherwise), so a
// deposed leader that is still running has that long to notice and stop.
// That is why the file is permanent, not ephemeral: an ephemeral file dies
// with its creator's session, and its lock-delay with it. The file
// outlives the election too, holding the last leader's identity; Leader
// tells from the lock whether anyone leads. Candidates need write
// permission on name.
//
// When the file is deleted under the waiting candidates, they re-create
// it and queue again. Campaign returns only when this candidate leads, ctx
// ends, or the session fails.
func Campaign(ctx context.Context, c *client.Client, name string, identity []byte, opts ...client.OpenOption) (*client.Handle, error) {
	for {
		h, err := c.Open(ctx, name, client.Read|client.Write|client.Create, opts...)
		if err != nil {
			return nil, err
		}
		err = h.Acquire(ctx, client.Exclusive)
		if err == nil {
			if err = h.SetContents(ctx, identity); err == nil {
				return h, nil
			}
		}
		h.Close()
		if !errors.Is(err, client.ErrHandleInvalid) {
			return nil, err
		}
	}
}

// Leader returns the identity the current leader of the election on name
// wrote. It fails with ErrNoLeader while nobody holds the election's lock
// exclusively, and also while the holder has not yet written its identity
// (the contents are older than its hold, so they name an earlier leader).
func Leader(ctx context.Context, c *client.Client, name string) ([]byte, error) {
	name = client.ResolveName(c.Cell(), name)
	h, err := c.Open(ctx, name, client.Read)
	if err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return nil, fmt.Errorf("%w: %w", ErrNoLeader, err)
		}
		return nil, err
	}
	defer h.Close()
	data, st, err := h.GetContentsAndStat(ctx)
	switch {
	case errors.Is(err, client.ErrHandleInvalid): // deleted since the Open
		return nil, fmt.Errorf("%w: %w", ErrNoLeader, err)
	case err != nil:
		return nil, err
	case !leads(st):
		return nil, &client.OpError{Op: "leader", Path: name, Err: ErrNoLeader}
	}
	return data, nil
}

// leads reports whether st is an election's file with a leader: its lock
// held exclusively, by a holder that wrote its identity after taking it.
// Generations are the indexes of the entries that set them: a leader's
// identity is written after its Acquire, so contents no newer than the
// hold are a predecessor's.
func leads(st client.Stat) bool {
	return st.LockMode == client.Exclusive && st.ContentGen > st.LockGen
}
