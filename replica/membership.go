package replica

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"lockcell/fsm"
)

// Configuration returns the latest Raft configuration this replica knows.
// It does not wait on raft's loops.
func (r *Replica) Configuration() (fsm.Configuration, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fsm.Configuration{}, mapRaftErr(err)
	}
	out := fsm.Configuration{Index: f.Index()}
	for _, s := range f.Configuration().Servers {
		out.Servers = append(out.Servers, fsm.Server{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	sort.Slice(out.Servers, func(i, j int) bool { return out.Servers[i].ID < out.Servers[j].ID })
	return out, nil
}

// AddNonvoter adds id at raftAddr as a non-voter (an existing member keeps
// its suffrage), provided the configuration is still the one written at
// prevIndex (0: whatever it is). It returns once the change is committed.
func (r *Replica) AddNonvoter(ctx context.Context, id, raftAddr string, prevIndex uint64) (uint64, error) {
	if cfg, err := r.Configuration(); err == nil {
		if _, ok := cfg.Find(id); !ok {
			r.progress.forget(id) // a new member: nothing it answered before counts
		}
	}
	return r.change(ctx, func(timeout time.Duration) raft.IndexFuture {
		return r.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), prevIndex, timeout)
	})
}

// Promote makes the member id a voter, provided the configuration is still
// the one written at prevIndex. The caller decides that it has caught up;
// raft does not check.
func (r *Replica) Promote(ctx context.Context, id string, prevIndex uint64) (uint64, error) {
	cfg, err := r.Configuration()
	if err != nil {
		return 0, err
	}
	s, ok := cfg.Find(id)
	if !ok {
		return 0, fmt.Errorf("replica: %q is not a member", id)
	}
	return r.change(ctx, func(timeout time.Duration) raft.IndexFuture {
		return r.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(s.RaftAddr), prevIndex, timeout)
	})
}

// Remove removes the member id, provided the configuration is still the one
// written at prevIndex. A leader that removes itself steps down once the
// change commits.
func (r *Replica) Remove(ctx context.Context, id string, prevIndex uint64) (uint64, error) {
	idx, err := r.change(ctx, func(timeout time.Duration) raft.IndexFuture {
		return r.raft.RemoveServer(raft.ServerID(id), prevIndex, timeout)
	})
	if err == nil {
		r.progress.forget(id)
	}
	return idx, err
}

// change runs one configuration change and waits for it to commit, never
// on raft's future alone (see Apply).
func (r *Replica) change(ctx context.Context, start func(timeout time.Duration) raft.IndexFuture) (uint64, error) {
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	f := start(timeout)
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		if err != nil {
			if strings.Contains(err.Error(), "configuration changed since") {
				// raft returns this one unwrapped, as a formatted error.
				return 0, fmt.Errorf("%w: %v", fsm.ErrConfigurationChanged, err)
			}
			return 0, mapRaftErr(err)
		}
		return f.Index(), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: %v", fsm.ErrUnknownOutcome, ctx.Err())
	case <-r.done:
		return 0, fmt.Errorf("%w: shut down with a configuration change in flight", fsm.ErrClosed)
	}
}

// TransferLeadershipTo hands Raft leadership to the voter id (raft's
// LeadershipTransferToServer: it catches id up and tells it to stand at
// once) and waits until raft has done so or given up. An operator moves
// the master to a chosen machine with it; the master refuses nothing
// while it runs but proposes nothing new either.
func (r *Replica) TransferLeadershipTo(ctx context.Context, id string) error {
	cfg, err := r.Configuration()
	if err != nil {
		return err
	}
	s, ok := cfg.Find(id)
	if !ok || !s.Voter {
		return fmt.Errorf("replica: %q is not a voting member", id)
	}
	f := r.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(s.RaftAddr))
	errc := make(chan error, 1)
	go func() { errc <- f.Error() }()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("replica %s: leadership transfer to %s: %w", r.cfg.ID, id, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return fsm.ErrClosed
	}
}
