package client

import (
	"sync"

	"lockcell/cache"
)

// Entries a proxy's read cache served (wire.ContentsResponse.Proxy). The
// master learns that this client holds such an entry only from that
// proxy, with the acknowledgement of the name's invalidation: a proxy
// that stops answering (it crashed, it was cut off) cannot tell it. The
// master then waits out the leases that proxy told its clients, and no
// longer; so the client keeps a proxy-served entry only under leases
// from the same proxy instance (wire.KeepAliveResponse.Proxy), and
// drops it before it adopts a lease from anywhere else: another proxy,
// the same proxy restarted, or a replica.
type proxiedEntries struct {
	mu sync.Mutex
	// via is the proxy instance the last adopted lease came from (0: a
	// replica, or none yet).
	via uint64
	// paths are the names held from a proxy's cache, with its instance.
	paths map[string]uint64
}

// put stores v, which the proxy instance proxy served, unless the lease
// the client holds came from elsewhere (the entry would outlive what
// vouches for it) or an invalidation came since tok (cache.PutIf). It
// reports false when it did not even try.
func (p *proxiedEntries) put(c *cache.Cache[cached], key cache.Key, v cached, tok cache.Token, proxy uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if proxy != p.via || len(p.paths) >= maxProxiedNames {
		return false
	}
	c.PutIf(key, v, tok)
	if p.paths == nil {
		p.paths = map[string]uint64{}
	}
	p.paths[key.Name] = proxy
	return true
}

// adopt is called with the proxy instance of a KeepAlive reply before
// the client adopts its lease: the entries another instance served are
// dropped first.
func (p *proxiedEntries) adopt(c *Client, proxy uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if proxy == p.via {
		return
	}
	p.via = proxy
	for name, from := range p.paths {
		if from != proxy {
			if c.cache != nil {
				c.cache.Invalidate(name)
			}
			delete(p.paths, name)
		}
	}
}

// forget forgets name (an invalidation dropped it).
func (p *proxiedEntries) forget(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.paths, name)
}

// maxProxiedNames bounds the names remembered as served by a proxy (an
// evicted entry's name stays until its invalidation): past it, a
// proxy's answers are not cached.
const maxProxiedNames = 1 << 16

// purged forgets the entries' names (the cache was purged).
func (p *proxiedEntries) purged() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paths = nil
}
