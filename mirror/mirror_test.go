package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/fixtures"
	"lockcell/mirror"
)

// tree returns every node below root as "rel" -> contents ("rel/" ->
// "" for a directory), nil when root does not exist.
func tree(ctx context.Context, cl *client.Client, root string) (map[string]string, error) {
	out := map[string]string{}
	var visit func(name, rel string) error
	visit = func(name, rel string) error {
		h, err := cl.Open(ctx, name, client.Read)
		if err != nil {
			return err
		}
		defer h.Close()
		st, err := h.GetStat(ctx)
		if err != nil {
			return err
		}
		if !st.Dir {
			data, _, err := h.GetContentsAndStat(ctx)
			out[rel] = string(data)
			return err
		}
		out[rel+"/"] = ""
		ents, err := h.ReadDir(ctx)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := visit(name+"/"+e.Name, rel+"/"+e.Name); err != nil {
				return err
			}
		}
		return nil
	}
	if err := visit(root, ""); errors.Is(err, client.ErrNotFound) && len(out) == 0 {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return out, nil
}

// eventually polls f until it returns nil or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, d, err)
}

// put writes name (creating it and its parents).
func put(t testing.TB, ctx context.Context, cl *client.Client, name, data string) {
	t.Helper()
	h, err := cl.Open(ctx, name, client.Write|client.Create, client.WithParents())
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer h.Close()
	if err := h.SetContents(ctx, []byte(data)); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
}

func del(t testing.TB, ctx context.Context, cl *client.Client, name string) {
	t.Helper()
	h, err := cl.Open(ctx, name, client.Write)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer h.Close()
	if err := h.Delete(ctx); err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
}

// rig is a source cell "global", targets, and a Cells reaching them all.
type rig struct {
	cells map[string]*fixtures.Cell
	cs    *client.Cells
	cut   map[string]*fixtures.Cutter
	file  string // the cells file
	m     *mirror.Mirror
	reg   *prometheus.Registry
}

