// Package mirror copies a subtree of one cell into other cells and keeps
// the copies in step, as Chubby mirrors /ls/global to every cell: a full
// copy first (a walk of listings), then the source's subtree watch from
// the position the watch was started at, before the walk read anything,
// so no change falls between the two. Each change is applied by reading
// the source node as it is now and making the destination match, with
// writes conditional on the destination's generation, so applying a
// change twice, out of order, or from two mirror processes at once never
// leaves an older value behind once the source is quiet: the copy is
// eventually consistent, never ahead of the source.
//
// A history the watch can no longer resume in (ErrHistoryCompacted), a
// watch that ended for any other reason, a target that fell more than
// Config.MaxPending names behind, and a start all lead to a full re-sync
// of the targets concerned, which also deletes what vanished from the
// source meanwhile. Lag is measured per target: the age of the oldest
// change the mirror knows about and has not applied there
// (Mirror.Collector's lockcell_mirror_lag_seconds).
//
// The package uses only the client library's public API.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"lockcell/client"
)

// Defaults of Config.
const (
	// DefaultDest is Config.Dest's default: /ls/global/config/a is copied
	// to /ls/<target>/global/config/a.
	DefaultDest = "/ls/{target}/global"
	// DefaultMaxPending is Config.MaxPending's default.
	DefaultMaxPending = 10_000
	// DefaultRetry is Config.Retry's default.
	DefaultRetry = 5 * time.Second
	// WalkPage is how many names one listing page of a re-sync holds; a
	// re-sync holds two pages (source and destination) per directory
	// level it is inside.
	WalkPage = 256
)

// ErrConfig is matched by New's errors: a Config it cannot run.
var ErrConfig = errors.New("mirror: bad configuration")

// Config says what to mirror where.
type Config struct {
	// Cells reaches the source and the target cells (each found by name).
	// Its base Config should set RenewSession, so that a session lost to
	// a long partition is replaced rather than ending the mirror's use of
	// the cell.
	Cells *client.Cells
	// From is the source cell; Subtree the directory copied, a full name
	// in it (/ls/<From>/...).
	From    string
	Subtree string
	// To are the target cells.
	To []string
	// Dest is where a source name /ls/<From>/<rest> goes in a target:
	// Dest + "/" + <rest>, "{target}" replaced by the target's name.
	// Default DefaultDest.
	Dest string
	// MaxPending bounds the changed names the mirror holds for one target
	// it cannot write to (it holds each name once, however often it
	// changes); past it the target's queue is dropped and the target is
	// re-synced in full instead. Default DefaultMaxPending.
	MaxPending int
	// Retry is the longest wait between tries of a failed step (a write,
	// a watch); waits start at 100 ms and double. Default DefaultRetry.
	Retry time.Duration
	// Logger receives the mirror's logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock lag is measured with (default time.Now).
	Now func() time.Time
}

// Reasons for a full re-sync (the reason label of
// lockcell_mirror_resyncs_total).
const (
	ReasonStart     = "start"     // the mirror started
	ReasonCompacted = "compacted" // the source's history no longer reached the watch's position
	ReasonWatch     = "watch"     // the watch ended otherwise (the source unreachable past the session, the subtree deleted)
	ReasonOverflow  = "overflow"  // a target fell more than MaxPending names behind
)

// Mirror runs one mirroring: New, then Run.
type Mirror struct {
	cfg     Config
	log     *slog.Logger
	targets []*target

	mu        sync.Mutex
	heard     time.Time // the source watch last answered (zero: never)
	started   time.Time
	sourceErr string
}

