package replica

import (
	"bufio"
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// raft's log lines reach our log/slog stream through hclogWriter, which
// gives each line its level and keeps two kinds of noise out:
//
//   - Routine events that raft logs at WARN (the first election of a new
//     cell, a joining member's empty log being caught up, a member that
//     waits to be added) are logged at INFO: an operator's WARN means
//     look at me, and these need nothing.
//   - A peer that is down makes the leader log a failed heartbeat every
//     half heartbeat timeout, a failed append every few backoffs and a
//     failed contact every leader lease: some forty ERROR lines for a
//     peer down a few seconds. The first failure of a run is logged at
//     its level; repeats of the same message for the same peer are held
//     back and summed up at most once per failureLogInterval
//     (down_for=12s repeated=37); and when the peer answers again one
//     INFO line says so.

// failureLogInterval is the least time between two lines of one peer's
// run of one failure message.
const failureLogInterval = 10 * time.Second

// failureRunIdle ends a run that has had no failure line for this long
// (this replica stopped leading, or the peer was removed): the next
// failure starts a new run, logged at once. It is longer than raft's
// longest replication backoff (10 ms * 2^10).
const failureRunIdle = time.Minute

// peerFailureMessages are raft's per-peer failure lines that repeat while
// a peer is unreachable; peerOf finds the peer in each.
var peerFailureMessages = []string{"failed to heartbeat to", "failed to appendEntries to", "failed to contact"}

// routineRaftLines are raft's WARN lines for events that need nothing of
// an operator, logged at INFO: a prefix of the message (after the
// logger's name), and for the election line only when no leader was ever
// known (a new cell's first election; losing a known leader stays WARN).
var routineRaftLines = []struct {
	prefix, suffix string
}{
	{"heartbeat timeout reached, starting election", "last-leader-id="},
	{"heartbeat timeout reached, starting election", `last-leader-id=""`},
	{"heartbeat timeout reached, not part of a stable configuration or a non-voter", ""},
	{"not part of stable configuration, aborting election", ""},
	{"no known peers, aborting election", ""},
	{"failed to get previous log", ""},                 // a follower behind the leader: it is caught up next
	{"appendEntries rejected, sending older logs", ""}, // the leader's side of the same
}

// newHCLogger adapts slog for raft's hclog: raft's lines go to the slog
// logger at their level, so operators get one structured log stream.
func newHCLogger(l *slog.Logger) hclog.Logger {
	h, _ := newRaftLogger(l)
	return h
}

// newRaftLogger is newHCLogger that also returns its writer, whose
// contacted ends a peer's run of failure lines.
func newRaftLogger(l *slog.Logger) (hclog.Logger, *hclogWriter) {
	w := &hclogWriter{l: l}
	return hclog.New(&hclog.LoggerOptions{
		Name:   "raft",
		Level:  hclog.Info,
		Output: w,
	}), w
}

// hclogWriter receives hclog's formatted lines. Its zero value (with l)
// is ready; interval and now are for tests (zero: failureLogInterval and
// time.Now).
type hclogWriter struct {
	l        *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	runs map[failureKey]*failureRun // the peers failing now, by message
}

// failureKey is one failure message about one peer, named by id or
// address as the line names it.
type failureKey struct{ msg, peer string }

// failureRun is one peer's run of one failure message.
type failureRun struct {
	id, addr string // whichever the lines name, to match contacted
	shown    string // the peer as the line names it
	level    slog.Level
	since    time.Time // the run's first failure
	last     time.Time // the last failure line, logged or not
	logged   time.Time // the last line logged
	held     int       // lines held back since logged
	total    int       // lines in the run
}

// Write receives one formatted hclog line: "<time> [LEVEL] raft: msg: k=v".
func (w *hclogWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		w.line(sc.Text())
	}
	return len(p), nil
}

