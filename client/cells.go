package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"lockcell/wire"
)

// ErrCrossCell is matched by the error of an operation that would span
// two cells: a transaction or a multi-lock whose names are of different
// cells. Cells are independent: nothing applies in two of them at once.
var ErrCrossCell = errors.New("lockcell: names of different cells in one operation (cells are independent: no cross-cell transactions)")

// Cells is one process's way into several cells: it routes each name to
// the Client of the name's cell (/ls/<cell>/...), dialling that cell on
// first use, finding its replicas by name (Config.CellsFile, then
// Config.CellsDomain, or the resolver WithCellResolver gives), and
// reusing the Client from then on. Relative names are of the home cell,
// base Config.Cell.
//
// Each cell keeps its own session, cache, handles and events: a lock in
// one cell and a lock in another are independent (either can be lost
// while the other is held, each to its own cell's session), a cached read
// is kept fresh by its own cell only, and no operation spans two cells
// (ErrCrossCell). Cells is safe for concurrent use; its lock is a leaf
// held across no dial or call.
type Cells struct {
	base      Config
	res       CellResolver
	configure func(cell string, cfg *Config)

	mu     sync.Mutex
	closed bool
	cells  map[string]*cellConn
}

// cellConn is one cell's Client, or its dial in progress (ready not yet
// closed).
type cellConn struct {
	ready chan struct{}
	c     *Client
	err   error
}

// CellsOption adjusts NewCells.
type CellsOption func(*Cells)

// WithCellResolver finds cells with r instead of the base Config's cells
// file and SRV domain.
func WithCellResolver(r CellResolver) CellsOption { return func(cs *Cells) { cs.res = r } }

// WithCellConfig lets f adjust the Config each cell is dialled with (a
// Dialer or a TLS configuration of its own, say) after Cells has set its
// Cell and Replicas.
func WithCellConfig(f func(cell string, cfg *Config)) CellsOption {
	return func(cs *Cells) { cs.configure = f }
}

// NewCells returns a Cells dialling with base: every cell gets base with
// its own Cell and Replicas (the home cell, base.Cell, keeps base.Replicas
// when they are given; a ResumeTicket is used for the home cell only).
// It dials nothing yet. A cells file that does not load fails here.
func NewCells(base Config, opts ...CellsOption) (*Cells, error) {
	if err := wire.ValidCellName(base.Cell); err != nil {
		return nil, err
	}
	cs := &Cells{base: base, cells: map[string]*cellConn{}}
	for _, o := range opts {
		o(cs)
	}
	if cs.res == nil {
		r, err := CellResolverFor(base)
		if err != nil {
			return nil, err
		}
		cs.res = r
	}
	return cs, nil
}

// Home returns the home cell: the cell of relative names.
func (cs *Cells) Home() string { return cs.base.Cell }

// Lookup returns the replica addresses Cells dials cell at: base.Replicas
// for the home cell when given, else the resolver's answer (an error
// matching ErrUnknownCell when none knows it).
func (cs *Cells) Lookup(ctx context.Context, cell string) ([]string, error) {
	if err := wire.ValidCellName(cell); err != nil {
		return nil, err
	}
	if cell == cs.base.Cell && len(cs.base.Replicas) > 0 {
		return slices.Clone(cs.base.Replicas), nil
	}
	return cs.res.LookupCell(ctx, cell)
}

