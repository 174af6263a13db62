package client

import (
	"context"
	"time"

	"lockcell/cache"
	"lockcell/cell/wire"
)

// The open-handle cache (SPEC 6, Chubby §2.5): a handle the application
// closes is kept open at the master, idle, and the next Open of the same
// name in the same mode takes it back without a call. Only clean handles
// qualify: opened with the cache on, not exclusive-create, ephemeral or
// with events, never used to take a lock, delete or attach a sequencer,
// and with no invalidation of the name since they were opened (the master
// invalidates the name to us like a cached read, so a delete or re-create
// of the node drops them). Idle handles are closed at the master when
// dropped.

// maxPooled bounds the idle handles kept.
const maxPooled = 1024

type poolKey struct {
	name      string
	flags     uint32
	lockDelay int64
}

type pooledHandle struct {
	id       uint64
	tok      cache.Token
	instance uint64
}

// poolable reports whether an Open may reuse or leave behind an idle handle.
func poolable(o *openOptions) bool {
	r := &o.req
	return !o.noCache && r.Flags&(wire.OpenExcl|wire.OpenEphemeral) == 0 && r.EventMask == 0 && len(r.Contents) == 0
}

// takePooled returns an idle handle for key that is still fresh.
func (c *Client) takePooled(key poolKey) (pooledHandle, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for list := c.pool[key]; len(list) > 0; list = c.pool[key] {
		p := list[len(list)-1]
		c.pool[key] = list[:len(list)-1]
		c.pooled--
		if c.cache.Fresh(p.tok) {
			return p, true
		}
		c.closeIdleLocked([]uint64{p.id})
	}
	delete(c.pool, key)
	return pooledHandle{}, false
}

// keepIdle pools a closed handle; it reports false when the handle must be
// closed at the master instead.
func (c *Client) keepIdle(key poolKey, p pooledHandle) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.expired || c.pooled >= maxPooled || !c.cache.Fresh(p.tok) {
		return false
	}
	if c.pool == nil {
		c.pool = map[poolKey][]pooledHandle{}
	}
	c.pool[key] = append(c.pool[key], p)
	c.pooled++
	return true
}

// dropPooled closes the idle handles of name ("" for all) at the master.
func (c *Client) dropPooled(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []uint64
	for key, list := range c.pool {
		if name != "" && key.name != name {
			continue
		}
		for _, p := range list {
			ids = append(ids, p.id)
		}
		c.pooled -= len(list)
		delete(c.pool, key)
	}
	c.closeIdleLocked(ids)
}

// closeIdleLocked closes idle handles at the master in the background.
func (c *Client) closeIdleLocked(ids []uint64) {
	if len(ids) == 0 || c.closed || c.expired {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(c.base, 10*time.Second)
			c.call(ctx, wire.MethodClose, true, &wire.HandleRequest{Handle: id}, &wire.Empty{})
			cancel()
		}
	}()
}

// PooledHandles reports how many idle handles the client keeps open.
func (c *Client) PooledHandles() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pooled
}
