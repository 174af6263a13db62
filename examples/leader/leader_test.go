package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/fixtures"
)

// The cell's lease and lock-delay, short so that a fail-over takes
// seconds: a dead leader's lock is free lease + lockDelay after its last
// KeepAlive at most.
const (
	lease     = 2 * time.Second
	lockDelay = 2 * time.Second
	// slack covers a Campaign's wake-up and the calls of a new leader
	// on a loaded machine.
	slack = 5 * time.Second
)

var (
	leadingRE = regexp.MustCompile(`^leading gen=(\d+)$`)
	prepareRE = regexp.MustCompile(`^prepare n=(\d+) gen=(\d+)$`)
	wroteRE   = regexp.MustCompile(`^wrote n=(\d+) gen=(\d+)$`)
)

// rig is a cell, a fenced store and the workers of one test.
type rig struct {
	t      *testing.T
	env    []string
	worker string
	store  *fixtures.LineProc
	url    string
	dir    string // the workers' ticket files
}

func newRig(t *testing.T) *rig {
	if testing.Short() {
		t.Skip("runs the example binaries against a cell; skipped with -short")
	}
	worker := fixtures.Binary{Pkg: "./examples/leader"}.Build(t)
	storeBin := fixtures.Binary{Pkg: "./examples/fencedstore"}.Build(t)
	c := fixtures.NewCell(t, 3, fixtures.Options{LeaseTTL: lease, DefaultLockDelay: lockDelay})
	r := &rig{t: t, worker: worker, dir: t.TempDir(),
		env: []string{"LOCKCELL_CELL=" + c.Options().Cell, "LOCKCELL_REPLICAS=" + strings.Join(c.Addrs(), ",")}}
	r.store = fixtures.StartLineProc(t, "fencedstore", storeBin, r.env, "-listen", "127.0.0.1:0")
	_, m := r.store.WaitLine(t, 0, regexp.MustCompile(`^listening (\S+)$`), 30*time.Second)
	r.url = "http://" + m[1]
	return r
}

// start starts a worker named id (its identity and the writer the store
// records), keeping its session ticket in a file of its own: a worker
// started again under the same id resumes the session.
func (r *rig) start(id string, args ...string) *fixtures.LineProc {
	args = append([]string{"-id", id, "-store", r.url, "-election", "leader-test/election",
		"-ticket", filepath.Join(r.dir, id+".ticket")}, args...)
	return fixtures.StartLineProc(r.t, id, r.worker, r.env, args...)
}

type write struct {
	Writer     string `json:"writer"`
	N          int    `json:"n"`
	Generation uint64 `json:"generation"`
	Reason     string `json:"reason"`
}

type storeLog struct {
	Accepted []write `json:"accepted"`
	Refused  []write `json:"refused"`
}

func (r *rig) log() storeLog {
	r.t.Helper()
	resp, err := http.Get(r.url + "/log")
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var l storeLog
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		r.t.Fatal(err)
	}
	return l
}