// Client returns the Client of cell, dialling it on first use (callers
// asking meanwhile wait for that dial, within their ctx). A dial that
// failed is tried again by the next call.
func (cs *Cells) Client(ctx context.Context, cell string) (*Client, error) {
	if err := wire.ValidCellName(cell); err != nil {
		return nil, err
	}
	for {
		cs.mu.Lock()
		if cs.closed {
			cs.mu.Unlock()
			return nil, ErrClosed
		}
		cc, ok := cs.cells[cell]
		if !ok {
			cc = &cellConn{ready: make(chan struct{})}
			cs.cells[cell] = cc
			cs.mu.Unlock()
			cs.dial(ctx, cell, cc)
			return cc.c, cc.err
		}
		cs.mu.Unlock()
		select {
		case <-cc.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if cc.err == nil {
			return cc.c, nil
		}
		// That dial failed and has been forgotten: try again.
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// dial dials cell for cc and publishes the outcome; a failure is
// forgotten so the next caller dials again, and a Client dialled while
// Close ran is closed.
func (cs *Cells) dial(ctx context.Context, cell string, cc *cellConn) {
	defer close(cc.ready)
	cfg := cs.base
	cfg.Cell = cell
	if cell != cs.base.Cell {
		cfg.ResumeTicket, cfg.ResumeOrCreate = nil, false
	}
	cfg.Replicas, cc.err = cs.Lookup(ctx, cell)
	if cc.err == nil {
		if cs.configure != nil {
			cs.configure(cell, &cfg)
		}
		cc.c, cc.err = Dial(ctx, cfg)
	}
	cs.mu.Lock()
	closed := cs.closed
	if cc.err != nil || closed {
		if cs.cells[cell] == cc {
			delete(cs.cells, cell)
		}
	}
	cs.mu.Unlock()
	if closed && cc.c != nil {
		cc.c.Close()
		cc.c, cc.err = nil, ErrClosed
	}
	if cc.err != nil {
		cc.err = fmt.Errorf("cell %s: %w", cell, cc.err)
	}
}

// CellOfName returns the cell name belongs to: its /ls/<cell>/ part, or
// the home cell for a relative name. A name of neither form fails with
// ErrInvalidName.
func (cs *Cells) CellOfName(name string) (string, error) {
	if name != "" && name[0] != '/' {
		return cs.base.Cell, nil
	}
	cell, ok := CellOf(name)
	if !ok {
		return "", opErr("open", name, wire.Errorf(wire.CodeInvalidName, "%.256q: names must start with /ls/<cell>/", name))
	}
	return cell, nil
}

// ClientFor returns the Client of the cell name belongs to (see
// CellOfName), dialling it on first use.
func (cs *Cells) ClientFor(ctx context.Context, name string) (*Client, error) {
	cell, err := cs.CellOfName(name)
	if err != nil {
		return nil, err
	}
	return cs.Client(ctx, cell)
}

// Open opens name in its cell's session (Client.Open).
func (cs *Cells) Open(ctx context.Context, name string, mode OpenMode, opts ...OpenOption) (*Handle, error) {
	c, err := cs.ClientFor(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.Open(ctx, name, mode, opts...)
}

// MkdirAll creates the directory name and its missing parents in its
// cell (Client.MkdirAll).
func (cs *Cells) MkdirAll(ctx context.Context, name string) error {
	c, err := cs.ClientFor(ctx, name)
	if err != nil {
		return err
	}
	return c.MkdirAll(ctx, name)
}

// CommitIn sends a transaction built by build in the one cell all of
// names belong to, which must all be full names of one cell or relative;
// names of two cells fail with ErrCrossCell before anything is sent.
func (cs *Cells) CommitIn(ctx context.Context, names []string, build func(*Txn)) (*TxnResult, error) {
	cell := ""
	for _, n := range names {
		c, err := cs.CellOfName(n)
		if err != nil {
			return nil, err
		}
		if cell != "" && c != cell {
			return nil, opErr("txn", n, fmt.Errorf("%w: %s and %s", ErrCrossCell, cell, c))
		}
		cell = c
	}
	if cell == "" {
		cell = cs.base.Cell
	}
	c, err := cs.Client(ctx, cell)
	if err != nil {
		return nil, err
	}
	t := c.Txn(ctx)
	build(t)
	for _, o := range t.ops {
		if oc, ok := CellOf(o.Path); ok && oc != cell {
			return nil, opErr("txn", o.Path, fmt.Errorf("%w: %s and %s", ErrCrossCell, cell, oc))
		}
	}
	for _, k := range t.checks {
		if kc, ok := CellOf(k.Path); ok && k.Path != "" && kc != cell {
			return nil, opErr("txn", k.Path, fmt.Errorf("%w: %s and %s", ErrCrossCell, cell, kc))
		}
	}
	return t.Commit()
}

// Dialled returns the cells whose Client is open, sorted.
func (cs *Cells) Dialled() []string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []string
	for name, cc := range cs.cells {
		select {
		case <-cc.ready:
			if cc.c != nil {
				out = append(out, name)
			}
		default:
		}
	}
	slices.Sort(out)
	return out
}

// Close closes every cell's Client (each bounded by its CloseTimeout,
// all at once) and returns their errors joined. Calls after it fail with
// ErrClosed.
func (cs *Cells) Close() error {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return nil
	}
	cs.closed = true
	var open []*cellConn
	for _, cc := range cs.cells {
		open = append(open, cc)
	}
	cs.cells = map[string]*cellConn{}
	cs.mu.Unlock()
	errs := make([]error, len(open))
	var wg sync.WaitGroup
	for i, cc := range open {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-cc.ready // a dial in progress closes its own Client (dial)
			if cc.c != nil && cc.err == nil {
				errs[i] = cc.c.Close()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
