package client

import (
	"lockcell/cache"
	"lockcell/wire"
)

// Negative caching (docs/spec.md#caching): an Open without Create of a
// name that does not exist for the caller answers ErrNotFound, and the
// client may remember that answer. The absence is kept under the parent
// directory's name (a cache.Key with a Child), because the master
// registers the session as a cacher of the parent, not of the name: every
// change that could make the name appear (its create, an ACL change that
// could reveal it) changes the parent's listing and invalidates the parent
// to every cacher of it before it completes. The master registers only a
// caller that may read the parent, so a caller that may not gets exactly
// the uncached answers; and the one answer, cached or not, is the same
// error with the same words. A cached absence is dropped with the rest of
// the cache on jeopardy and fail-over, is served only within the local
// lease (cacheGet), and costs one entry of the cache's byte bound
// (Config.CacheBytes), evicted least recently used like any other.

// kindMissing is the cache kind of an absence; the key's Child is the
// missing name's last component.
const kindMissing uint8 = 4

// missingKey is the cache key of name's absence, and whether an Open with
// opts may use it: not with caching off for the client or the handle, and
// never for an Open that may create (it must reach the master).
func (c *Client) missingKey(name string, o *openOptions) (cache.Key, bool) {
	parent := wire.Parent(name)
	if c.cache == nil || o.noCache || o.req.Flags&wire.OpenCreate != 0 || parent == "" {
		return cache.Key{}, false
	}
	return cache.Key{Name: parent, Kind: kindMissing, Child: wire.Base(name)}, true
}

// missingErr is the error of an Open of a name that does not exist for
// the caller, worded as the cell words it, so a cached answer reads
// exactly like one from the master.
func missingErr(name string) error {
	return opErr("open", name, wire.Errorf(wire.CodeNotFound, "%s does not exist", name))
}
