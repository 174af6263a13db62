package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// recordedLine is one slog record the adapter wrote.
type recordedLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// recordHandler keeps every record.
type recordHandler struct {
	mu    sync.Mutex
	lines []recordedLine
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	l := recordedLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool { l.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, l)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordHandler) take() []recordedLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.lines
	h.lines = nil
	return out
}

// raftLogger returns raft's logger as the replica builds it, writing to
// rec, on a clock the test moves.
func raftLogger(rec *recordHandler, now *time.Time) (hclog.Logger, *hclogWriter) {
	h, w := newRaftLogger(slog.New(rec))
	w.now = func() time.Time { return *now }
	return h, w
}

// TestRaftLogPeerDownIsRateLimited feeds the adapter what raft logs, with
// raft's own calls, while a peer is down for 25 s: a failed heartbeat
// every 150 ms, a failed append every second and a failed contact every
// 300 ms (some 280 lines). Each message is logged at its level the first
// time, then at most once per interval saying for how long the peer has
// failed and how many lines were held back, and once at INFO when the
// peer answers again; another peer's failure is not held back by the
// first's.
func TestRaftLogPeerDownIsRateLimited(t *testing.T) {
	rec := &recordHandler{}
	now := time.Unix(1e9, 0)
	h, w := raftLogger(rec, &now)
	start := now
	refused := errors.New("dial tcp 10.0.0.2:7101: connect: connection refused")
	sent := 0
	for step := 0; step <= 25000/50; step++ { // 25 s in 50 ms steps
		now = start.Add(time.Duration(step) * 50 * time.Millisecond)
		if step%3 == 0 {
			h.Error("failed to heartbeat to", "peer", "10.0.0.2:7101", "backoff time", 150*time.Millisecond, "error", refused)
			sent++
		}
		if step%20 == 0 {
			h.Error("failed to appendEntries to", "peer", "{Voter 2 10.0.0.2:7101}", "error", refused)
			sent++
		}
		if step%6 == 0 {
			h.Warn("failed to contact", "server-id", "2", "time", now.Sub(start))
			sent++
		}
	}
	lines := rec.take()
	count := map[string][]recordedLine{}
	for _, l := range lines {
		for _, m := range peerFailureMessages {
			if strings.Contains(l.msg, m) {
				count[m] = append(count[m], l)
			}
		}
	}
	if len(lines) != 9 {
		t.Fatalf("%d raft lines sent over 25 s of a peer down gave %d lines, want 9 (3 messages x the first and one per 10 s):\n%v", sent, len(lines), lines)
	}
	for _, m := range peerFailureMessages {
		ls := count[m]
		if len(ls) != 3 {
			t.Fatalf("%q: %d lines, want 3: %v", m, len(ls), ls)
		}
		want := slog.LevelError
		if m == "failed to contact" {
			want = slog.LevelWarn
		}
		for i, l := range ls {
			if l.level != want {
				t.Errorf("%q line %d at %v, want %v", m, i, l.level, want)
			}
		}
		if _, ok := ls[0].attrs["repeated"]; ok {
			t.Errorf("%q: the first line carries a repeat count: %v", m, ls[0])
		}
		if got := ls[1].attrs["down_for"]; got != "10s" {
			t.Errorf("%q: second line down_for=%q, want 10s: %v", m, got, ls[1])
		}
		if got := ls[2].attrs["down_for"]; got != "20s" {
			t.Errorf("%q: third line down_for=%q, want 20s: %v", m, got, ls[2])
		}
	}
	// Every line sent is either logged or counted in a repeat.
	total := 0
	for _, ls := range count {
		total += len(ls)
		for _, l := range ls[1:] {
			var n int
			fmt.Sscan(l.attrs["repeated"], &n)
			total += n
		}
	}
	held := 0
	w.mu.Lock()
	for _, r := range w.runs {
		held += r.held
	}
	w.mu.Unlock()
	if total+held != sent {
		t.Errorf("logged %d + repeated and held %d != %d lines sent", total, held, sent)
	}

	// Another peer's first failure is logged at once.
	h.Error("failed to heartbeat to", "peer", "10.0.0.3:7101", "backoff time", 10*time.Millisecond, "error", refused)
	if got := rec.take(); len(got) != 1 || !strings.Contains(got[0].msg, "10.0.0.3:7101") {
		t.Fatalf("another peer's first failure: %v", got)
	}

	// Peer 2 answers: one INFO line, with how long it was down and what
	// failed; peer 3's run goes on.
	now = now.Add(time.Second)
	w.contacted("2", "10.0.0.2:7101")
	back := rec.take()
	if len(back) != 1 {
		t.Fatalf("recovery: %d lines, want 1: %v", len(back), back)
	}
	if l := back[0]; l.level != slog.LevelInfo || !strings.Contains(l.msg, "answers again") || l.attrs["down_for"] != "26s" ||
		l.attrs["peer"] != "2" || l.attrs["failures"] != fmt.Sprint(sent) || l.attrs["repeated"] != fmt.Sprint(held) {
		t.Errorf("recovery line: %+v, want peer 2 down_for=26s failures=%d repeated=%d", l, sent, held)
	}
	w.contacted("2", "10.0.0.2:7101")
	w.contacted("3", "10.0.0.9:7101") // no run of its own; peer 3's is by address
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a second answer logged again: %v", got)
	}
	// A new failure of peer 2 starts a new run: logged at once.
	h.Error("failed to heartbeat to", "peer", "10.0.0.2:7101", "backoff time", 10*time.Millisecond, "error", refused)
	if got := rec.take(); len(got) != 1 || got[0].level != slog.LevelError || got[0].attrs["repeated"] != "" {
		t.Fatalf("peer 2 failing again: %v", got)
	}
	// So does a failure after the run went quiet past failureRunIdle
	// (this replica stopped leading, say), without a recovery line.
	now = now.Add(failureRunIdle + time.Second)
	h.Error("failed to heartbeat to", "peer", "10.0.0.3:7101", "backoff time", 10*time.Millisecond, "error", refused)
	if got := rec.take(); len(got) != 1 || got[0].attrs["repeated"] != "" {
		t.Fatalf("a failure after an idle run: %v", got)
	}
}