// New checks cfg and returns a Mirror that does nothing until Run.
func New(cfg Config) (*Mirror, error) {
	if cfg.Cells == nil {
		return nil, fmt.Errorf("%w: no Cells", ErrConfig)
	}
	if cell, ok := client.CellOf(cfg.Subtree); !ok || cell != cfg.From {
		return nil, fmt.Errorf("%w: the subtree %q is not a name in cell %q (/ls/%s/...)", ErrConfig, cfg.Subtree, cfg.From, cfg.From)
	}
	cfg.Subtree = strings.TrimRight(cfg.Subtree, "/")
	if len(cfg.To) == 0 {
		return nil, fmt.Errorf("%w: no target cells", ErrConfig)
	}
	if cfg.Dest == "" {
		cfg.Dest = DefaultDest
	}
	cfg.Dest = strings.TrimRight(cfg.Dest, "/")
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Mirror{cfg: cfg, log: cfg.Logger.With("mirror", cfg.Subtree)}
	for _, to := range cfg.To {
		if slices.ContainsFunc(m.targets, func(t *target) bool { return t.name == to }) {
			return nil, fmt.Errorf("%w: target %q named twice", ErrConfig, to)
		}
		t := &target{name: to, pending: map[string]time.Time{}, wake: make(chan struct{}, 1), resyncs: map[string]uint64{}}
		t.root = m.dest(t, cfg.Subtree)
		if cell, ok := client.CellOf(t.root); !ok || cell != to {
			return nil, fmt.Errorf("%w: --dest %q puts target %s's copy at %q, not in cell %s", ErrConfig, cfg.Dest, to, t.root, to)
		}
		if to == cfg.From && (within(t.root, cfg.Subtree) || within(cfg.Subtree, t.root)) {
			return nil, fmt.Errorf("%w: the copy %s and the source %s overlap", ErrConfig, t.root, cfg.Subtree)
		}
		m.targets = append(m.targets, t)
	}
	return m, nil
}

// within reports whether name is dir or below it.
func within(name, dir string) bool { return name == dir || strings.HasPrefix(name, dir+"/") }

// dest is where source name src goes in t.
func (m *Mirror) dest(t *target, src string) string {
	rest := strings.TrimPrefix(src, "/ls/"+m.cfg.From)
	return strings.ReplaceAll(m.cfg.Dest, "{target}", t.name) + rest
}

// Run mirrors until ctx ends, then returns ctx's error. Nothing it meets
// on the way ends it: failures are logged, counted and retried.
func (m *Mirror) Run(ctx context.Context) error {
	m.mu.Lock()
	m.started = m.cfg.Now()
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range m.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.runTarget(ctx, t)
		}()
	}
	m.runSource(ctx)
	wg.Wait()
	return ctx.Err()
}

// runSource keeps a watch on the source subtree and hands every change
// to the targets. Each new watch starts from now, before anything is
// re-read, and is followed by a re-sync of every target: whatever
// happened between two watches is then found by the walk.
func (m *Mirror) runSource(ctx context.Context) {
	wait := backoff{max: m.cfg.Retry}
	reason := ReasonStart
	for ctx.Err() == nil {
		err := m.watchOnce(ctx, reason)
		if ctx.Err() != nil {
			return
		}
		reason = ReasonWatch
		if err == nil {
			err = errors.New("mirror: the source watch ended")
		}
		if errors.Is(err, client.ErrHistoryCompacted) {
			reason = ReasonCompacted
			wait = backoff{max: m.cfg.Retry} // nothing to wait for: re-sync at once
		}
		m.mu.Lock()
		m.sourceErr = err.Error()
		m.mu.Unlock()
		m.log.Warn("mirror: the source watch ended; re-syncing from a new one", "err", err, "reason", reason)
		if reason != ReasonCompacted {
			if sleep(ctx, wait.next()) != nil {
				return
			}
		}
	}
}

// watchOnce runs one watch until it ends, requesting a re-sync (for
// reason) once the watch has its position.
func (m *Mirror) watchOnce(ctx context.Context, reason string) error {
	c, err := m.cfg.Cells.Client(ctx, m.cfg.From)
	if err != nil {
		return err
	}
	h, err := c.Open(ctx, m.cfg.Subtree, client.Read)
	if err != nil {
		return err
	}
	defer h.Close()
	w, err := h.WatchSubtree(ctx, client.WithKinds(client.NodeCreated, client.NodeContentsChanged, client.NodeDeleted))
	if err != nil {
		return err
	}
	defer w.Stop()
	now := m.cfg.Now()
	m.mu.Lock()
	m.heard, m.sourceErr = now, ""
	m.mu.Unlock()
	for _, t := range m.targets {
		t.requestResync(reason, now)
	}
	for ev := range w.Events() {
		now := m.cfg.Now()
		m.mu.Lock()
		m.heard = now
		m.mu.Unlock()
		if ev.Kind == client.Progress || !within(ev.Path, m.cfg.Subtree) {
			continue
		}
		for _, t := range m.targets {
			t.changed(ev.Path, now, m.cfg.MaxPending)
		}
	}
	return w.Err()
}

// backoff doubles a wait from 100 ms up to max.
type backoff struct {
	cur, max time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = 100 * time.Millisecond
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Subtree returns the source directory mirrored.
func (m *Mirror) Subtree() string { return m.cfg.Subtree }
