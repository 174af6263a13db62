package cell_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"lockcell/client"
	lcadmin "lockcell/client/admin"
	"lockcell/fixtures"
)

// gatedTransport is a replica's real TCP Raft transport that holds every
// AppendEntries carrying log entries (or probing for a match) and every
// InstallSnapshot until open is called, while heartbeats pass: the
// leader hears from the replica but cannot bring its log up to date.
type gatedTransport struct {
	*raft.NetworkTransport
	out    chan raft.RPC
	gate   chan struct{}
	closed chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

func newGatedTransport() *gatedTransport {
	return &gatedTransport{out: make(chan raft.RPC), gate: make(chan struct{}), closed: make(chan struct{})}
}

// transport is the joining replica's Raft transport (for
// fixtures.Cell.StartJoiner): a real TCP one on raftAddr, gated.
func (g *gatedTransport) transport(_, raftAddr string) (raft.Transport, error) {
	tcp, err := raft.NewTCPTransportWithConfig(raftAddr, nil, &raft.NetworkTransportConfig{
		MaxPool: 8, Timeout: 5 * time.Second, Logger: hclog.NewNullLogger()})
	if err != nil {
		return nil, err
	}
	g.NetworkTransport = tcp
	g.wg.Add(1)
	go g.forward()
	return g, nil
}

// forward relays inbound RPCs, parking the gated ones on a goroutine of
// their own (the leader sends one append at a time, so order holds).
func (g *gatedTransport) forward() {
	defer g.wg.Done()
	for {
		select {
		case rpc := <-g.NetworkTransport.Consumer():
			held := false
			switch r := rpc.Command.(type) {
			case *raft.AppendEntriesRequest:
				held = len(r.Entries) > 0 || r.PrevLogEntry > 0
			case *raft.InstallSnapshotRequest:
				held = true
			}
			select {
			case <-g.gate:
				held = false
			default:
			}
			if !held {
				select {
				case g.out <- rpc:
				case <-g.closed:
					return
				}
				continue
			}
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				select {
				case <-g.gate:
				case <-g.closed:
					return
				}
				select {
				case g.out <- rpc:
				case <-g.closed:
				}
			}()
		case <-g.closed:
			return
		}
	}
}

func (g *gatedTransport) open() { close(g.gate) }

// Consumer delivers the RPCs the gate lets through.
func (g *gatedTransport) Consumer() <-chan raft.RPC { return g.out }

