package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"lockcell/wire"
)

// Subtree watches: every change below a directory, at any depth, each
// with a Position a program can save and resume from in another process,
// after a master fail-over or after it stopped reading for a while. The
// cell keeps a bounded history of recent changes on every replica; the
// watch reads it after its position with calls that wait while nothing
// is new (wire.MethodWatchSubtree), so the cell holds nothing for a
// watcher between calls, a new master serves the same history, and a
// position older than the history is answered ErrHistoryCompacted instead
// of a silent gap.

// ErrHistoryCompacted says the cell's change history no longer reaches
// back to the position a watch asked to resume from (or the position is
// not one of this cell's). Changes may have been missed: re-read what you
// watch, then watch from now (SubtreeWatch.Position after the re-read
// is not enough: start a new watch without FromPosition before re-reading).
var ErrHistoryCompacted = errors.New("lockcell: the change history no longer reaches back to that position: re-read and watch from now")

// Position is a place in the cell's change history: the Raft index of the
// log entry that made a change and the change's ordinal within it.
// Positions of changes strictly increase in the order they happened, and
// every replica gives a change the same position. The zero Position is
// before every change. String and ParsePosition turn it into text and
// back, so a program can keep it on disk.
type Position struct {
	Index uint64
	Ord   uint32
}

// String writes p as "index.ord".
func (p Position) String() string {
	return strconv.FormatUint(p.Index, 10) + "." + strconv.FormatUint(uint64(p.Ord), 10)
}

// Less reports whether p comes before q.
func (p Position) Less(q Position) bool {
	return p.Index < q.Index || p.Index == q.Index && p.Ord < q.Ord
}

// ParsePosition reads a Position written by String ("index.ord"; a bare
// "index" is index.0). Anything else is an error wrapping ErrBadPosition.
func ParsePosition(s string) (Position, error) {
	i, o, dotted := strings.Cut(strings.TrimSpace(s), ".")
	idx, err := strconv.ParseUint(i, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("%w: %q: index: %w", ErrBadPosition, s, err)
	}
	var ord uint64
	if dotted {
		if ord, err = strconv.ParseUint(o, 10, 32); err != nil {
			return Position{}, fmt.Errorf("%w: %q: ordinal: %w", ErrBadPosition, s, err)
		}
	}
	return Position{Index: idx, Ord: uint32(ord)}, nil
}

// ErrBadPosition is wrapped by ParsePosition's errors.
var ErrBadPosition = errors.New("lockcell: malformed position")

// SubtreeKind says what a SubtreeEvent reports.
type SubtreeKind uint8

// Kinds of subtree event. The first four are changes to a node; Progress
// is the watch's position moving on with no change to report.
const (
	// NodeCreated: the node was created; Generation is its instance.
	NodeCreated SubtreeKind = SubtreeKind(wire.SubtreeCreated)
	// NodeContentsChanged: its contents were replaced; Generation is the
	// new content generation (Stat.ContentGen).
	NodeContentsChanged SubtreeKind = SubtreeKind(wire.SubtreeContents)
	// NodeDeleted: it was deleted; Generation is the instance deleted.
	NodeDeleted SubtreeKind = SubtreeKind(wire.SubtreeDeleted)
	// NodeLockAcquired: its lock was granted; Generation is the lock
	// generation (Stat.LockGen).
	NodeLockAcquired SubtreeKind = SubtreeKind(wire.SubtreeLockAcquired)
	// Progress: nothing below the directory changed up to Position. It
	// comes when the watch has waited a while (SubtreeProgressEvery) with
	// nothing to report, so a saved position stays inside the cell's
	// history however quiet the directory is. Path is empty.
	Progress SubtreeKind = 1 << 7
)

var subtreeKindNames = map[SubtreeKind]string{NodeCreated: "created", NodeContentsChanged: "contents", NodeDeleted: "deleted",
	NodeLockAcquired: "lock-acquired", Progress: "progress"}

// String names the kind ("created", "contents", "deleted",
// "lock-acquired", "progress").
func (k SubtreeKind) String() string {
	if s, ok := subtreeKindNames[k]; ok {
		return s
	}
	return "SubtreeKind(" + strconv.Itoa(int(k)) + ")"
}

