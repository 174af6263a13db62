package recipe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"lockcell/client"
)

// LeadOption configures Lead.
type LeadOption func(*leadOptions)

type leadOptions struct {
	open    []client.OpenOption
	requeue bool
}

// WithOpenOptions gives Lead the options of the Open of the election's
// file, as Campaign's opts: client.WithLockDelay above all, which sets
// how long the other candidates wait after this one's session fails, so
// how long a deposed leader has to notice and stop.
func WithOpenOptions(opts ...client.OpenOption) LeadOption {
	return func(o *leadOptions) { o.open = append(o.open, opts...) }
}

// Requeue makes Lead resign and campaign again, at the tail of the queue,
// when the function returns nil while it leads, instead of returning nil:
// the program stays a candidate and gives the others their turn (as
// Curator's LeaderSelector with autoRequeue). Without it, the function
// returning nil is the program giving up leadership for good.
func Requeue() LeadOption {
	return func(o *leadOptions) { o.requeue = true }
}

type sequencerKey struct{}

// SequencerFrom returns the sequencer of the leadership that a leader
// context given by Lead stands for: the lock's generation signed by the
// cell. A leader hands it with every write to the resources it leads
// (a sequencer.Guard, Handle.SetSequencer, client.IfSequencer), so a
// write it sends after it was deposed, however late it arrives, is
// refused once a later leader has shown a newer one. It reports false for
// a context that does not come from Lead.
func SequencerFrom(ctx context.Context) (client.Sequencer, bool) {
	seq, ok := ctx.Value(sequencerKey{}).(client.Sequencer)
	return seq, ok
}

// Lead is a candidate that leads for as long as the program runs: it
// campaigns on the election's file name as Campaign does and, while it
// leads, calls lead with a leader context that ends the moment leadership
// may be lost. It is the loop every leader program otherwise writes
// around Campaign, with the cases that are easy to get wrong settled:
//
//   - The leader context is the election handle's LockContext joined with
//     ctx: it ends when ctx ends, and when the client can no longer be
//     sure it holds the lock: its local lease ran out (jeopardy), the
//     session expired, the admin broke the lock (client.ErrLockBroken),
//     the file was deleted, the Client was closed. context.Cause says
//     which. SequencerFrom gives the sequencer of this leadership.
//
//   - Jeopardy is not a defeat. The local lease runs out before the
//     master's does, so a short loss of the cell (a network blip, a master
//     fail-over) ends the leader context although the session may
//     survive and the master keep the lock. Resigning then would hand
//     leadership to another candidate for nothing. Lead instead asks the
//     cell (TryAcquire on its handle, retried while the Client looks for a
//     master) whether the handle still holds the lock at the generation it
//     led under. If it does, no other candidate can have led meanwhile (a
//     lock that passes to another gets a new generation), and Lead calls
//     lead again with a fresh leader context: same leadership, same
//     sequencer. If the lock is gone (another holds it, or it was taken
//     back at a new generation), or the handle is dead (the session
//     expired, the file was deleted), Lead closes the handle and
//     campaigns again.
//
//   - lead is never called while another candidate may lead. It is
//     called only right after the cell granted or confirmed the lock to
//     this handle, with a context that is live only while the client is
//     sure of its lease. Another candidate gets the lock only after this
//     one released it, or after its session expired at the master (which
//     is after the client's own lease ran out and its leader context
//     ended) plus the handle's lock-delay (WithOpenOptions with
//     client.WithLockDelay; the cell's default otherwise). So a lead that
//     stops within the lock-delay of its context ending never overlaps
//     the next leader; a pause longer than that (a stopped process) is
//     what the sequencer is for.
//
//   - What lead returns while its context still lives is its decision:
//     nil gives up leadership, and Lead resigns (closes the handle, which
//     releases the lock at once, with no lock-delay) and returns nil, or
//     with Requeue campaigns again at the tail; an error makes Lead resign
//     and return it. What lead returns after its context ended is its
//     answer to that end, not a decision: nil, or an error matching
//     context.Canceled or the context's cause, lets Lead settle the
//     leadership as above; any other error is returned after resigning.
//
//   - When ctx ends, Lead waits for lead to return, resigns and returns
//     ctx.Err() (or lead's own error, if it is not about ctx).
//
//   - A session that expires ends the leadership. Lead then campaigns
//     again if the Client has gone on with a new session (a Client that
//     renews its session after expiry answers new calls on it: its
//     Session id changes), and otherwise returns the error, matching
//     client.ErrSessionExpired: the Client is of no further use. Errors
//     that mean this handle or this attempt is dead but the Client is not
//     (the file deleted, no master reachable for now, the lock broken
//     between the grant and the identity's write) make Lead campaign
//     again while ctx lives, waiting between tries from 50 ms doubling up
//     to 5 s. Any other error (client.ErrPermission, client.ErrClosed, a
//     bad name) is returned.
//
// Each leadership writes identity as the file's contents, so Leader and
// Observe name this candidate while it leads.
func Lead(ctx context.Context, c *client.Client, name string, identity []byte, lead func(leaderCtx context.Context) error, opts ...LeadOption) error {
	if lead == nil {
		return &client.OpError{Op: "lead", Path: name, Err: fmt.Errorf("%w: no leader function", client.ErrBadRequest)}
	}
	l := &leader{c: c, name: name, identity: identity}
	for _, opt := range opts {
		opt(&l.o)
	}
	defer l.drop() // resign, however Lead ends
	for {
		if err := l.win(ctx); err != nil {
			return err
		}
		lockCtx := l.h.LockContext()
		var err error
		// A leadership already in doubt (jeopardy between the grant and
		// now) is settled before lead ever sees it.
		if lockCtx.Err() == nil {
			leaderCtx, cancel := context.WithCancelCause(context.WithValue(ctx, sequencerKey{}, l.seq))
			stop := context.AfterFunc(lockCtx, func() { cancel(context.Cause(lockCtx)) })
			err = lead(leaderCtx)
			stop()
			cancel(nil)
		}
		switch {
		case ctx.Err() != nil:
			if err != nil && !answers(err, ctx) && !answers(err, lockCtx) {
				return err
			}
			return ctx.Err()
		case lockCtx.Err() == nil: // lead decided while it led
			l.drop()
			if err != nil || !l.o.requeue {
				return err
			}
			continue
		}
		if err != nil && !answers(err, lockCtx) {
			return err
		}
		cause := context.Cause(lockCtx)
		switch {
		case errors.Is(cause, client.ErrJeopardy):
			if err := l.reconfirm(ctx); err != nil {
				return err
			}
		case errors.Is(cause, client.ErrClosed):
			// Lead never closes its handle while lead runs: the Client
			// was closed.
			return fmt.Errorf("lead %s: %w", l.h.Name(), cause)
		default: // expired, deleted, broken: this handle leads no more
			l.drop()
		}
	}
}

