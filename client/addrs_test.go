package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// waitAddrs polls cl's address set until it equals want (in any order).
func waitAddrs(t *testing.T, cl *client.Client, want []string, within time.Duration) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	deadline := time.Now().Add(within)
	for {
		got := slices.Sorted(slices.Values(lcadmin.New(cl).ReplicaAddrs()))
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("client knows replicas %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
	}
}

// A client given one replica's address learns every member from the
// master, and keeps its session and its calls when that replica, the only
// one it was told of, goes away.
func TestClientLearnsReplicasFromCell(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{})
	m := c.WaitForMaster(30 * time.Second)
	seed := (m + 1) % 5 // a follower: the client must follow a redirect first
	cfg := c.ClientConfig()
	cfg.Replicas = []string{c.Addrs()[seed]}
	cl := c.ClientWith(t, cfg)
	waitAddrs(t, cl, c.Addrs(), 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := cl.Open(ctx, c.Name("f"), client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	// Stop the seed and then the master: the client must find the next
	// master among the members it learnt, none of which it was given.
	c.Stop(seed)
	c.Stop(m)
	if err := h.SetContents(ctx, []byte("after")); err != nil {
		t.Fatalf("write after the seed and the master stopped: %v", err)
	}
	if got := lcadmin.New(cl).Master(); got == c.Addrs()[seed] || got == c.Addrs()[m] {
		t.Fatalf("client believes %s (stopped) is master", got)
	}
	if len(lcadmin.New(cl).ReplicaAddrs()) == 0 {
		t.Fatal("address set is empty")
	}
}

// Membership calls are the admin's; anyone else is refused with the typed
// error, and a malformed request fails before anything is sent.
func TestMembershipCallsNeedAdmin(t *testing.T) {
	certs := fixtures.TestCerts(t, "alice")
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: certs})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	if _, err := lcadmin.New(alice).Replicas(ctx); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("alice lists replicas: %v, want ErrPermission", err)
	}
	if _, err := lcadmin.New(alice).RemoveReplica(ctx, "2"); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("alice removes a replica: %v, want ErrPermission", err)
	}
	admin := c.Client(t)
	for _, bad := range [][3]string{{"", "127.0.0.1:1", "127.0.0.1:2"}, {"9", "nohost", "127.0.0.1:2"}, {"9", "127.0.0.1:1", ""}, {"a b", "127.0.0.1:1", "127.0.0.1:2"}} {
		if _, err := lcadmin.New(admin).AddReplica(ctx, bad[0], bad[1], bad[2]); !errors.Is(err, client.ErrBadRequest) {
			t.Errorf("AddReplica(%q, %q, %q): %v, want ErrBadRequest", bad[0], bad[1], bad[2], err)
		}
	}
	list, err := lcadmin.New(admin).Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Replicas) != 3 || list.Voters() != 3 {
		t.Fatalf("replica list %+v: want 3 voters", list)
	}
	var masters int
	for _, r := range list.Replicas {
		if r.Master {
			masters++
		}
		if !r.Healthy {
			t.Errorf("replica %s not healthy in a quiet cell: %+v", r.ID, r)
		}
	}
	if masters != 1 {
		t.Fatalf("replica list %+v: %d masters", list, masters)
	}
}

// A member removed from the cell leaves the addresses clients try: at
// once for the client that removed it (the master's answer lists the
// members), within Config.ReplicaRefresh for any other.
func TestClientDropsRemovedReplica(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	m := c.WaitForMaster(30 * time.Second)
	cfg := c.ClientConfig()
	cfg.ReplicaRefresh = 200 * time.Millisecond
	watcher := c.ClientWith(t, cfg)
	waitAddrs(t, watcher, c.Addrs(), 10*time.Second)
	operator := c.Client(t)
	gone := c.Options().Peers[(m+1)%3]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := lcadmin.New(operator).RemoveReplica(ctx, gone.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := list.Find(gone.ID); ok || len(list.Replicas) != 2 {
		t.Fatalf("after removing %s: %+v", gone.ID, list)
	}
	var rest []string
	for _, a := range c.Addrs() {
		if a != gone.ClientAddr {
			rest = append(rest, a)
		}
	}
	if got := slices.Sorted(slices.Values(lcadmin.New(operator).ReplicaAddrs())); !slices.Equal(got, slices.Sorted(slices.Values(rest))) {
		t.Fatalf("the removing client tries %v, want %v", got, rest)
	}
	waitAddrs(t, watcher, rest, 10*time.Second)
}
