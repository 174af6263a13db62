package recipe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"lockcell/client"
)

// Barrier is a gate held shut by the existence of one file (Curator's
// DistributedBarrier): Set creates the file, Wait blocks while it
// exists, and Remove deletes it, releasing every waiter at once. Waiters
// that arrive after Remove pass straight through.
//
// The file is permanent: the barrier stays set if the process that set
// it dies, until someone removes it (an ephemeral gate would open by
// itself when its setter's session ended, letting waiters through for
// the wrong reason). A Wait through a jeopardy keeps waiting; one whose
// session expires returns the error, never nil, so nil always means the
// barrier was removed.
type Barrier struct {
	c    *client.Client
	name string
}

// NewBarrier returns the barrier on the file name (resolved as by
// client.Client.Open). It makes no call.
func NewBarrier(c *client.Client, name string) *Barrier {
	return &Barrier{c: c, name: client.ResolveName(c.Cell(), name)}
}

// Set shuts the barrier: it creates its file (and missing parents).
// Setting a set barrier changes nothing.
func (b *Barrier) Set(ctx context.Context) error {
	h, err := b.c.Open(ctx, b.name, client.Read|client.Write|client.Create, client.WithParents())
	if err != nil {
		return err
	}
	return h.Close()
}

// Remove opens the barrier: it deletes its file, releasing every waiter.
// Removing an open barrier changes nothing.
func (b *Barrier) Remove(ctx context.Context) error {
	_, err := b.c.Txn(ctx).If(client.Exists(b.name)).Then(client.OpDelete(b.name)).Commit()
	if errors.Is(err, client.ErrNotFound) {
		return nil
	}
	return err
}

