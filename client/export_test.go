package client

import (
	"time"

	"lockcell/wire"
)

// Exports for the external tests of this package (package client_test),
// which run against a real cell from fixtures.

// LeaseEnd returns the client's local lease end, read on its Clock, and
// whether the session is in jeopardy.
func (c *Client) LeaseEnd() (time.Time, bool) {
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	return c.sess.leaseEnd, c.sess.jeopardy
}

// DriftMargin is the margin the client takes off every lease.
var DriftMargin = wire.LeaseDriftMargin

// Bounds of the waits between tries.
const (
	BackoffBase    = backoffBase
	BackoffFastCap = backoffFastCap
	BackoffFastFor = backoffFastFor
	BackoffCap     = backoffCap
)

// BackoffWaits returns the first n waits between the tries of one call.
func BackoffWaits(n int) []time.Duration {
	var b backoff
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = b.next()
	}
	return out
}

// BelieveMaster makes the client believe the replica at addr is master,
// as if an earlier answer had named it.
func (c *Client) BelieveMaster(addr string) {
	c.route.mu.Lock()
	defer c.route.mu.Unlock()
	c.route.master = addr
}

// OpenConns returns the addresses of the replicas the client holds
// connections to.
func (c *Client) OpenConns() []string { return c.route.openConns() }

// ForgetReadFloor drops what the client has seen, so its next follower
// read may be answered by any state within its bound (only the session
// and the handle still set a floor): the bound alone is then tested.
func (c *Client) ForgetReadFloor() { c.stale.seen.Store(0) }