// waitLog polls the store until ok holds of its log.
func (r *rig) waitLog(what string, timeout time.Duration, ok func(storeLog) bool) storeLog {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l := r.log()
		if ok(l) {
			return l
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("store: %s: not within %v; log %+v", what, timeout, l)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkOrdered asserts what fencing promises: the accepted writes are in
// generation order (none of an old leader after a newer one's), each
// generation is one writer's, and one writer's writes within it are in
// order.
func checkOrdered(t *testing.T, l storeLog) {
	t.Helper()
	owner := map[uint64]string{}
	for i, w := range l.Accepted {
		if i > 0 {
			p := l.Accepted[i-1]
			if w.Generation < p.Generation {
				t.Errorf("write %d (%s n=%d gen %d) accepted after %s n=%d gen %d", i, w.Writer, w.N, w.Generation, p.Writer, p.N, p.Generation)
			}
			if w.Generation == p.Generation && w.N <= p.N {
				t.Errorf("write %d (%s n=%d) after n=%d in generation %d", i, w.Writer, w.N, p.N, w.Generation)
			}
		}
		if o, ok := owner[w.Generation]; ok && o != w.Writer {
			t.Errorf("generation %d written by %s and %s", w.Generation, o, w.Writer)
		}
		owner[w.Generation] = w.Writer
	}
}

func countBy(l storeLog, writer string, gen uint64) int {
	n := 0
	for _, w := range l.Accepted {
		if w.Writer == writer && w.Generation == gen {
			n++
		}
	}
	return n
}

// leading waits for p to lead (after line from) and returns its
// generation and the line's index.
func leading(t *testing.T, p *fixtures.LineProc, from int, timeout time.Duration) (uint64, int) {
	t.Helper()
	i, m := p.WaitLine(t, from, leadingRE, timeout)
	gen, _ := strconv.ParseUint(m[1], 10, 64)
	return gen, i
}

// whoLeads waits until one of the workers writes and returns it first.
func (r *rig) whoLeads(a, b *fixtures.LineProc) (leader, standby *fixtures.LineProc, gen uint64) {
	r.t.Helper()
	l := r.waitLog("a first write", 30*time.Second, func(l storeLog) bool { return len(l.Accepted) > 0 })
	leader, standby = a, b
	if l.Accepted[0].Writer == b.Name {
		leader, standby = b, a
	}
	return leader, standby, l.Accepted[0].Generation
}

func noLine(t *testing.T, p *fixtures.LineProc, re *regexp.Regexp, why string) {
	t.Helper()
	for _, l := range p.Lines() {
		if re.MatchString(l) {
			t.Errorf("%s printed %q: %s", p.Name, l, why)
		}
	}
}

// TestLeaderKill9 runs two workers and kills the leader with SIGKILL: the
// standby never writes while the leader lives, takes over once the dead
// leader's session has expired and the lock-delay passed (not before the
// lock-delay, not much after lease + lock-delay), and the store's
// accepted writes stay in generation order.
func TestLeaderKill9(t *testing.T) {
	r := newRig(t)
	a, b := r.start("a"), r.start("b")
	leader, standby, gen := r.whoLeads(a, b)
	r.waitLog("three writes of the leader", 10*time.Second, func(l storeLog) bool { return countBy(l, leader.Name, gen) >= 3 })
	noLine(t, standby, leadingRE, "the standby led while the leader lived")

	leader.Kill()
	killed := time.Now()
	newGen, _ := leading(t, standby, 0, lease+lockDelay+slack)
	took := time.Since(killed)
	if newGen <= gen {
		t.Errorf("new leader's generation %d, not above the old one's %d", newGen, gen)
	}
	if took < lockDelay {
		t.Errorf("the standby led %v after the kill, within the lock-delay %v", took, lockDelay)
	}
	l := r.waitLog("the new leader's writes", 10*time.Second, func(l storeLog) bool { return countBy(l, standby.Name, newGen) >= 3 })
	checkOrdered(t, l)
	t.Logf("took over %v after kill -9 (lease %v, lock-delay %v); %d writes accepted, %d refused",
		took.Round(time.Millisecond), lease, lockDelay, len(l.Accepted), len(l.Refused))
}

// TestLeaderPausedIsFenced freezes the leader (SIGSTOP) while it prepares
// a write, until its session has expired and the standby leads and
// writes; then lets it run again (SIGCONT). The write it had prepared
// goes out with its old sequencer and the store refuses it as stale; the
// old leader stops leading, writes nothing more, and, its session renewed
// (a new one: no lock carried over), is a candidate again that does not
// lead while the standby does. No write of its generation is accepted
// after the new leader's first.
func TestLeaderPausedIsFenced(t *testing.T) {
	r := newRig(t)
	args := []string{"-prepare", "400ms", "-every", "0s"}
	a, b := r.start("a", args...), r.start("b", args...)
	leader, standby, gen := r.whoLeads(a, b)
	r.waitLog("two writes of the leader", 10*time.Second, func(l storeLog) bool { return countBy(l, leader.Name, gen) >= 2 })
	// Freeze it inside a prepare: it has checked its lock context and is
	// about to write.
	at, m := leader.WaitLine(t, len(leader.Lines()), prepareRE, 5*time.Second)
	leader.Pause()
	paused := time.Now()
	n := m[1]
	newGen, _ := leading(t, standby, 0, lease+lockDelay+slack)
	took := time.Since(paused)
	r.waitLog("the new leader's first write", 10*time.Second, func(l storeLog) bool { return countBy(l, standby.Name, newGen) >= 1 })
	leader.Resume()

	// The prepared write is sent, and refused.
	refused := regexp.MustCompile(fmt.Sprintf(`^refused n=%s gen=%d: stale`, n, gen))
	ri, _ := leader.WaitLine(t, at, refused, 10*time.Second)
	leader.WaitLine(t, ri, regexp.MustCompile(fmt.Sprintf(`^stopped gen=%d: `, gen)), 5*time.Second)

	l := r.waitLog("the new leader's writes", 10*time.Second, func(l storeLog) bool { return countBy(l, standby.Name, newGen) >= 3 })
	for _, line := range leader.Lines()[at+1:] {
		if wroteRE.MatchString(line) {
			t.Errorf("the old leader wrote after the pause: %q", line)
		}
		if leadingRE.MatchString(line) {
			t.Errorf("the old leader led again beside the new one: %q", line)
		}
	}
	if leader.Exited() {
		t.Errorf("the old leader exited (%v); with a renewed session it should stay a candidate; stdout %q", leader.Err(), leader.Lines())
	}
	checkOrdered(t, l)
	found := false
	for _, w := range l.Refused {
		if w.Writer == leader.Name && strconv.Itoa(w.N) == n && w.Generation == gen && w.Reason == "stale" {
			found = true
		}
	}
	if !found {
		t.Errorf("the store did not record the old leader's write n=%s gen=%d as refused stale: %+v", n, gen, l.Refused)
	}
	t.Logf("the standby led %v after the pause; the woken leader's write n=%s was refused", took.Round(time.Millisecond), n)
}

// TestLeaderRestart kills the leader with SIGKILL and starts it again at
// once: the restarted worker resumes its session from the ticket it
// saved, so it leads again within the lock-delay (a new session would
// wait for the old one's lease and then the lock-delay), at a new
// generation (the resume fences the old process's sequencers); a
// candidate queued meanwhile never leads.
func TestLeaderRestart(t *testing.T) {
	for _, other := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "with another candidate"}[other], func(t *testing.T) {
			r := newRig(t)
			a := r.start("a")
			gen, _ := leading(t, a, 0, 30*time.Second)
			var b *fixtures.LineProc
			if other {
				b = r.start("b")
			}
			r.waitLog("three writes", 10*time.Second, func(l storeLog) bool { return countBy(l, "a", gen) >= 3 })
			a.Kill()
			restarted := time.Now()
			a = r.start("a")
			newGen, _ := leading(t, a, 0, lease+lockDelay+slack)
			took := time.Since(restarted)
			if newGen <= gen {
				t.Errorf("the restarted leader's generation %d, not above the old one's %d", newGen, gen)
			}
			if took >= lockDelay {
				t.Errorf("the restarted worker led %v after the restart; a resumed session leads within the lock-delay %v", took, lockDelay)
			}
			l := r.waitLog("the restarted worker's writes", 10*time.Second, func(l storeLog) bool { return countBy(l, "a", newGen) >= 3 })
			checkOrdered(t, l)
			if b != nil {
				noLine(t, b, leadingRE, "the queued candidate led though the restarted worker resumed the lock")
			}
			t.Logf("the restarted worker led again %v after the restart", took.Round(time.Millisecond))
		})
	}
}
