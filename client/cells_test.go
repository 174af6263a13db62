package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// TestCellsFileFormat reads a cells file with comments, commas and
// blanks, and refuses each kind of broken line with a *CellsFileError
// naming the file and line.
func TestCellsFileFormat(t *testing.T) {
	f, err := client.ParseCellsFile(strings.NewReader("# cells\n\nglobal g1:7001 g2:7001  # two\neast\t10.0.0.1:7001,10.0.0.2:7001\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Cells(); !slices.Equal(got, []string{"east", "global"}) {
		t.Fatalf("cells = %v", got)
	}
	addrs, err := f.LookupCell(context.Background(), "east")
	if err != nil || !slices.Equal(addrs, []string{"10.0.0.1:7001", "10.0.0.2:7001"}) {
		t.Fatalf("east = %v, %v", addrs, err)
	}
	_, err = f.LookupCell(context.Background(), "west")
	var ue *client.UnknownCellError
	if !errors.Is(err, client.ErrUnknownCell) || !errors.As(err, &ue) || ue.Cell != "west" {
		t.Fatalf("west: %v, want an UnknownCellError", err)
	}
	for _, bad := range []struct{ text, want string }{
		{"a 1:1\na 2:2\n", "listed twice"},
		{"a\n", "no replica addresses"},
		{"a host-without-port\n", "not host:port"},
		{"b/c 1:1\n", "cell name"},
	} {
		path := filepath.Join(t.TempDir(), "cells")
		os.WriteFile(path, []byte(bad.text), 0o644)
		_, err := client.LoadCellsFile(path)
		var fe *client.CellsFileError
		if !errors.As(err, &fe) || fe.Path != path || fe.Line == 0 || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want a CellsFileError on a line of %s saying %q", bad.text, err, path, bad.want)
		}
	}
}

// TestSRVResolverAsksDNS finds a cell's replicas in SRV records served
// by a DNS server on loopback, and reports a name DNS does not know as
// an unknown cell.
func TestSRVResolverAsksDNS(t *testing.T) {
	dns := fixtures.NewSRVServer(t)
	dns.Set("_lockcell._tcp.east.cells.test", "127.0.0.1:7101", "127.0.0.1:7102")
	r := client.SRVResolver{Domain: "cells.test.", Resolver: dns.Resolver()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := r.LookupCell(ctx, "east")
	slices.Sort(addrs)
	if err != nil || !slices.Equal(addrs, []string{"localhost:7101", "localhost:7102"}) {
		t.Fatalf("east = %v, %v", addrs, err)
	}
	if _, err := r.LookupCell(ctx, "west"); !errors.Is(err, client.ErrUnknownCell) ||
		!strings.Contains(err.Error(), "_lockcell._tcp.west.cells.test") {
		t.Fatalf("west: %v, want ErrUnknownCell naming the SRV name", err)
	}
	// A chain: the file first, DNS for what it does not list.
	f, _ := client.ParseCellsFile(strings.NewReader("north 127.0.0.1:7201\n"))
	chain := client.Resolvers{f, r}
	if a, err := chain.LookupCell(ctx, "east"); err != nil || len(a) != 2 {
		t.Fatalf("chain east = %v, %v", a, err)
	}
	if a, err := chain.LookupCell(ctx, "north"); err != nil || len(a) != 1 {
		t.Fatalf("chain north = %v, %v", a, err)
	}
	if _, err := chain.LookupCell(ctx, "south"); !errors.Is(err, client.ErrUnknownCell) {
		t.Fatalf("chain south: %v", err)
	}
}

// TestCellsRoutesByCellName runs two real cells and one Cells: names
// of each cell reach that cell (seen from a plain Client of it), relative
// names the home cell; each cell has its own session, and a lock held in
// one does not stand in the way of the same name's lock in the other; a
// transaction across both is refused before anything is sent; Dial finds
// a cell known only by name through DNS; Close closes every cell's
// session.
func TestCellsRoutesByCellName(t *testing.T) {
	cells := fixtures.NewCells(t, 1, fixtures.Options{}, "west", "east")
	west, east := cells["west"], cells["east"]
	base := west.ClientConfig()
	base.CellsFile = fixtures.WriteCellsFile(t, map[string]*fixtures.Cell{"east": east})
	cs, err := client.NewCells(base)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	put := func(name, data string) {
		t.Helper()
		h, err := cs.Open(ctx, name, client.Write|client.Create)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		defer h.Close()
		if err := h.SetContents(ctx, []byte(data)); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
	put("/ls/east/x", "in east")
	put("x", "in west") // relative: the home cell
	for c, want := range map[*fixtures.Cell]string{east: "in east", west: "in west"} {
		cl := c.Client(t)
		h, err := cl.Open(ctx, c.Name("x"), client.Read)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := h.GetContentsAndStat(ctx)
		h.Close()
		if err != nil || string(got) != want {
			t.Fatalf("%s: %q, %v; want %q", c.Name("x"), got, err, want)
		}
	}
	if got := cs.Dialled(); !slices.Equal(got, []string{"east", "west"}) {
		t.Fatalf("dialled %v", got)
	}
	ce, _ := cs.Client(ctx, "east")
	cw, _ := cs.Client(ctx, "west")
	if ce == cw || ce.Cell() != "east" || cw.Cell() != "west" {
		t.Fatalf("one Client per cell: east %p (%s), west %p (%s)", ce, ce.Cell(), cw, cw.Cell())
	}
	// Locks of the same path in two cells are two locks.
	he, err := cs.Open(ctx, "/ls/east/x", client.Write)
	if err != nil {
		t.Fatal(err)
	}
	hw, err := cs.Open(ctx, "/ls/west/x", client.Write)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*client.Handle{he, hw} {
		if ok, err := h.TryAcquire(ctx, client.Exclusive); !ok || err != nil {
			t.Fatalf("lock %s: %v, %v", h.Name(), ok, err)
		}
	}
	_, err = cs.CommitIn(ctx, []string{"/ls/east/y", "/ls/west/y"}, func(tx *client.Txn) {
		tx.Then(client.OpCreate("/ls/east/y", nil), client.OpCreate("/ls/west/y", nil))
	})
	if !errors.Is(err, client.ErrCrossCell) {
		t.Fatalf("cross-cell txn: %v, want ErrCrossCell", err)
	}
	// Callers racing for a cell not yet dialled share one dial and one
	// Client.
	cs2, err := client.NewCells(base)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *client.Client, 8)
	for range 8 {
		go func() {
			c, err := cs2.Client(ctx, "east")
			if err != nil {
				t.Error(err)
			}
			got <- c
		}()
	}
	first := <-got
	for range 7 {
		if c := <-got; c != first || c == nil {
			t.Fatalf("racing callers got different Clients: %p and %p", first, c)
		}
	}
	if err := cs2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Client(ctx, "nowhere"); !errors.Is(err, client.ErrUnknownCell) {
		t.Fatalf("unknown cell: %v", err)
	}

	// A Client of a cell known only by name, through SRV records.
	dns := fixtures.NewSRVServer(t)
	dns.Set("_lockcell._tcp.east.cells.test", east.Addrs()...)
	cfg := east.ClientConfig()
	cfg.Replicas, cfg.CellsDomain, cfg.NetResolver = nil, "cells.test", dns.Resolver()
	byName, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("dial east by SRV: %v", err)
	}
	byName.Close()

	if err := cs.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := he.GetStat(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("east handle after Close: %v, want ErrClosed", err)
	}
	if _, err := cs.Open(ctx, "/ls/east/x", client.Read); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("open after Close: %v, want ErrClosed", err)
	}
}