func (w *hclogWriter) line(line string) {
	level := slog.LevelInfo
	switch {
	case strings.Contains(line, "[ERROR]"):
		level = slog.LevelError
	case strings.Contains(line, "[WARN]"):
		level = slog.LevelWarn
	case strings.Contains(line, "[DEBUG]"), strings.Contains(line, "[TRACE]"):
		level = slog.LevelDebug
	}
	if i := strings.Index(line, "] "); i >= 0 {
		line = strings.TrimSpace(line[i+2:])
	}
	msg := line // without the logger's name
	if i := strings.Index(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	if level == slog.LevelWarn && routine(msg) {
		level = slog.LevelInfo
	}
	if level >= slog.LevelWarn {
		for _, f := range peerFailureMessages {
			if strings.HasPrefix(msg, f) {
				w.failure(level, f, msg, line)
				return
			}
		}
	}
	w.l.Log(context.Background(), level, line)
}

func routine(msg string) bool {
	for _, r := range routineRaftLines {
		if strings.HasPrefix(msg, r.prefix) && strings.HasSuffix(msg, r.suffix) {
			return true
		}
	}
	return false
}

// failure logs or holds back one per-peer failure line.
func (w *hclogWriter) failure(level slog.Level, kind, msg, line string) {
	id, addr, shown := peerOf(kind, msg)
	now := w.clock()
	w.mu.Lock()
	if w.runs == nil {
		w.runs = map[failureKey]*failureRun{}
	}
	k := failureKey{kind, shown}
	r := w.runs[k]
	if r != nil && now.Sub(r.last) > failureRunIdle {
		r = nil // an old run, ended without a word: start afresh
	}
	if r == nil {
		w.prune(now)
		w.runs[k] = &failureRun{id: id, addr: addr, shown: shown, level: level, since: now, last: now, logged: now, total: 1}
		w.mu.Unlock()
		w.l.Log(context.Background(), level, line)
		return
	}
	r.last = now
	r.total++
	if now.Sub(r.logged) < w.every() {
		r.held++
		w.mu.Unlock()
		return
	}
	held, downFor := r.held, now.Sub(r.since)
	r.held, r.logged = 0, now
	w.mu.Unlock()
	w.l.Log(context.Background(), level, line, "down_for", downFor.Round(time.Second).String(), "repeated", held)
}

// prune drops runs idle past failureRunIdle (under mu), so the map holds
// only peers failing now.
func (w *hclogWriter) prune(now time.Time) {
	for k, r := range w.runs {
		if now.Sub(r.last) > failureRunIdle {
			delete(w.runs, k)
		}
	}
}

// contacted ends every run of failures of the peer id at addr: the peer
// answered. One INFO line says so, with how long it failed, the lines
// held back since the last one logged and the failures in all. It is
// called on every answered append, so the common case (nothing failing)
// takes the lock and returns.
func (w *hclogWriter) contacted(id, addr string) {
	w.mu.Lock()
	if len(w.runs) == 0 {
		w.mu.Unlock()
		return
	}
	now := w.clock()
	var since time.Time
	var kinds []string
	held, total := 0, 0
	for k, r := range w.runs {
		if r.id != "" && r.id == id || r.addr != "" && r.addr == addr {
			if since.IsZero() || r.since.Before(since) {
				since = r.since
			}
			kinds = append(kinds, k.msg)
			held += r.held
			total += r.total
			delete(w.runs, k)
		}
	}
	w.mu.Unlock()
	if len(kinds) == 0 {
		return
	}
	sort.Strings(kinds)
	w.l.Info("raft: peer answers again", "peer", id, "addr", addr, "down_for", now.Sub(since).Round(time.Second).String(),
		"repeated", held, "failures", total, "failed", strings.Join(kinds, ", "))
}

func (w *hclogWriter) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}

func (w *hclogWriter) every() time.Duration {
	if w.interval > 0 {
		return w.interval
	}
	return failureLogInterval
}

// peerOf finds the peer a failure line names: "peer=ADDR" (heartbeat),
// peer="{Voter ID ADDR}" (appendEntries), "server-id=ID" (contact).
func peerOf(kind, msg string) (id, addr, shown string) {
	v := kvValue(msg, "server-id=")
	if kind != "failed to contact" {
		v = kvValue(msg, "peer=")
	}
	if strings.HasPrefix(v, "{") && strings.HasSuffix(v, "}") {
		f := strings.Fields(strings.Trim(v, "{}"))
		if len(f) == 3 {
			return f[1], f[2], f[1]
		}
		return "", "", v
	}
	if kind == "failed to contact" {
		return v, "", v
	}
	return "", v, v
}

// kvValue returns the value of key (e.g. "peer=") in an hclog line: up to
// the next space, or a quoted string without its quotes.
func kvValue(msg, key string) string {
	i := strings.Index(msg, key)
	if i < 0 {
		return ""
	}
	v := msg[i+len(key):]
	if strings.HasPrefix(v, `"`) {
		if j := strings.Index(v[1:], `"`); j >= 0 {
			return v[1 : j+1]
		}
		return v[1:]
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		return v[:j]
	}
	return v
}