// Wait blocks until the barrier's file does not exist, or ctx ends. It
// opens the file with HandleInvalid events (so the deletion reaches it
// however soon after the open it comes) and checks again on every event
// and at least every QueueRecheck.
func (b *Barrier) Wait(ctx context.Context) error {
	for {
		h, err := b.c.Open(ctx, b.name, client.Read, client.WithEvents(client.OnHandleInvalid))
		if errors.Is(err, client.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		gone, err := waitGone(ctx, h)
		h.Close()
		if err != nil || gone {
			return err
		}
	}
}

// waitGone waits on an open handle until its node is deleted (true), or
// an event or the recheck says to look again (false).
func waitGone(ctx context.Context, h *client.Handle) (bool, error) {
	t := time.NewTimer(QueueRecheck)
	defer t.Stop()
	for {
		if _, err := h.GetStat(ctx); errors.Is(err, client.ErrHandleInvalid) || errors.Is(err, client.ErrNotFound) {
			return true, nil
		} else if err != nil {
			return false, err
		}
		select {
		case ev, ok := <-h.Events():
			if !ok {
				return false, &client.OpError{Op: "wait", Path: h.Name(), Err: client.ErrSessionExpired}
			}
			if ev.Kind == client.HandleInvalid {
				return true, nil
			}
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// readyName is the file a double barrier's members wait for, in its
// directory beside the members' files.
const (
	readyName    = "ready"
	memberPrefix = "member-"
)

// DoubleBarrier lets a fixed number of members start and finish a
// computation together (Curator's DistributedDoubleBarrier): Enter
// blocks until Count members have entered, Leave blocks until every
// member that entered has left. Members are ephemeral files in the
// barrier's directory (dir/member-<name>), and a file dir/ready marks
// that the count was reached.
//
// Guarantees: no Enter returns before Count members' files existed at
// once, and then every waiting Enter returns; no Leave returns while any
// member's file exists. Failure modes: a member whose session ends
// (process death, expiry) has its file deleted, which counts as leaving:
// an Enter waiting for it waits for another member instead, and a Leave
// stops waiting for it. A member that enters after the count was reached
// (and before the last Leave) passes at once. One round at a time: begin
// the next round's Enters after the last Leave of this one returned. A
// DoubleBarrier value is one member: call Enter and Leave from one
// goroutine at a time.
type DoubleBarrier struct {
	c     *client.Client
	dir   string
	me    string
	count int
	h     *client.Handle // our member file, between Enter and Leave
}

// NewDoubleBarrier returns the double barrier in the directory dir
// (resolved as by client.Client.Open) for count members, as the member
// name (unique among the members). It makes no call.
func NewDoubleBarrier(c *client.Client, dir, name string, count int) *DoubleBarrier {
	dir = client.ResolveName(c.Cell(), dir)
	return &DoubleBarrier{c: c, dir: dir, me: dir + "/" + memberPrefix + name, count: count}
}

// Enter creates this member's ephemeral file and blocks until Count
// members have entered (or the barrier was already passed), or ctx ends
// (the member's file is then removed). The member that sees the count
// reached first creates dir/ready, which every other waiter sees.
func (d *DoubleBarrier) Enter(ctx context.Context) error {
	if d.h != nil {
		return fmt.Errorf("double barrier %s: %w: entered already", d.me, client.ErrBadRequest)
	}
	if d.count < 1 {
		return fmt.Errorf("double barrier %s: %w: count %d", d.dir, client.ErrBadRequest, d.count)
	}
	dh, err := d.watchDir(ctx)
	if err != nil {
		return err
	}
	defer dh.Close()
	h, err := d.c.Open(ctx, d.me, client.Read|client.Write|client.Create|client.Excl|client.Ephemeral)
	if err != nil {
		return err
	}
	err = d.await(ctx, dh, func(members int, ready bool) (bool, error) {
		if ready {
			return true, nil
		}
		if members < d.count {
			return false, nil
		}
		r, err := d.c.Open(ctx, d.dir+"/"+readyName, client.Read|client.Write|client.Create)
		if err != nil {
			return false, err
		}
		r.Close()
		return true, nil
	})
	if err != nil {
		h.Close()
		return err
	}
	d.h = h
	return nil
}

// Leave removes this member's file and blocks until no member's file is
// left, or ctx ends. The members that see the last one go delete
// dir/ready, so the directory is ready for another round.
func (d *DoubleBarrier) Leave(ctx context.Context) error {
	if d.h == nil {
		return fmt.Errorf("double barrier %s: %w: not entered", d.me, client.ErrBadRequest)
	}
	dh, err := d.watchDir(ctx)
	if err != nil {
		return err
	}
	defer dh.Close()
	if err := d.h.Close(); err != nil {
		return err
	}
	d.h = nil
	return d.await(ctx, dh, func(members int, ready bool) (bool, error) {
		if members > 0 {
			return false, nil
		}
		if ready {
			_, err := d.c.Txn(ctx).If(client.Exists(d.dir + "/" + readyName)).Then(client.OpDelete(d.dir + "/" + readyName)).Commit()
			if err != nil && !errors.Is(err, client.ErrNotFound) {
				return false, err
			}
		}
		return true, nil
	})
}

// watchDir opens the barrier's directory (creating it) with the events
// that tell a member's or the ready file's coming and going, before the
// first listing.
func (d *DoubleBarrier) watchDir(ctx context.Context) (*client.Handle, error) {
	if err := d.c.MkdirAll(ctx, d.dir); err != nil {
		return nil, err
	}
	return d.c.Open(ctx, d.dir, client.Read|client.Directory, client.WithEvents(client.OnChildAdded|client.OnChildRemoved))
}

// await lists the directory until done says so: on each event and at
// least every QueueRecheck.
func (d *DoubleBarrier) await(ctx context.Context, dh *client.Handle, done func(members int, ready bool) (bool, error)) error {
	t := time.NewTimer(QueueRecheck)
	defer t.Stop()
	for {
		entries, err := dh.ReadDir(ctx)
		if err != nil {
			return err
		}
		members, ready := 0, false
		for _, e := range entries {
			switch {
			case e.Dir:
			case e.Name == readyName:
				ready = true
			case strings.HasPrefix(e.Name, memberPrefix):
				members++
			}
		}
		if ok, err := done(members, ready); err != nil || ok {
			return err
		}
		t.Reset(QueueRecheck)
		select {
		case _, ok := <-dh.Events():
			if !ok {
				return &client.OpError{Op: "barrier", Path: d.dir, Err: client.ErrSessionExpired}
			}
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
