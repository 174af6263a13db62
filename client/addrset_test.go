package client

import (
	"slices"
	"testing"
)

// The address set follows the member lists it is given: members removed
// leave, members added come in, a seed that never named a member (a load
// balancer) stays last, and nothing ever empties it.
func TestAddrSetFollowsMembers(t *testing.T) {
	s := newAddrSet([]string{"lb:7001", "a:7001", "a:7001"})
	if got := s.list(); !slices.Equal(got, []string{"lb:7001", "a:7001"}) {
		t.Fatalf("seeds: %v", got)
	}
	s.learn([]string{"a:7001", "b:7001", "c:7001"})
	if got := s.list(); !slices.Equal(got, []string{"a:7001", "b:7001", "c:7001", "lb:7001"}) {
		t.Fatalf("after the first list: %v", got)
	}
	s.learn([]string{"b:7001", "c:7001", "d:7001"}) // a removed, d added
	if got := s.list(); !slices.Equal(got, []string{"b:7001", "c:7001", "d:7001", "lb:7001"}) {
		t.Fatalf("after a replacement: %v", got)
	}
	s.learn(nil)
	s.learn([]string{""})
	if got := s.list(); len(got) != 4 {
		t.Fatalf("an empty list emptied the set: %v", got)
	}
	if !s.add("e:7001") || s.add("e:7001") || !s.has("e:7001") {
		t.Fatalf("add: %v", s.list())
	}
	seen := map[string]bool{}
	for range 2 * len(s.list()) {
		seen[s.pick()] = true
	}
	if len(seen) != len(s.list()) {
		t.Fatalf("rotation visited %v of %v", seen, s.list())
	}

	// Seeds that name no member (proxies, NAT, a load balancer): the
	// members' own addresses may be unreachable from this client, or
	// bypass the proxies, so it keeps to its seeds.
	p := newAddrSet([]string{"proxy1:9001", "proxy2:9002"})
	p.learn([]string{"a:7001", "b:7001"})
	if got := p.list(); !slices.Equal(got, []string{"proxy1:9001", "proxy2:9002"}) {
		t.Fatalf("a client behind proxies followed the members: %v", got)
	}
}