// answers reports whether err, returned by a leader function after ctx
// ended, is only that end passed on: ctx's error or its cause.
func answers(err error, ctx context.Context) bool {
	return ctx.Err() != nil && (errors.Is(err, ctx.Err()) || errors.Is(err, context.Cause(ctx)))
}

// leader is the state of one Lead: the handle it leads through (nil
// while it has none) and the sequencer of its leadership.
type leader struct {
	c        *client.Client
	name     string
	identity []byte
	o        leadOptions

	h   *client.Handle
	seq client.Sequencer
	bo  backoff
}

// drop closes the handle, if any: a resignation when it still holds the
// lock (released at once, with no lock-delay), a local clean-up when it is
// dead already.
func (l *leader) drop() {
	if l.h != nil {
		l.h.Close()
		l.h, l.seq = nil, nil
	}
}

// win campaigns until this candidate leads, unless it leads already.
func (l *leader) win(ctx context.Context) error {
	for l.h == nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		sess := l.c.Session()
		h, err := Campaign(ctx, l.c, l.name, l.identity, l.o.open...)
		if err == nil {
			var seq client.Sequencer
			if seq, err = h.GetSequencer(ctx); err == nil {
				l.h, l.seq = h, seq
				l.bo.reset()
				return nil
			}
			h.Close()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !l.retryable(err, sess) {
			return err
		}
		if err := l.bo.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// retryable reports whether a campaign that failed with err, begun on the
// session sess, is worth another try: the attempt died, not the Client.
func (l *leader) retryable(err error, sess uint64) bool {
	for _, transient := range []error{client.ErrNoMaster, client.ErrHandleInvalid, client.ErrJeopardy,
		client.ErrLockBroken, client.ErrNotHeld, client.ErrReleased, client.ErrCanceled, client.ErrLockDelay, client.ErrEpochChanged} {
		if errors.Is(err, transient) {
			return true
		}
	}
	// The session is over; a Client that renews its session goes on with
	// another id.
	if errors.Is(err, client.ErrSessionExpired) || errors.Is(err, client.ErrUnknownSession) {
		return l.c.Session() != sess
	}
	return false
}

// reconfirm settles a leadership whose leader context ended in jeopardy:
// it asks the cell whether the handle still holds the lock at the
// generation it led under, retrying while the Client looks for a master
// (the Client's own grace period decides when the session is lost). It
// keeps the handle when the lock is still held at that generation and the
// client is sure of it again, and drops it otherwise.
func (l *leader) reconfirm(ctx context.Context) error {
	gen := l.seq.Generation()
	for {
		ok, err := l.h.TryAcquire(ctx, client.Exclusive)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil && !ok: // another holds the lock: it passed on
			l.drop()
			return nil
		case err == nil && l.h.LockContext().Err() == nil:
			seq, err := l.h.GetSequencer(ctx)
			if err != nil || seq.Generation() != gen {
				// Taken back at a new generation: another may have led
				// in between. This handle's leadership is over; queue
				// again as any candidate would.
				l.drop()
				return nil
			}
			l.seq = seq
			l.bo.reset()
			return nil
		case err == nil:
			// The master answered, but the client has not yet heard a
			// KeepAlive since its lease ran out: the new lock context
			// started out ended. Ask again once it may be sure.
		case !errors.Is(err, client.ErrNoMaster):
			l.drop() // expired, deleted, broken: win decides what next
			return nil
		}
		if err := l.bo.wait(ctx); err != nil {
			return err
		}
	}
}

// backoff spaces Lead's retries: 50 ms doubling up to 5 s, from the start
// again after a success.
type backoff struct{ next time.Duration }

const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 5 * time.Second
)

func (b *backoff) reset() { b.next = 0 }

func (b *backoff) wait(ctx context.Context) error {
	b.next = min(max(2*b.next, backoffMin), backoffMax)
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
