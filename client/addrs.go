package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"lockcell/wire"
)

// addrSet is the set of replica client addresses a Client tries, in
// rotation, when it knows no master. It starts as Config.Replicas and
// follows the cell's membership from then on: members added since the
// client started are tried, removed ones are not, so a client outlives the
// replacement of every machine it was configured with. It is never empty.
//
// It follows the membership only once a member list has named one of the
// seeds: seeds that are the members' own client addresses say this client
// reaches the members directly. A client whose seeds name no member
// reaches the cell through addresses the members do not advertise
// (proxies, NAT, a load balancer, a DNS alias): the members' own
// addresses may be unreachable from it, or would bypass what its operator
// put in between, so it keeps to its seeds. Once following, a seed that
// never named a member stays in the set after the members, as a way back
// in; a seed that named a member leaves with it.
//
// Its lock is taken inside routing's (route.go) and is otherwise a leaf:
// an addrSet method never calls out while holding it.
type addrSet struct {
	mu    sync.Mutex
	addrs []string
	// seeds are Config.Replicas; aliases the seeds no member list has
	// named so far.
	seeds, aliases []string
	// following: a member list named a seed (see above).
	following bool
	next      int
	// nextFollower is the follower reads' rotation (followerread.go).
	nextFollower int
}

func newAddrSet(seeds []string) *addrSet {
	s := &addrSet{}
	for _, a := range seeds {
		if a != "" && !slices.Contains(s.addrs, a) {
			s.addrs = append(s.addrs, a)
		}
	}
	s.seeds, s.aliases = slices.Clone(s.addrs), slices.Clone(s.addrs)
	return s
}

// pick returns the next address in rotation.
func (s *addrSet) pick() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.addrs[s.next%len(s.addrs)]
	s.next++
	return a
}

// list returns the addresses.
func (s *addrSet) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.addrs)
}

// allIn reports whether every address of the set is in m.
func (s *addrSet) allIn(m map[string]bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.addrs {
		if !m[a] {
			return false
		}
	}
	return true
}

// has reports whether addr is in the set.
func (s *addrSet) has(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.addrs, addr)
}

// add puts addr (a master a replica named) in the set; it reports
// whether addr is new.
func (s *addrSet) add(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if addr == "" || slices.Contains(s.addrs, addr) {
		return false
	}
	s.addrs = append(s.addrs, addr)
	return true
}

// learn replaces the set with the members' client addresses, as the
// master listed them, followed by the seeds that never named a member. An
// empty list is ignored (a set is never empty), and so is every list
// until one names a seed.
func (s *addrSet) learn(addrs []string) {
	var next []string
	for _, a := range addrs {
		if a != "" && !slices.Contains(next, a) {
			next = append(next, a)
		}
	}
	if len(next) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.following {
		s.following = slices.ContainsFunc(s.seeds, func(a string) bool { return slices.Contains(next, a) })
		if !s.following {
			return
		}
	}
	s.aliases = slices.DeleteFunc(s.aliases, func(a string) bool { return slices.Contains(next, a) })
	s.addrs = append(next, s.aliases...)
}

// refreshAddrs asks for a refresh of the address set soon (without
// waiting for it).
func (c *Client) refreshAddrs() {
	select {
	case c.refresh <- struct{}{}:
	default: // one is pending already
	}
}

// learnAddrs takes the membership from the master Dial just found, before
// Dial returns, and starts addrLoop. Dial asks in line rather than leaving
// it to the loop so that an application's first calls do not race a
// background call (tests count the calls a cached read makes).
func (c *Client) learnAddrs(ctx context.Context) {
	first := c.cfg.ReplicaRefresh
	if err := c.fetchAddrs(ctx); err != nil {
		c.log.Debug("lockcell: replica list not learnt at dial; trying again shortly", "err", err)
		first = min(time.Second, first)
	} else {
		select {
		case <-c.refresh: // asked for while Dial followed a redirect: answered
		default:
		}
	}
	c.wg.Add(1)
	go c.addrLoop(first)
}

// addrLoop keeps the address set current: after first, whenever
// refreshAddrs asks (a fail-over, a master at an unknown address), and
// every Config.ReplicaRefresh. A failed refresh is tried again after a
// second, doubling up to the interval.
func (c *Client) addrLoop(first time.Duration) {
	defer c.wg.Done()
	every := c.cfg.ReplicaRefresh
	retry := 2 * time.Second
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.refresh:
		case <-t.C:
		}
		next := every
		if err := c.fetchAddrs(c.base); err != nil {
			c.log.Debug("lockcell: replica list not refreshed", "err", err)
			next = min(retry, every)
			retry = min(2*retry, every)
		} else {
			retry = time.Second
		}
		t.Reset(next)
	}
}

// fetchAddrs asks the replica believed to be master for the cell's status
// and, when it answers as master, adopts its members' client addresses. A
// follower's view could lag behind a membership change, so it is not
// taken.
func (c *Client) fetchAddrs(ctx context.Context) error {
	addr, cn := c.route.masterConnIfOpen()
	if addr == "" || cn == nil {
		return fmt.Errorf("no connection to a master")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var resp wire.CellStatusResponse
	st, err := cn.call(ctx, &wire.Header{Method: wire.MethodCellStatus}, &wire.CellStatusRequest{}, &resp)
	if err == nil {
		err = st.Err()
	}
	switch {
	case err != nil:
		return fmt.Errorf("status of %s: %w", addr, err)
	case resp.Cell != c.cfg.Cell:
		return fmt.Errorf("%s serves cell %q, not %q", addr, resp.Cell, c.cfg.Cell)
	case !slices.ContainsFunc(resp.Replicas, func(r wire.ReplicaStatus) bool { return r.Master && r.ID == resp.Self }):
		return fmt.Errorf("%s (replica %s) is not the master", addr, resp.Self)
	}
	addrs := wire.ClientAddrs(resp.Replicas)
	if len(addrs) == 0 {
		return fmt.Errorf("%s listed no member's client address", addr)
	}
	c.addrs.learn(addrs)
	return nil
}

// pickFollower returns the next address in the follower reads'
// rotation, kept apart from pick's so that neither skews the other.
func (s *addrSet) pickFollower() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.addrs[s.nextFollower%len(s.addrs)]
	s.nextFollower++
	return a
}
