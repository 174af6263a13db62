package recipe

import (
	"context"
	"errors"
	"slices"
	"time"

	"lockcell/client"
)

// Member is one member of a group: the name it joined under and the data
// it published.
type Member struct {
	Name string
	Data []byte
}

// Membership is this process's place in a group (Join): an ephemeral
// file that stays while the membership's handle is open and the session
// lives.
type Membership struct {
	h *client.Handle
}

// Join makes member a member of the group in the directory dir (resolved
// as by client.Client.Open; it and its parents are created if missing):
// an ephemeral file dir/member holding data. The member stays listed
// until Close, a clean Client.Close, or the end of the session: a process
// that dies or loses the cell for longer than its lease and grace period
// leaves the group when its session expires, so Members and WatchGroup
// never list a dead process for longer than that. Through a jeopardy the
// member stays listed (the session may survive); a Client whose session
// expired has left, and must Join again (with Config.RenewSession the
// client re-opens the member's handle in its new session: its Reopened
// or ReopenFailed event says whether the file is back). Joining under a
// name that is already a member fails with client.ErrExists, also while
// a dead process's session under that name has not yet expired.
func Join(ctx context.Context, c *client.Client, dir, member string, data []byte) (*Membership, error) {
	dir = client.ResolveName(c.Cell(), dir)
	h, err := c.Open(ctx, dir+"/"+member, client.Read|client.Write|client.Create|client.Excl|client.Ephemeral,
		client.WithParents(), client.WithContents(data))
	if err != nil {
		return nil, err
	}
	return &Membership{h: h}, nil
}

// Name is the member's full file name.
func (m *Membership) Name() string { return m.h.Name() }

// Close leaves the group: the member's file is deleted once no handle
// holds it open (a reader's Members may hold it for a moment).
func (m *Membership) Close() error { return m.h.Close() }

// Members lists the members of the group in dir, in name order: a
// listing of the directory and a read of each member's data (a member
// that left in between is left out). A missing directory is an empty
// group.
func Members(ctx context.Context, c *client.Client, dir string) ([]Member, error) {
	dir = client.ResolveName(c.Cell(), dir)
	dh, err := c.Open(ctx, dir, client.Read|client.Directory)
	if errors.Is(err, client.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer dh.Close()
	return readMembers(ctx, c, dh, dir)
}

func readMembers(ctx context.Context, c *client.Client, dh *client.Handle, dir string) ([]Member, error) {
	entries, err := dh.ReadDir(ctx)
	if err != nil {
		return nil, err
	}
	ms := []Member{}
	for _, e := range entries {
		if e.Dir {
			continue
		}
		h, err := c.Open(ctx, dir+"/"+e.Name, client.Read)
		if errors.Is(err, client.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		data, _, err := h.GetContentsAndStat(ctx)
		h.Close()
		if errors.Is(err, client.ErrHandleInvalid) || errors.Is(err, client.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ms = append(ms, Member{Name: e.Name, Data: data})
	}
	return ms, nil
}

// GroupChange is one state of a group, as WatchGroup reports it.
type GroupChange struct {
	// Members is the group's members in name order.
	Members []Member
	// Err is why the group could not be read; WatchGroup reports it once
	// and ends.
	Err error
}

func sameMembers(a, b []Member) bool {
	return slices.EqualFunc(a, b, func(x, y Member) bool { return x.Name == y.Name && string(x.Data) == string(y.Data) })
}

// WatchGroup reports the members of the group in dir as they change: the
// first value is the group when it starts, each later one a member set
// that differs from the one before. It creates dir (and its parents) if
// missing, so it may start before anyone joins. It opens the directory
// with ChildAdded and ChildRemoved events before its first listing, and
// lists again on every event (an Overflow or Reannounce included, which
// tell of events lost) and at least every QueueRecheck, so no change is
// missed; values are coalesced, so a reader that falls behind gets the
// latest set, never a stale one, and may miss sets in between.
//
// The channel is closed when ctx ends, when the Client is closed or its
// session ends (the Client's own events say why), or after a value whose
// Err says why the group could not be read.
func WatchGroup(ctx context.Context, c *client.Client, dir string) <-chan GroupChange {
	dir = client.ResolveName(c.Cell(), dir)
	out := make(chan GroupChange, 1)
	go func() {
		defer close(out)
		fail := func(err error) {
			select {
			case out <- GroupChange{Err: err}:
			case <-ctx.Done():
			}
		}
		if err := c.MkdirAll(ctx, dir); err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			return
		}
		dh, err := c.Open(ctx, dir, client.Read|client.Directory,
			client.WithEvents(client.OnChildAdded|client.OnChildRemoved|client.OnHandleInvalid))
		if err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			return
		}
		defer dh.Close()
		var last []Member
		var pending *GroupChange
		first, stale := true, true
		t := time.NewTimer(QueueRecheck)
		defer t.Stop()
		for {
			if stale {
				stale = false
				ms, err := readMembers(ctx, c, dh, dir)
				switch {
				case ctx.Err() != nil:
					return
				case errors.Is(err, client.ErrNoMaster):
					// Unknown for now, not changed: look again later.
				case err != nil:
					if !sessionOver(err) {
						fail(err)
					}
					return
				case first || !sameMembers(ms, last):
					first, last = false, ms
					pending = &GroupChange{Members: ms}
				}
				t.Reset(QueueRecheck)
			}
			var send chan<- GroupChange
			var v GroupChange
			if pending != nil {
				send, v = out, *pending
			}
			select {
			case send <- v:
				pending = nil
			case _, ok := <-dh.Events():
				if !ok {
					return
				}
				stale = true
			case <-t.C:
				stale = true
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