// TestRaftLogRoutineEventsAtInfo: raft's WARN lines for routine events (a
// new cell's first election, a member waiting to be added, a joining
// member's log being caught up) are logged at INFO; the same election
// line after losing a known leader stays WARN, and other levels pass.
func TestRaftLogRoutineEventsAtInfo(t *testing.T) {
	rec := &recordHandler{}
	now := time.Unix(1e9, 0)
	h, _ := raftLogger(rec, &now)
	cases := []struct {
		log  func()
		want slog.Level
	}{
		{func() {
			h.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "", "last-leader-id", "")
		}, slog.LevelInfo},
		{func() {
			h.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "10.0.0.1:7101", "last-leader-id", "1")
		}, slog.LevelWarn},
		{func() {
			h.Warn("heartbeat timeout reached, not part of a stable configuration or a non-voter, not triggering a leader election")
		}, slog.LevelInfo},
		{func() { h.Warn("not part of stable configuration, aborting election") }, slog.LevelInfo},
		{func() {
			h.Warn("failed to get previous log", "previous-index", 14, "last-index", 0, "error", errors.New("log not found"))
		}, slog.LevelInfo},
		{func() {
			h.Warn("appendEntries rejected, sending older logs", "peer", "{Nonvoter 4 10.0.0.4:7101}", "next", 1)
		}, slog.LevelInfo},
		{func() { h.Info("snapshot complete up to", "index", 100) }, slog.LevelInfo},
		{func() { h.Warn("failed to contact quorum of nodes, stepping down") }, slog.LevelWarn},
		{func() { h.Error("failed to take snapshot", "error", errors.New("disk full")) }, slog.LevelError},
	}
	for i, c := range cases {
		c.log()
		got := rec.take()
		if len(got) != 1 || got[0].level != c.want {
			t.Errorf("case %d: %v, want one line at %v", i, got, c.want)
		}
	}
}

// TestRaftLogAdapterConcurrent: raft logs from many goroutines while the
// transport reports answers from others; under -race nothing races and
// every failure line is either logged or counted.
func TestRaftLogAdapterConcurrent(t *testing.T) {
	rec := &recordHandler{}
	h, w := newRaftLogger(slog.New(rec))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 200 {
				h.Error("failed to heartbeat to", "peer", fmt.Sprintf("10.0.0.%d:7101", g), "error", errors.New("refused"))
			}
		}()
		go func() {
			defer wg.Done()
			for range 200 {
				w.contacted(fmt.Sprint(g), fmt.Sprintf("10.0.0.%d:7101", g))
			}
		}()
	}
	wg.Wait()
	if len(rec.take()) == 0 {
		t.Fatal("nothing logged")
	}
}