// AppendEntriesPipeline refuses pipelining, as the replica's own transport does.
func (g *gatedTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// Close stops the relays and the TCP transport; a second call is harmless.
func (g *gatedTransport) Close() error {
	g.once.Do(func() { close(g.closed) })
	err := g.NetworkTransport.Close()
	g.wg.Wait()
	return err
}

func memberOf(l lcadmin.ReplicaList, id string) (lcadmin.ReplicaStatus, bool) { return l.Find(id) }

// TestMembershipAddCatchUpPromoteRemove adds a sixth replica to a live
// five-replica cell: it joins as a non-voter and votes only once its log
// holds everything committed when it was added, while a member that never
// answers stays a non-voter; every replica then names the new member's
// client address, it can lead (the others' leader hints name it), and
// removing it while it leads hands leadership over first.
func TestMembershipAddCatchUpPromoteRemove(t *testing.T) {
	c := fixtures.NewCell(t, 5, fixtures.Options{HTTP: true})
	cl := c.Client(t)
	ctx := ctxT(t, 90*time.Second)
	for i := range 40 {
		h := mustOpen(t, ctx, cl, c.Name(fmt.Sprintf("f%02d", i)), client.Read|client.Write|client.Create,
			client.WithContents([]byte(strings.Repeat("x", 4096))))
		h.Close()
	}

	// A member that never answers: added, it never catches up.
	ghost := fixtures.FreePorts(t, 2)
	l, err := lcadmin.New(cl).AddReplica(ctx, "9", fmt.Sprintf("127.0.0.1:%d", ghost[0]), fmt.Sprintf("127.0.0.1:%d", ghost[1]))
	if err != nil {
		t.Fatalf("add an unreachable member: %v", err)
	}
	if m, ok := memberOf(l, "9"); !ok || m.Suffrage != lcadmin.SuffrageNonvoter || m.Healthy {
		t.Fatalf("unreachable member after add: %+v (listed %v)", m, ok)
	}

	gate := newGatedTransport()
	s6, p6 := c.StartJoiner("6", gate.transport)
	if cfg, err := s6.Replica().Configuration(); err != nil || len(cfg.Servers) != 0 {
		t.Fatalf("a joining replica bootstrapped a configuration of its own: %+v %v", cfg, err)
	}
	l, err = lcadmin.New(cl).AddReplica(ctx, "6", p6.ClientAddr, p6.RaftAddr)
	if err != nil {
		t.Fatalf("add: %v", err)
	}
	if m, ok := memberOf(l, "6"); !ok || m.Suffrage != lcadmin.SuffrageNonvoter || m.ClientAddr != p6.ClientAddr || m.RaftAddr != p6.RaftAddr {
		t.Fatalf("new member in the add's answer: %+v (listed %v); want a non-voter at its addresses", m, ok)
	}
	ms := c.Server(c.WaitForMaster(10 * time.Second))
	committed := ms.Replica().Status().CommitIndex // every entry the new member must hold before it votes

	// Heard from but not caught up: it stays a non-voter for as long as
	// the gate holds its log back (watched over six promotion rounds).
	pollUntil(t, 20*time.Second, "the master to hear from member 6", func() bool {
		l, err := lcadmin.New(cl).Replicas(ctx)
		m, _ := memberOf(l, "6")
		return err == nil && m.Healthy
	})
	for end := time.Now().Add(6 * fixtures.TestTimings().HeartbeatTimeout / 2); time.Now().Before(end); {
		l, err := lcadmin.New(cl).Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := memberOf(l, "6"); m.Suffrage != lcadmin.SuffrageNonvoter {
			t.Fatalf("member 6 was promoted with its log held back at %d (%d committed): %+v",
				s6.Replica().Status().LastIndex, committed, m)
		}
		time.Sleep(20 * time.Millisecond) // pacing the watch, not waiting for an event
	}
	gate.open()
	pollUntil(t, 30*time.Second, "the new member's promotion", func() bool {
		l, err := lcadmin.New(cl).Replicas(ctx)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		m, _ := memberOf(l, "6")
		if m.Suffrage != lcadmin.SuffrageVoter {
			return false
		}
		// Read after the configuration: its log only grows, so this is
		// at least what it held when it was promoted.
		if last := s6.Replica().Status().LastIndex; last < committed {
			t.Fatalf("member 6 votes with its log at %d, short of the %d entries committed when it was added", last, committed)
		}
		if !m.Healthy {
			t.Fatalf("a promoted member is not healthy: %+v", m)
		}
		return true
	})
	l, err = lcadmin.New(cl).Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := memberOf(l, "9"); m.Suffrage != lcadmin.SuffrageNonvoter || m.Healthy || l.ConfiguredSize != 5 || l.Voters() != 6 {
		t.Fatalf("after the promotion: unreachable member %+v, configured size %d, %d voters; want a non-voter, 5, 6", m, l.ConfiguredSize, l.Voters())
	}

	// The new member holds the data written before it joined.
	pollUntil(t, 20*time.Second, "member 6 to apply the cell's entries", func() bool {
		return s6.Replica().Status().AppliedIndex >= committed
	})
	if _, _, n6, _ := s6.Replica().FSM().Counts(); n6 < 41 {
		t.Fatalf("member 6 holds %d nodes, want the root and 40 files", n6)
	}

	// Every replica, the new one and an old follower, lists it by its
	// client address.
	for _, addr := range []string{p6.ClientAddr, c.Addrs()[0], c.Addrs()[3]} {
		pollUntil(t, 10*time.Second, "CellStatus of "+addr+" to list member 6", func() bool {
			st, err := lcadmin.QueryStatus(ctx, addr)
			if err != nil {
				return false
			}
			for _, r := range st.Replicas {
				if r.ID == "6" {
					return r.ClientAddr == p6.ClientAddr && r.Suffrage == lcadmin.SuffrageVoter
				}
			}
			return false
		})
	}

	// The joined member's status page knows every member's client
	// address from the member table, though it was configured with its
	// own only.
	pollUntil(t, 10*time.Second, "member 6's status page to list every member's client address", func() bool {
		resp, err := http.Get("http://" + s6.MetricsAddr() + "/status.json")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var page struct {
			Master *struct {
				ClientAddr string `json:"client_addr"`
			} `json:"master"`
			Replicas []struct {
				ID         string `json:"id"`
				ClientAddr string `json:"client_addr"`
			} `json:"replicas"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || page.Master == nil || page.Master.ClientAddr != ms.ClientAddr() {
			return false
		}
		want := map[string]string{"6": p6.ClientAddr}
		for i, a := range c.Addrs() {
			want[strconv.Itoa(i+1)] = a
		}
		for _, r := range page.Replicas {
			if w, ok := want[r.ID]; ok && r.ClientAddr == w {
				delete(want, r.ID)
			}
		}
		return len(want) == 0
	})

	// Idempotent: the same add again changes nothing; other addresses for
	// a member are refused; removing the unreachable member twice works.
	if _, err := lcadmin.New(cl).AddReplica(ctx, "6", p6.ClientAddr, p6.RaftAddr); err != nil {
		t.Fatalf("repeated add: %v", err)
	}
	if _, err := lcadmin.New(cl).AddReplica(ctx, "6", p6.ClientAddr, fmt.Sprintf("127.0.0.1:%d", ghost[1])); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("re-adding a member at another address: %v, want ErrBadRequest", err)
	}
	for range 2 {
		if l, err = lcadmin.New(cl).RemoveReplica(ctx, "9"); err != nil {
			t.Fatalf("remove the unreachable member: %v", err)
		}
		if _, ok := memberOf(l, "9"); ok {
			t.Fatalf("member 9 still listed after its removal: %+v", l)
		}
	}

	// The new member can lead, and the other replicas' leader hints name
	// its client address.
	if err := ms.Replica().TransferLeadershipTo(ctx, "6"); err != nil {
		t.Fatalf("transfer leadership to member 6: %v", err)
	}
	pollUntil(t, 20*time.Second, "member 6's master to serve", func() bool { ok, _ := s6.IsMaster(); return ok })
	pollUntil(t, 10*time.Second, "a follower's hint to name member 6", func() bool {
		st, err := lcadmin.QueryStatus(ctx, c.Addrs()[1])
		return err == nil && st.Master == p6.ClientAddr
	})
	cfg1 := c.ClientConfig()
	cfg1.Replicas = []string{c.Addrs()[1]}
	via1 := c.ClientWith(t, cfg1)
	h := mustOpen(t, ctx, via1, c.Name("led-by-6"), client.Read|client.Write|client.Create)
	h.Close()

	// Removing the master hands leadership over first; the client's retry
	// lands on the new master, which removes it.
	l, err = lcadmin.New(cl).RemoveReplica(ctx, "6")
	if err != nil {
		t.Fatalf("remove the master: %v", err)
	}
	if _, ok := memberOf(l, "6"); ok || l.Voters() != 5 {
		t.Fatalf("after removing member 6: %+v", l)
	}
	if m, ok := l.Find(c.Server(c.WaitForMaster(10 * time.Second)).ID()); !ok || !m.Master {
		t.Fatalf("the list names no master among the old members: %+v", l)
	}
	h = mustOpen(t, ctx, cl, c.Name("after-removal"), client.Read|client.Write|client.Create)
	h.Close()
}

// TestMembershipRefusals: membership is the admin's alone on a TLS cell;
// a removal that would leave the healthy voters short of a quorum, or
// fewer voters than a majority of the configured size, is refused with a
// typed error and changes nothing; bad addresses are refused.
func TestMembershipRefusals(t *testing.T) {
	logs := &lockedBuffer{}
	c := fixtures.NewCell(t, 5, fixtures.Options{TLS: fixtures.TestCerts(t, "alice"),
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	admin := c.Client(t)
	alice := c.ClientWith(t, c.ClientConfigAs("alice"))
	ctx := ctxT(t, 90*time.Second)

	if _, err := lcadmin.New(alice).Replicas(ctx); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("non-admin list: %v, want ErrPermission", err)
	}
	if _, err := lcadmin.New(alice).RemoveReplica(ctx, "1"); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("non-admin remove: %v, want ErrPermission", err)
	}
	if _, err := lcadmin.New(alice).AddReplica(ctx, "7", "127.0.0.1:1", "127.0.0.1:2"); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("non-admin add: %v, want ErrPermission", err)
	}
	if _, err := lcadmin.New(admin).AddReplica(ctx, "7", "127.0.0.1:99999", "127.0.0.1:2"); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("add with port 99999: %v, want ErrBadRequest", err)
	}
	if _, err := lcadmin.New(admin).AddReplica(ctx, "7", "127.0.0.1:3", c.Options().Peers[0].RaftAddr); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("add at a member's Raft address: %v, want ErrBadRequest", err)
	}

	m := c.WaitForMaster(30 * time.Second)
	var others []int
	for i := range 5 {
		if i != m {
			others = append(others, i)
		}
	}
	id := func(i int) string { return c.Options().Peers[i].ID }
	dead1, dead2, live := others[0], others[1], others[2]
	c.Stop(dead1)
	c.Stop(dead2)
	pollUntil(t, 20*time.Second, "the master to see two members unhealthy", func() bool {
		l, err := lcadmin.New(admin).Replicas(ctx)
		if err != nil {
			return false
		}
		a, _ := l.Find(id(dead1))
		b, _ := l.Find(id(dead2))
		return !a.Healthy && !b.Healthy
	})
	refused := func(what, rid, reason string) {
		t.Helper()
		_, err := lcadmin.New(admin).RemoveReplica(ctx, rid)
		if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), reason) {
			t.Fatalf("%s: %v, want ErrBadRequest saying %q", what, err, reason)
		}
		l, err := lcadmin.New(admin).Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := l.Find(rid); !ok {
			t.Fatalf("%s was refused, yet member %s is gone: %+v", what, rid, l)
		}
	}
	// Five voters, three healthy: without a healthy one, two of four.
	refused("removing a healthy voter with two down", id(live), "healthy voters")
	for _, d := range []int{dead1, dead2} {
		if _, err := lcadmin.New(admin).RemoveReplica(ctx, id(d)); err != nil {
			t.Fatalf("remove dead member %s: %v", id(d), err)
		}
	}
	// Three voters left: a majority of five, and no fewer may remain.
	refused("removing a third voter of a cell configured for five", id(live), "fewer than a majority")
	refused("removing the master of a cell configured for five", id(m), "fewer than a majority")
	l, err := lcadmin.New(admin).Replicas(ctx)
	if err != nil || l.Voters() != 3 || l.ConfiguredSize != 5 {
		t.Fatalf("after the refusals: %+v, %v; want 3 voters of configured size 5", l, err)
	}
	h := mustOpen(t, ctx, admin, c.Name("still-serving"), client.Read|client.Write|client.Create)
	h.Close()

	// Each change asked for is an audit line, done or refused.
	audit := logs.String()
	for _, want := range []string{
		"principal=admin op=ReplicaRemove id=" + id(dead1) + " result=ok",
		"principal=admin op=ReplicaRemove id=" + id(live) + ` result="bad request: removing`,
		"principal=alice op=ReplicaRemove",
	} {
		if !strings.Contains(audit, want) {
			t.Errorf("no audit line with %q:\n%s", want, grepLines(audit, "op=Replica"))
		}
	}
}

// lockedBuffer is a bytes.Buffer many loggers may write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
