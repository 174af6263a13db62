package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"lockcell/client"
)

// opener prepares client i of a workload: it opens the client's handles
// (into bc.handles, closed with the session) and sets bc.op.
type opener func(ctx context.Context, bc *benchClient, i int) error

// errWrongValue is a read that returned other contents than the file
// was given: a read workload counts it as an error.
var errWrongValue = errors.New("bench: read returned other contents than were written")

// workload creates the names the workload shares (as the setup session)
// and returns how each client opens its own.
func (r *run) workload(ctx context.Context) (opener, error) {
	p := r.cfg.Prefix
	switch r.cfg.Workload {
	case LockUncontended:
		h, err := r.create(ctx, r.admin, p+"/lock-u", true)
		if err != nil {
			return nil, err
		}
		h.Close()
		return func(ctx context.Context, bc *benchClient, i int) error {
			h, err := r.create(ctx, bc.c, fmt.Sprintf("%s/lock-u/%d", p, i), false)
			if err != nil {
				return err
			}
			bc.handles = append(bc.handles, h)
			bc.op = func(ctx context.Context) (time.Duration, error) {
				t := time.Now()
				if err := h.Acquire(ctx, client.Exclusive); err != nil {
					return 0, err
				}
				if err := h.Release(ctx); err != nil {
					return 0, err
				}
				return time.Since(t), nil
			}
			return nil
		}, nil

	case LockContended:
		name := p + "/lock-c"
		h, err := r.create(ctx, r.admin, name, false)
		if err != nil {
			return nil, err
		}
		h.Close()
		return func(ctx context.Context, bc *benchClient, i int) error {
			h, err := bc.c.Open(ctx, name, client.Read|client.Write)
			if err != nil {
				return err
			}
			bc.handles = append(bc.handles, h)
			bc.op = func(ctx context.Context) (time.Duration, error) {
				t := time.Now()
				if err := h.Acquire(ctx, client.Exclusive); err != nil {
					return 0, err
				}
				wait := time.Since(t)
				// Held for no time: the next waiter is granted in the
				// release's own replicated step.
				if err := h.Release(ctx); err != nil {
					return 0, err
				}
				return wait, nil
			}
			return nil
		}, nil

	case Read:
		name := p + "/read"
		h, err := r.create(ctx, r.admin, name, false, client.WithContents(r.val))
		if err != nil {
			return nil, err
		}
		h.Close()
		var opts []client.OpenOption
		if r.cfg.Variant != Cached {
			opts = append(opts, client.WithoutCache())
		}
		follower := r.cfg.Variant == Follower
		return func(ctx context.Context, bc *benchClient, i int) error {
			h, err := bc.c.Open(ctx, name, client.Read, opts...)
			if err != nil {
				return err
			}
			bc.handles = append(bc.handles, h)
			var info client.ReadInfo
			var ropts []client.ReadOption
			if follower {
				ropts = []client.ReadOption{client.MaxStaleness(FollowerStaleness), client.WithReadInfo(&info)}
			}
			bc.op = func(ctx context.Context) (time.Duration, error) {
				t := time.Now()
				b, _, err := h.GetContentsAndStat(ctx, ropts...)
				if err != nil {
					return 0, err
				}
				if follower {
					if info.Follower {
						r.followerReads.Add(1)
					} else {
						r.masterReads.Add(1)
					}
				}
				if !bytes.Equal(b, r.val) {
					return 0, errWrongValue
				}
				return time.Since(t), nil
			}
			return nil
		}, nil

	case Write:
		h, err := r.create(ctx, r.admin, p+"/write", true)
		if err != nil {
			return nil, err
		}
		h.Close()
		return func(ctx context.Context, bc *benchClient, i int) error {
			h, err := r.create(ctx, bc.c, fmt.Sprintf("%s/write/%d", p, i), false, client.WithContents(r.val))
			if err != nil {
				return err
			}
			bc.handles = append(bc.handles, h)
			st, err := h.GetStat(ctx)
			if err != nil {
				return err
			}
			gen := st.ContentGen
			bc.op = func(ctx context.Context) (time.Duration, error) {
				t := time.Now()
				st, err := h.SetContentsAndStat(ctx, r.val, client.IfGeneration(gen))
				if err != nil {
					if errors.Is(err, client.ErrGenerationMismatch) {
						// Not timed: learn the generation, so the next
						// write can succeed.
						if st2, gerr := h.GetStat(ctx); gerr == nil {
							gen = st2.ContentGen
						}
					}
					return 0, err
				}
				gen = st.ContentGen
				return time.Since(t), nil
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("unknown workload %q", r.cfg.Workload)
}
