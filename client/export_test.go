package client

import "time"

// Exports for the external tests of this package (package client_test),
// which run against a real cell from fixtures.

// LeaseEnd returns the client's local lease end, read on its Clock, and
// whether the session is in jeopardy.
func (c *Client) LeaseEnd() (time.Time, bool) {
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	return c.sess.leaseEnd, c.sess.jeopardy
}

// DriftMargin is driftMargin.
var DriftMargin = driftMargin
