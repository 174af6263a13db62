package client

import (
	"context"
	"sync"
	"time"

	"lockcell/cache"
	"lockcell/wire"
)

// The open-handle cache (docs/spec.md#caching, Chubby §2.5): a handle the
// application closes is kept open at the master, idle, and the next Open of
// the same name in the same mode takes it back without a call. Only clean
// handles qualify: opened with the cache on, not exclusive-create, ephemeral
// or with events, never used to take a lock, delete or attach a sequencer,
// and with no invalidation of the name since they were opened (the master
// invalidates the name to us like a cached read, so a delete or re-create of
// the node drops them). Idle handles are closed at the master when dropped.
// One not taken back for maxPooledAge is dropped: a pooled handle is an
// open handle at the master, and a session with one open is never closed
// for idleness (docs/spec.md#idle-sessions), so a program that closed
// its handles and forgot its Client would otherwise hold its session for
// good.

// maxPooled bounds the idle handles kept.
const maxPooled = 1024

// maxPooledAge is how long an idle handle is kept for an Open that takes
// it back; the keep-alive loop closes older ones (dropStale). A third of
// Chubby's idle-session minute: a name opened again within it costs no
// call, and a forgotten Client's session is idle soon after.
const maxPooledAge = 20 * time.Second

type poolKey struct {
	name      string
	flags     uint32
	lockDelay int64
}

type pooledHandle struct {
	id       uint64
	tok      cache.Token
	instance uint64
	since    time.Time // when it was pooled
}

// poolable reports whether an Open may reuse or leave behind an idle handle.
func poolable(o *openOptions) bool {
	r := &o.req
	return !o.noCache && r.Flags&(wire.OpenExcl|wire.OpenEphemeral|wire.OpenSequential) == 0 && r.EventMask == 0 && len(r.Contents) == 0
}

// handlePool holds the idle handles, by name and mode. Its lock is held
// across cache.Fresh (the cache's lock is a leaf) and nothing else.
type handlePool struct {
	mu   sync.Mutex
	idle map[poolKey][]pooledHandle
	n    int
}

// take pops an idle handle for key for which fresh holds; it also returns
// the ids of stale ones it popped on the way, to be closed at the master.
func (p *handlePool) take(key poolKey, fresh func(cache.Token) bool) (ph pooledHandle, ok bool, stale []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for list := p.idle[key]; len(list) > 0; list = p.idle[key] {
		ph := list[len(list)-1]
		p.idle[key] = list[:len(list)-1]
		p.n--
		if fresh(ph.tok) {
			return ph, true, stale
		}
		stale = append(stale, ph.id)
	}
	delete(p.idle, key)
	return pooledHandle{}, false, stale
}

// keep pools ph under key unless the pool is full or ph is no longer
// fresh; it reports whether it did.
func (p *handlePool) keep(key poolKey, ph pooledHandle, fresh func(cache.Token) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n >= maxPooled || !fresh(ph.tok) {
		return false
	}
	if p.idle == nil {
		p.idle = map[poolKey][]pooledHandle{}
	}
	p.idle[key] = append(p.idle[key], ph)
	p.n++
	return true
}

// dropOlder takes out the idle handles pooled before cutoff and returns
// their ids.
func (p *handlePool) dropOlder(cutoff time.Time) []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []uint64
	for key, list := range p.idle {
		kept := list[:0]
		for _, ph := range list {
			if ph.since.Before(cutoff) {
				ids = append(ids, ph.id)
			} else {
				kept = append(kept, ph)
			}
		}
		p.n -= len(list) - len(kept)
		if len(kept) == 0 {
			delete(p.idle, key)
		} else {
			p.idle[key] = kept
		}
	}
	return ids
}

// drop empties the pool of name ("" for all) and returns the ids dropped.
func (p *handlePool) drop(name string) []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []uint64
	for key, list := range p.idle {
		if name != "" && key.name != name {
			continue
		}
		for _, ph := range list {
			ids = append(ids, ph.id)
		}
		p.n -= len(list)
		delete(p.idle, key)
	}
	return ids
}

func (p *handlePool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// takePooled returns an idle handle for key that is still fresh.
func (c *Client) takePooled(key poolKey) (pooledHandle, bool) {
	ph, ok, stale := c.pool.take(key, c.cache.Fresh)
	c.closeIdle(stale)
	return ph, ok
}

// keepIdle pools a closed handle; it reports false when the handle must be
// closed at the master instead.
func (c *Client) keepIdle(key poolKey, ph pooledHandle) bool {
	if c.sess.usable() != nil {
		return false
	}
	ph.since = c.clock.Now()
	return c.pool.keep(key, ph, c.cache.Fresh)
}

// dropStale closes at the master the idle handles pooled for longer than
// maxPooledAge.
func (c *Client) dropStale() {
	c.closeIdle(c.pool.dropOlder(c.clock.Now().Add(-maxPooledAge)))
}

// dropPooled closes the idle handles of name ("" for all) at the master.
func (c *Client) dropPooled(name string) {
	c.closeIdle(c.pool.drop(name))
}

// closeIdle closes idle handles at the master in the background, unless
// the session is over (which closed them all).
func (c *Client) closeIdle(ids []uint64) {
	if len(ids) == 0 {
		return
	}
	c.sess.whileLive(func() {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for _, id := range ids {
				ctx, cancel := context.WithTimeout(c.base, 10*time.Second)
				c.call(ctx, wire.MethodClose, true, &wire.HandleRequest{Handle: id}, &wire.Empty{})
				cancel()
			}
		}()
	})
}