func newRig(t testing.TB, opts fixtures.Options, targets ...string) *rig {
	r := &rig{cells: fixtures.NewCells(t, 1, opts, append([]string{"global"}, targets...)...), cut: map[string]*fixtures.Cutter{}}
	base := r.cells["global"].ClientConfig()
	base.RenewSession = true
	r.file = fixtures.WriteCellsFile(t, r.cells)
	base.CellsFile = r.file
	for name := range r.cells {
		r.cut[name] = fixtures.NewCutter()
	}
	cs, err := client.NewCells(base, client.WithCellConfig(func(cell string, cfg *client.Config) { cfg.Dialer = r.cut[cell].Dial }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	r.cs = cs
	return r
}

// run starts a mirror of /ls/global/config to the targets; it stops when
// the test ends.
func (r *rig) run(t testing.TB, targets ...string) { r.runWith(t, 0, targets...) }

// runWith is run with Config.MaxPending set to maxPending (0: the default).
func (r *rig) runWith(t testing.TB, maxPending int, targets ...string) {
	m, err := mirror.New(mirror.Config{Cells: r.cs, From: "global", Subtree: "/ls/global/config", To: targets,
		Retry: 200 * time.Millisecond, Logger: fixtures.Logger(), MaxPending: maxPending})
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	r.reg = prometheus.NewRegistry()
	r.reg.MustRegister(m.Collector())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// metric reads a mirror metric's value for target (and reason, for the
// re-sync counter).
func (r *rig) metric(t testing.TB, name, target, reason string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["target"] != target || reason != "" && labels["reason"] != reason {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s{target=%q}", name, target)
	return 0
}

// inStep reports nil once every target's copy equals the source subtree.
func (r *rig) inStep(ctx context.Context, src *client.Client, targets map[string]*client.Client) func() error {
	return func() error {
		want, err := tree(ctx, src, "/ls/global/config")
		if err != nil {
			return err
		}
		for name, cl := range targets {
			got, err := tree(ctx, cl, "/ls/"+name+"/global/config")
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if !maps.Equal(got, want) {
				return fmt.Errorf("%s has %v, the source %v", name, got, want)
			}
		}
		return nil
	}
}

// TestMirrorKeepsTargetsInStep mirrors a subtree of a real global cell
// into two real target cells: the first copy brings over what was there
// and deletes from a target what the source lacks; creations, writes and
// deletions follow; while one target is down its lag rises (the other
// stays in step), and once it is back it catches up and its lag falls to
// zero.
func TestMirrorKeepsTargetsInStep(t *testing.T) {
	r := newRig(t, fixtures.Options{}, "east", "west")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, east, west := r.cells["global"].Client(t), r.cells["east"].Client(t), r.cells["west"].Client(t)
	put(t, ctx, g, "/ls/global/config/a", "1")
	put(t, ctx, g, "/ls/global/config/d/b", "2")
	put(t, ctx, g, "/ls/global/other", "not mirrored")
	put(t, ctx, east, "/ls/east/global/config/stale/x", "left from before") // the first copy removes it
	put(t, ctx, east, "/ls/east/global/config/a", "old")

	r.run(t, "east", "west")
	targets := map[string]*client.Client{"east": east, "west": west}
	eventually(t, 30*time.Second, "first copy", r.inStep(ctx, g, targets))
	if n, err := tree(ctx, west, "/ls/west/global/other"); err != nil || n != nil {
		t.Fatalf("a name outside the subtree was copied: %v, %v", n, err)
	}

	put(t, ctx, g, "/ls/global/config/d/e/new", "3") // create, with a new directory
	put(t, ctx, g, "/ls/global/config/a", "1b")      // write
	del(t, ctx, g, "/ls/global/config/d/b")          // delete
	eventually(t, 30*time.Second, "changes", r.inStep(ctx, g, targets))

	// East goes down: its lag rises while west keeps up.
	r.cells["east"].Stop(0)
	put(t, ctx, g, "/ls/global/config/while-down", "4")
	del(t, ctx, g, "/ls/global/config/a")
	eventually(t, 30*time.Second, "west in step while east is down", r.inStep(ctx, g, map[string]*client.Client{"west": west}))
	eventually(t, 30*time.Second, "east's lag rising", func() error {
		if lag := r.metric(t, "lockcell_mirror_lag_seconds", "east", ""); lag < 1 {
			return fmt.Errorf("east lag %.3fs", lag)
		}
		if lag := r.metric(t, "lockcell_mirror_lag_seconds", "west", ""); lag != 0 {
			return fmt.Errorf("west lag %.3fs", lag)
		}
		return nil
	})
	r.cells["east"].Start(0)
	r.cells["east"].WaitForMaster(30 * time.Second)
	eventually(t, 60*time.Second, "east catching up", r.inStep(ctx, g, targets))
	eventually(t, 30*time.Second, "east's lag falling", func() error {
		if lag := r.metric(t, "lockcell_mirror_lag_seconds", "east", ""); lag != 0 {
			return fmt.Errorf("east lag %.3fs", lag)
		}
		return nil
	})
	if n := r.metric(t, "lockcell_mirror_resyncs_total", "east", mirror.ReasonStart); n != 1 {
		t.Errorf("start re-syncs of east = %v, want 1", n)
	}
}

// TestMirrorResyncsAfterCompaction cuts the mirror off from the source
// while a mirrored file is deleted and enough else changes that the
// source's history no longer reaches the watch's position: once back, the
// watch hears ErrHistoryCompacted, and the full re-sync that follows
// deletes the file from the target.
func TestMirrorResyncsAfterCompaction(t *testing.T) {
	r := newRig(t, fixtures.Options{Configure: func(c *cell.Config) { c.HistoryChanges = 16 }}, "east")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, east := r.cells["global"].Client(t), r.cells["east"].Client(t)
	put(t, ctx, g, "/ls/global/config/keep", "k")
	put(t, ctx, g, "/ls/global/config/gone", "g")
	r.run(t, "east")
	targets := map[string]*client.Client{"east": east}
	eventually(t, 30*time.Second, "first copy", r.inStep(ctx, g, targets))

	r.cut["global"].Cut()
	del(t, ctx, g, "/ls/global/config/gone")
	for i := range 40 {
		put(t, ctx, g, "/ls/global/churn", strings.Repeat("x", i))
	}
	r.cut["global"].Heal()
	eventually(t, 60*time.Second, "the deleted file removed", r.inStep(ctx, g, targets))
	if n := r.metric(t, "lockcell_mirror_resyncs_total", "east", mirror.ReasonCompacted); n < 1 {
		t.Fatalf("compacted re-syncs = %v, want at least 1 (status %+v)", n, r.m.Status())
	}
}

// TestMirrorOverflowResyncs bounds what the mirror holds for a target
// that is down: past MaxPending changed names it drops them and asks for
// a full re-sync, which brings the target in step once it is back.
func TestMirrorOverflowResyncs(t *testing.T) {
	r := newRig(t, fixtures.Options{}, "east")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, east := r.cells["global"].Client(t), r.cells["east"].Client(t)
	put(t, ctx, g, "/ls/global/config/a", "1")
	r.runWith(t, 3, "east")
	targets := map[string]*client.Client{"east": east}
	eventually(t, 30*time.Second, "first copy", r.inStep(ctx, g, targets))
	r.cut["east"].Cut()
	for i := range 8 {
		put(t, ctx, g, fmt.Sprintf("/ls/global/config/f%d", i), "v")
	}
	eventually(t, 30*time.Second, "an overflow re-sync asked for", func() error {
		if n := r.metric(t, "lockcell_mirror_resyncs_total", "east", mirror.ReasonOverflow); n < 1 {
			return fmt.Errorf("overflow re-syncs %v", n)
		}
		return nil
	})
	for _, st := range r.m.Status() {
		if st.Pending > 3+1 { // the bound, and the name being applied
			t.Fatalf("%s holds %d pending names, past the bound of 3", st.Target, st.Pending)
		}
	}
	r.cut["east"].Heal()
	eventually(t, 60*time.Second, "east in step after the re-sync", r.inStep(ctx, g, targets))
}

// TestMirrorWithTheDocumentedACLs runs the mirror as its own principal
// on TLS cells, with the ACLs docs/operations.md ("Running a mirror")
// tells an operator to set: in east, where they are set, the copy is made,
// readable by everyone and writable by the mirror alone; in west, where
// they are not, the mirror is refused and says so, and its lag grows.
func TestMirrorWithTheDocumentedACLs(t *testing.T) {
	set := fixtures.TestCerts(t)
	r := newRig(t, fixtures.Options{TLS: set, Admin: "admin"}, "east", "west")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g, east, west := r.cells["global"].Client(t), r.cells["east"].Client(t), r.cells["west"].Client(t)
	put(t, ctx, g, "/ls/global/config/a", "1")
	// As east's admin: the ACL files, then the names on /ls/east/global.
	put(t, ctx, east, "/ls/east/acl/mirror", "mirror\n")
	put(t, ctx, east, "/ls/east/acl/everyone", "*\n")
	if err := east.MkdirAll(ctx, "/ls/east/global"); err != nil {
		t.Fatal(err)
	}
	h, err := east.Open(ctx, "/ls/east/global", client.Read)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.SetACL(ctx, client.ACL{Read: "everyone", Write: "mirror"}); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := west.MkdirAll(ctx, "/ls/west/global"); err != nil { // the admin's, default ACLs
		t.Fatal(err)
	}

	mcfg := r.cells["global"].ClientConfigAs("mirror")
	mcfg.RenewSession, mcfg.CellsFile = true, r.file
	cs, err := client.NewCells(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	r.cs = cs
	r.run(t, "east", "west")
	eventually(t, 30*time.Second, "east's copy", r.inStep(ctx, g, map[string]*client.Client{"east": east}))
	eventually(t, 30*time.Second, "west refusing the mirror", func() error {
		for _, st := range r.m.Status() {
			if st.Target == "west" && (!strings.Contains(st.LastError, "permission") || st.Lag < time.Second) {
				return fmt.Errorf("west: %+v", st)
			}
		}
		return nil
	})

	bobCfg := r.cells["east"].ClientConfigAs("bob")
	bob := r.cells["east"].ClientWith(t, bobCfg)
	bh, err := bob.Open(ctx, "/ls/east/global/config/a", client.Read)
	if err != nil {
		t.Fatalf("bob reads the copy: %v", err)
	}
	defer bh.Close()
	if data, _, err := bh.GetContentsAndStat(ctx); err != nil || string(data) != "1" {
		t.Fatalf("bob reads %q, %v", data, err)
	}
	if _, err := bob.Open(ctx, "/ls/east/global/config/a", client.Write); !errors.Is(err, client.ErrPermission) {
		t.Fatalf("bob opens the copy for writing: %v, want ErrPermission", err)
	}
}

// TestMirrorConfigRefused: a subtree outside the source cell, no
// targets, and a destination overlapping the source are refused.
func TestMirrorConfigRefused(t *testing.T) {
	cs, err := client.NewCells(client.Config{Cell: "global", Replicas: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []mirror.Config{
		{Cells: cs, From: "global", Subtree: "/ls/east/config", To: []string{"east"}},
		{Cells: cs, From: "global", Subtree: "/ls/global/config"},
		{Cells: cs, From: "global", Subtree: "/ls/global/config", To: []string{"global"}, Dest: "/ls/{target}/config/copy"},
		{Cells: cs, From: "global", Subtree: "/ls/global/config", To: []string{"east"}, Dest: "/ls/west/x"},
	} {
		if _, err := mirror.New(cfg); !errors.Is(err, mirror.ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", cfg, err)
		}
	}
}
