package client

import (
	"bytes"
	"context"
	"sync"

	"lockcell/wire"
)

// The two calls below let a program follow a file through this Client's
// cache the way package client/recipe's Observe does: read it with
// GetContentsAndStatWatched and, when the answer is watched, wait for
// WatchInvalidations to say it may have changed before reading again.
// They are the cache's own promise made public, nothing more: no extra
// call is sent and nothing is kept at the master for them.

// WatchInvalidations returns a channel that receives a value each time
// this Client's cache learns that the node name (resolved as by Open) may
// have changed: the master invalidated it before a write, a lock taken or
// freed, a delete, an ACL change, or for a directory the creation or
// removal of a child; or a new master dropped the whole cache. Values are
// coalesced: at most one waits unread, and a reader that reads after it
// has missed nothing since. News is promised only for what the cache
// holds: a read that GetContentsAndStatWatched reports watched, or, for a
// directory, the absence of a name in it that an Open without Create
// found missing (the master invalidates the directory when the name is
// created).
//
// stop ends the watch and closes the channel; the channel is also closed
// when the Client is closed, and at once when it is closed already or its
// session is over. Calling stop more than once is harmless.
func (c *Client) WatchInvalidations(name string) (changed <-chan struct{}, stop func()) {
	name = c.abs(name)
	out := make(chan struct{}, 1)
	stopped := make(chan struct{})
	var once sync.Once
	stop = func() { once.Do(func() { close(stopped) }) }
	if !c.sess.whileLive(func() { c.wg.Add(1) }) {
		close(out)
		return out, stop
	}
	in, unwatch := c.streams.watchInvalidation(name)
	// One goroutine a watch, counted in the Client's wait group, so that
	// Close closes the channel and waits for it.
	go func() {
		defer c.wg.Done()
		defer close(out)
		defer unwatch()
		for {
			select {
			case <-in:
				select {
				case out <- struct{}{}:
				default: // a wake is pending already
				}
			case <-stopped:
				return
			case <-c.base.Done():
				return
			}
		}
	}()
	return out, stop
}

// GetContentsAndStatWatched is GetContentsAndStat that also reports
// whether the answer is held in this Client's cache (served from it, or
// filled into it by this read). While it is, the master invalidates the
// file in this cache before any change of it is applied, and
// WatchInvalidations hears of that, so a program may wait for it instead
// of polling. When it is not (the cache is off, the handle was opened
// WithoutCache, a change of the file was in flight when it was read, or
// the session is in jeopardy), no news of the next change is promised:
// read again later.
func (h *Handle) GetContentsAndStatWatched(ctx context.Context) (data []byte, st Stat, watched bool, err error) {
	return h.readCaching(ctx)
}

// readCaching is GetContentsAndStat that also says whether the answer is
// in the cache (served from it, or filled into it).
func (h *Handle) readCaching(ctx context.Context) ([]byte, Stat, bool, error) {
	r, err := h.cachedRead(ctx, "read", kindContents, true, func(fill bool) (cached, bool, error) {
		req := h.request()
		req.Cache = fill
		var resp wire.ContentsResponse
		err := h.do(ctx, "read", wire.MethodGetContentsAndStat, req, &resp)
		return cached{contents: resp.Contents, stat: resp.Stat, proxy: resp.Proxy}, resp.Cacheable, err
	})
	if err != nil {
		return nil, Stat{}, false, err
	}
	return bytes.Clone(r.v.contents), statFrom(r.v.stat), r.kept, nil
}