// SubtreeEvent is one change below a watched directory, or a Progress
// event. After handling it, a program that saves Position and later
// watches FromPosition(Position) gets every change after it, none twice.
type SubtreeEvent struct {
	Position   Position
	Path       string
	Kind       SubtreeKind
	Generation uint64
}

// SubtreeProgressEvery is how long a watch waits for a change before it
// reports Progress (and the longest one call to the cell waits).
const SubtreeProgressEvery = 5 * time.Second

// WatchOption configures Handle.WatchSubtree.
type WatchOption func(*watchConfig)

type watchConfig struct {
	from  *Position
	kinds uint8
}

// FromPosition starts the watch with the first change after p, a position
// from an earlier watch's event (possibly another process's). Without it
// the watch starts now: only changes after WatchSubtree returns.
func FromPosition(p Position) WatchOption {
	return func(c *watchConfig) { c.from = &p }
}

// WithKinds delivers only changes of the given kinds (Progress is always
// delivered). Without it every kind is.
func WithKinds(kinds ...SubtreeKind) WatchOption {
	return func(c *watchConfig) {
		for _, k := range kinds {
			c.kinds |= uint8(k) & wire.SubtreeAllKinds
		}
	}
}

// SubtreeWatch is a running subtree watch (Handle.WatchSubtree).
type SubtreeWatch struct {
	ch     chan SubtreeEvent
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// Events delivers the watch's events in position order, each once. The
// channel is unbuffered: an event is sent only once the previous one was
// received, and the watch asks the cell for more only as events are
// taken, so a program that stops reading holds nothing on the cell and
// loses nothing (unless it stays away longer than the cell's history
// reaches, when the watch ends with ErrHistoryCompacted). It is closed
// when the watch ends: Err says why.
func (w *SubtreeWatch) Events() <-chan SubtreeEvent { return w.ch }

// Err reports why the watch ended once Events is closed: the context's
// error, ErrClosed (the handle or client closed), ErrHistoryCompacted, or
// the cell's answer (ErrHandleInvalid when the directory was deleted,
// ErrPermission); nil while it runs.
func (w *SubtreeWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Stop ends the watch and waits until its goroutine has gone; Events is
// closed and Err is context.Canceled.
func (w *SubtreeWatch) Stop() {
	w.cancel()
	<-w.done
}

// subtreeWatches are a handle's running watches, ended by its Close.
type subtreeWatches struct {
	mu      sync.Mutex
	closed  bool
	cancels map[*SubtreeWatch]context.CancelFunc
}

func (s *subtreeWatches) add(w *SubtreeWatch, cancel context.CancelFunc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.cancels == nil {
		s.cancels = map[*SubtreeWatch]context.CancelFunc{}
	}
	s.cancels[w] = cancel
	return true
}

func (s *subtreeWatches) remove(w *SubtreeWatch) {
	s.mu.Lock()
	delete(s.cancels, w)
	s.mu.Unlock()
}

// closeAll ends every watch of a handle being closed.
func (s *subtreeWatches) closeAll() {
	s.mu.Lock()
	s.closed = true
	cancels := s.cancels
	s.cancels = nil
	s.mu.Unlock()
	for _, c := range cancels {
		c()
	}
}

// errWatchHandleClosed is the cancel cause of a watch whose handle closed.
var errWatchHandleClosed = fmt.Errorf("%w: the watched handle was closed", ErrClosed)

// WatchSubtree watches every change below the directory h names, at any
// depth: nodes created, contents replaced, nodes deleted, locks granted
// (lock releases are not reported), each once and in the order they
// happened, with its position, and a Progress event when nothing has
// changed for SubtreeProgressEvery. Only changes to nodes the session's
// principal could read when they happened are delivered; the others do
// not appear at all.
//
// The watch survives master fail-overs and session renewals without a gap
// or a repeat, and a program that saves the last Position it handled can
// resume in a later process with FromPosition. It runs until ctx ends,
// Stop, the handle or client closes, or the cell answers an error that
// will not pass (Err). WatchSubtree itself fails if h is not an open
// directory, or with ErrHistoryCompacted if the cell's history no longer
// reaches back to FromPosition's position.
func (h *Handle) WatchSubtree(ctx context.Context, opts ...WatchOption) (*SubtreeWatch, error) {
	var cfg watchConfig
	for _, o := range opts {
		o(&cfg)
	}
	// The first call checks the handle, and fixes the position: now, or
	// the one asked for if the history still reaches it.
	first := &wire.WatchSubtreeRequest{Now: cfg.from == nil, Kinds: cfg.kinds, Max: 1}
	if cfg.from != nil {
		first.After = wire.SubtreePos{Index: cfg.from.Index, Ord: cfg.from.Ord}
		first.Max = 0 // changes already there come in the first page
	}
	var resp wire.WatchSubtreeResponse
	if err := h.do(ctx, "watch", wire.MethodWatchSubtree, first, &resp); err != nil {
		return nil, err
	}
	if resp.Compacted {
		return nil, opErr("watch", h.path, ErrHistoryCompacted)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	stopBase := context.AfterFunc(h.c.base, func() { cancel(ErrClosed) })
	w := &SubtreeWatch{ch: make(chan SubtreeEvent), done: make(chan struct{})}
	w.cancel = func() { cancel(context.Canceled) }
	if !h.subtree.add(w, func() { cancel(errWatchHandleClosed) }) {
		stopBase()
		cancel(nil)
		return nil, opErr("watch", h.path, ErrClosed)
	}
	// The changes found come first; then the watch asks after Next, up
	// to which the cell looked (whether or not it found a change there).
	pending, next := resp.Changes, resp.Next
	go func() {
		defer close(w.done)
		defer stopBase()
		defer h.subtree.remove(w)
		err := h.runSubtree(wctx, w, pending, next, cfg.kinds)
		cancel(nil) // the watch's context is done with
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		close(w.ch)
	}()
	return w, nil
}

// runSubtree delivers pending, then asks the cell for the changes after
// next, page by page, until ctx ends or an answer ends the watch.
func (h *Handle) runSubtree(ctx context.Context, w *SubtreeWatch, pending []wire.SubtreeChange, next wire.SubtreePos, kinds uint8) error {
	var wait backoff
	told := wire.SubtreePos{} // the last position the program was given
	idleSince := h.c.clock.Now()
	send := func(ev SubtreeEvent) bool {
		select {
		case w.ch <- ev:
			told = wire.SubtreePos{Index: ev.Position.Index, Ord: ev.Position.Ord}
			idleSince = h.c.clock.Now()
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		for _, c := range pending {
			if !send(SubtreeEvent{Position: Position{c.Pos.Index, c.Pos.Ord}, Path: c.Path, Kind: SubtreeKind(c.Kind), Generation: c.Generation}) {
				return context.Cause(ctx)
			}
		}
		// Progress when the watch has been quiet for a while: the cell
		// looked up to next and found nothing more for this watch.
		if wirePosLess(told, next) && h.c.clock.Now().Sub(idleSince) >= SubtreeProgressEvery*9/10 {
			if !send(SubtreeEvent{Position: Position{next.Index, next.Ord}, Kind: Progress}) {
				return context.Cause(ctx)
			}
		}
		req := &wire.WatchSubtreeRequest{After: next, Kinds: kinds, WaitMillis: uint32(SubtreeProgressEvery / time.Millisecond)}
		var resp wire.WatchSubtreeResponse
		err := h.do(ctx, "watch", wire.MethodWatchSubtree, req, &resp)
		switch {
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case err == nil:
			wait = backoff{}
		case errors.Is(err, ErrNoMaster), errors.Is(err, ErrTooMany), errors.Is(err, ErrCanceled), errors.Is(err, ErrTooManyConnections):
			// No master for a while, or refused for now (a read ration,
			// a bound on calls in progress): the position is kept, so
			// trying again later misses nothing.
			if serr := h.c.sleep(ctx, wait.next()); serr != nil {
				return context.Cause(ctx)
			}
			pending = nil
			continue
		default:
			return err
		}
		if resp.Compacted {
			return opErr("watch", h.path, ErrHistoryCompacted)
		}
		pending = resp.Changes
		if wirePosLess(next, resp.Next) {
			next = resp.Next
		}
	}
}

// wirePosLess reports whether position p comes before q.
func wirePosLess(p, q wire.SubtreePos) bool {
	return p.Index < q.Index || p.Index == q.Index && p.Ord < q.Ord
}
