package recipe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"lockcell/client"
)

// itemPrefix names a queue's items: the sequential number follows it.
const itemPrefix = "item-"

// Queue is a FIFO work queue in a directory: each item is a permanent
// file with a sequential name (client.Sequential), so items sort in the
// order their Puts were applied, and Take removes the lowest-numbered
// item with a transaction that deletes it only if it still exists at the
// generation read, so of several consumers racing for one item exactly
// one gets it. Every item put is taken at most once, and exactly once if
// consumers keep taking; items from one producer are taken in the order
// it put them (one consumer sees them in that order; several consumers
// may finish them out of order, as with any queue).
//
// Failure modes: items are permanent, so they outlive the producer and
// the consumers; an item is gone the moment a Take commits its delete,
// so a consumer that dies after Take returned has lost it (this queue
// hands work over, it does not track its completion: for that, lock the
// item or put it back). A Take blocked through a jeopardy keeps waiting;
// one whose session expires returns the error. A Queue value is safe for
// concurrent use.
type Queue struct {
	c   *client.Client
	dir string
}

// NewQueue returns the queue in the directory dir (resolved as by
// client.Client.Open), creating it and its parents if missing. Put
// needs write permission on dir, Take read and write permission on it
// and its items. Other files in dir are left alone.
func NewQueue(ctx context.Context, c *client.Client, dir string) (*Queue, error) {
	dir = client.ResolveName(c.Cell(), dir)
	if err := c.MkdirAll(ctx, dir); err != nil {
		return nil, err
	}
	return &Queue{c: c, dir: dir}, nil
}

// Dir is the queue's directory.
func (q *Queue) Dir() string { return q.dir }

// Put appends an item holding data and returns its full name. The item
// exists once Put returns, behind every item whose Put returned before
// this one began.
func (q *Queue) Put(ctx context.Context, data []byte) (string, error) {
	h, err := q.c.Open(ctx, q.dir+"/"+itemPrefix, client.Read|client.Write|client.Create|client.Sequential, client.WithContents(data))
	if err != nil {
		return "", err
	}
	name := h.Name()
	h.Close()
	return name, nil
}

// QueueRecheck is how often a blocked Take lists the queue again with no
// event: a safety net only, since the directory's ChildAdded event (or an
// Overflow or Reannounce telling of lost ones) wakes it first.
const QueueRecheck = time.Second

// takePage is how many of the lowest items Take reads at once.
const takePage = 64

// Take removes the queue's lowest-numbered item and returns its data,
// blocking until there is one or ctx ends. It reads the lowest items (one
// page of the listing: a linearizable read) with a watch already set on
// the directory (so an item put after the read wakes it), reads the
// first, and deletes it in a transaction that checks it still exists at
// that generation; if another consumer took it first it moves on to the
// next item, reads the listing again when it runs out, and waits for an
// event only when the listing held no item.
func (q *Queue) Take(ctx context.Context) ([]byte, error) {
	dh, err := q.c.Open(ctx, q.dir, client.Read|client.Directory, client.WithEvents(client.OnChildAdded))
	if err != nil {
		return nil, err
	}
	defer dh.Close()
	for {
		// One page is one linearizable read, so it holds the lowest
		// items at one instant; a whole listing is several reads, and
		// could show a later item without an earlier one put meanwhile.
		entries, _, err := dh.ReadDirPage(ctx, itemPrefix, takePage)
		if err != nil {
			return nil, err
		}
		seen := false
		for _, e := range entries {
			if !strings.HasPrefix(e.Name, itemPrefix) {
				break // past the items
			}
			if e.Dir {
				continue
			}
			seen = true
			data, ok, err := q.take(ctx, q.dir+"/"+e.Name)
			if err != nil {
				return nil, err
			}
			if ok {
				return data, nil
			}
		}
		if seen {
			continue // others took every item listed: there may be more
		}
		// Empty: wait for news.
		t := time.NewTimer(QueueRecheck)
		select {
		case _, ok := <-dh.Events():
			if !ok {
				t.Stop()
				return nil, &client.OpError{Op: "take", Path: q.dir, Err: client.ErrSessionExpired}
			}
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// take tries to take the item name: false when another consumer got it.
func (q *Queue) take(ctx context.Context, name string) ([]byte, bool, error) {
	h, err := q.c.Open(ctx, name, client.Read)
	if errors.Is(err, client.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	data, st, err := h.GetContentsAndStat(ctx)
	h.Close()
	if errors.Is(err, client.ErrHandleInvalid) || errors.Is(err, client.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	_, err = q.c.Txn(ctx).If(client.Exists(name), client.GenerationIs(name, st.ContentGen)).Then(client.OpDelete(name)).Commit()
	switch {
	case err == nil:
		return data, true, nil
	case errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrGenerationMismatch):
		// The item is gone (or was rewritten): another consumer won.
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("take %s: %w", name, err)
	}
}
