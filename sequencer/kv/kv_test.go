package kv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"lockcell/client"
	"lockcell/sequencer"
	"lockcell/sequencer/kv"
)

var cellKey = []byte("0123456789abcdef0123456789abcdef")

func seqOf(path string, gen uint64) []byte {
	return sequencer.Sign(cellKey, sequencer.Sequencer{Cell: "c", Path: path, Mode: sequencer.Exclusive, Generation: gen})
}

type answer struct {
	status int
	body   []byte
}

func (a answer) errBody(t *testing.T) kv.ErrorBody {
	t.Helper()
	var e kv.ErrorBody
	if err := json.Unmarshal(a.body, &e); err != nil || e.Error == "" || e.Reason == "" {
		t.Fatalf("error body %q: %v", a.body, err)
	}
	return e
}

func do(t *testing.T, srv http.Handler, method, path string, seq []byte, body string) answer {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if seq != nil {
		r.Header.Set(kv.HeaderSequencer, sequencer.EncodeText(seq))
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, r)
	return answer{w.Code, w.Body.Bytes()}
}

func newServer(t *testing.T, cfg kv.Config) *kv.Server {
	t.Helper()
	s, err := kv.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustValue(t *testing.T, srv http.Handler, key, want string) {
	t.Helper()
	a := do(t, srv, "GET", "/kv/"+key, nil, "")
	if a.status != 200 || string(a.body) != want {
		t.Fatalf("GET %s: %d %q, want %q", key, a.status, a.body, want)
	}
}

func TestKVPutGetIncrAndAcceptLog(t *testing.T) {
	srv := newServer(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{})})
	if a := do(t, srv, "GET", "/kv/x", nil, ""); a.status != 404 || a.errBody(t).Reason != kv.ReasonNotFound {
		t.Fatalf("absent key: %d %s", a.status, a.body)
	}
	a := do(t, srv, "PUT", "/kv/x", seqOf("/ls/c/l", 3), "hello")
	var res kv.WriteResult
	if err := json.Unmarshal(a.body, &res); a.status != 200 || err != nil || res.Generation != 3 || res.Lock != "/ls/c/l" || res.Index != 1 || res.Value != nil {
		t.Fatalf("put: %d %s %v", a.status, a.body, err)
	}
	mustValue(t, srv, "x", "hello")
	if a := do(t, srv, "POST", "/kv/x/incr", seqOf("/ls/c/l", 3), ""); a.status != 422 || a.errBody(t).Reason != kv.ReasonNotInteger {
		t.Fatalf("incr of a string: %d %s", a.status, a.body)
	}
	for i := int64(1); i <= 3; i++ {
		a := do(t, srv, "POST", "/kv/n/incr", seqOf("/ls/c/l", 4), "")
		var res kv.WriteResult
		if err := json.Unmarshal(a.body, &res); a.status != 200 || err != nil || res.Value == nil || *res.Value != i {
			t.Fatalf("incr %d: %d %s", i, a.status, a.body)
		}
	}
	mustValue(t, srv, "n", "3")
	if a := do(t, srv, "PUT", "/kv/big", seqOf("/ls/c/l", 4), strings.Repeat("x", kv.MaxValueSize+1)); a.status != 413 {
		t.Fatalf("over-size value: %d %s", a.status, a.body)
	}
	var log []kv.Accepted
	a = do(t, srv, "GET", "/accepted", nil, "")
	if err := json.Unmarshal(a.body, &log); err != nil || len(log) != 4 {
		t.Fatalf("accept log: %s %v", a.body, err)
	}
	for i, e := range log {
		wantOp, wantKey, wantGen := "incr", "n", uint64(4)
		if i == 0 {
			wantOp, wantKey, wantGen = "put", "x", 3
		}
		if e.Index != uint64(i+1) || e.Op != wantOp || e.Key != wantKey || e.Generation != wantGen || e.Cell != "c" {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	a = do(t, srv, "GET", "/accepted?key=x", nil, "")
	if err := json.Unmarshal(a.body, &log); err != nil || len(log) != 1 || log[0].Key != "x" {
		t.Fatalf("filtered accept log: %s %v", a.body, err)
	}
	if _, err := kv.NewServer(kv.Config{}); err == nil {
		t.Fatal("a server without a guard")
	}
}

// fakeChecker answers with a fixed verdict.
type fakeChecker struct {
	ok  bool
	err error
}

func (f fakeChecker) CheckSequencer(context.Context, []byte) (bool, error) { return f.ok, f.err }

func TestKVRejectsAndStoresNothing(t *testing.T) {
	local := newServer(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{Cell: "c"})})
	if a := do(t, local, "PUT", "/kv/k", seqOf("/ls/c/l", 5), "v5"); a.status != 200 {
		t.Fatalf("put: %d %s", a.status, a.body)
	}
	seq := seqOf("/ls/c/l", 5)
	other := sequencer.Sign(cellKey, sequencer.Sequencer{Cell: "other", Path: "/ls/other/l", Mode: sequencer.Exclusive, Generation: 9})
	type tc struct {
		name   string
		srv    http.Handler
		seq    []byte
		raw    string // header text instead of seq
		status int
		reason string
	}
	cases := []tc{
		{name: "missing", srv: local, status: 400, reason: kv.ReasonMissing},
		{name: "not base64", srv: local, raw: "!!!", status: 400, reason: kv.ReasonMalformed},
		{name: "truncated", srv: local, seq: seq[:len(seq)-3], status: 400, reason: kv.ReasonMalformed},
		{name: "stale", srv: local, seq: seqOf("/ls/c/l", 4), status: 409, reason: kv.ReasonStale},
		{name: "other cell", srv: local, seq: other, status: 409, reason: kv.ReasonStale},
		{name: "cell says forged", srv: newServer(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{
			Checker: fakeChecker{err: &client.OpError{Op: "check sequencer", Err: client.ErrBadSequencer}}})}),
			seq: seq, status: 409, reason: kv.ReasonForged},
		{name: "cell says not held", srv: newServer(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{
			Checker: fakeChecker{ok: false}})}), seq: seq, status: 409, reason: kv.ReasonStale},
		{name: "cell unreachable", srv: newServer(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{
			Checker: fakeChecker{err: client.ErrNoMaster}})}), seq: seq, status: 503, reason: kv.ReasonUnavailable},
	}
	for _, c := range cases {
		for _, m := range []struct{ method, path string }{{"PUT", "/kv/k"}, {"POST", "/kv/k/incr"}} {
			r := httptest.NewRequest(m.method, m.path, strings.NewReader("bad"))
			switch {
			case c.raw != "":
				r.Header.Set(kv.HeaderSequencer, c.raw)
			case c.seq != nil:
				r.Header.Set(kv.HeaderSequencer, sequencer.EncodeText(c.seq))
			}
			w := httptest.NewRecorder()
			c.srv.ServeHTTP(w, r)
			a := answer{w.Code, w.Body.Bytes()}
			if a.status != c.status || a.errBody(t).Reason != c.reason {
				t.Errorf("%s %s: %d %s, want %d %s", c.name, m.method, a.status, a.body, c.status, c.reason)
			}
			if c.name == "stale" && a.errBody(t).Highest != 5 {
				t.Errorf("stale: body %s does not name the highest generation 5", a.body)
			}
		}
		if len(c.srv.(*kv.Server).Accepted()) > 1 || c.srv != local && len(c.srv.(*kv.Server).Accepted()) != 0 {
			t.Errorf("%s: a rejected write was logged: %+v", c.name, c.srv.(*kv.Server).Accepted())
		}
	}
	mustValue(t, local, "k", "v5")
}

func TestKVStateSurvivesRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kv.json")
	s1 := newServer(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{}), StateFile: file})
	if a := do(t, s1, "PUT", "/kv/k", seqOf("/ls/c/l", 7), "v7"); a.status != 200 {
		t.Fatalf("put: %d %s", a.status, a.body)
	}
	if a := do(t, s1, "POST", "/kv/n/incr", seqOf("/ls/c/l", 7), ""); a.status != 200 {
		t.Fatalf("incr: %d %s", a.status, a.body)
	}
	// A restart with a fresh guard: the data and the fence come back.
	s2 := newServer(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{}), StateFile: file})
	mustValue(t, s2, "k", "v7")
	mustValue(t, s2, "n", "1")
	if a := do(t, s2, "PUT", "/kv/k", seqOf("/ls/c/l", 6), "v6"); a.status != 409 {
		t.Fatalf("stale write after a restart: %d %s", a.status, a.body)
	}
	if a := do(t, s2, "POST", "/kv/n/incr", seqOf("/ls/c/l", 8), ""); a.status != 200 {
		t.Fatalf("newer write after a restart: %d %s", a.status, a.body)
	}
	mustValue(t, s2, "k", "v7")
	mustValue(t, s2, "n", "2")
	ents, _ := os.ReadDir(filepath.Dir(file))
	if len(ents) != 1 {
		t.Fatalf("temporary files left behind: %v", ents)
	}
	// A corrupt state file refuses to start rather than forget the fence.
	os.WriteFile(file, []byte("{not json"), 0o644)
	if _, err := kv.NewServer(kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{}), StateFile: file}); err == nil {
		t.Fatal("started on a corrupt state file")
	}
}

// A state file that cannot be written refuses the write: nothing changes.
func TestKVUnwritableStateRefusesWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gone")
	os.Mkdir(dir, 0o755)
	file := filepath.Join(dir, "kv.json")
	s := newServer(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{}), StateFile: file})
	os.RemoveAll(dir)
	if a := do(t, s, "PUT", "/kv/k", seqOf("/ls/c/l", 1), "v"); a.status != 500 || a.errBody(t).Reason != kv.ReasonInternal {
		t.Fatalf("write with an unwritable state file: %d %s", a.status, a.body)
	}
	if _, ok := s.Get("k"); ok || len(s.Accepted()) != 0 {
		t.Fatal("a refused write is visible")
	}
}

// Concurrent writers of several locks: every increment lands once, and
// each lock's accepted generations never decrease.
func TestKVConcurrentIncrements(t *testing.T) {
	srv := httptest.NewServer(newServer(t, kv.Config{Guard: sequencer.NewGuard(sequencer.GuardConfig{}),
		StateFile: filepath.Join(t.TempDir(), "kv.json")}))
	defer srv.Close()
	const locks, writers, rounds = 3, 4, 15
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := map[string]int{}
	for l := range locks {
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("n%d", l)
				for r := range rounds {
					gen := uint64(r*writers + w + 1)
					req, _ := http.NewRequest("POST", srv.URL+"/kv/"+key+"/incr", nil)
					req.Header.Set(kv.HeaderSequencer, sequencer.EncodeText(seqOf(fmt.Sprintf("/ls/c/l%d", l), gen)))
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						mu.Lock()
						ok[key]++
						mu.Unlock()
					} else if resp.StatusCode != 409 {
						t.Errorf("incr: %d", resp.StatusCode)
					}
				}
			}()
		}
	}
	wg.Wait()
	resp, err := http.Get(srv.URL + "/accepted")
	if err != nil {
		t.Fatal(err)
	}
	var log []kv.Accepted
	json.NewDecoder(resp.Body).Decode(&log)
	resp.Body.Close()
	high := map[string]uint64{}
	for _, e := range log {
		if e.Generation < high[e.Lock] {
			t.Fatalf("accepted generation %d of %s after %d", e.Generation, e.Lock, high[e.Lock])
		}
		high[e.Lock] = e.Generation
	}
	for l := range locks {
		key := fmt.Sprintf("n%d", l)
		r, _ := http.Get(srv.URL + "/kv/" + key)
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if string(b) != fmt.Sprint(ok[key]) || ok[key] == 0 {
			t.Fatalf("%s = %q after %d accepted increments", key, b, ok[key])
		}
	}
}

// Unguarded (for demonstrations) accepts a stale write: the lost update
// fencing prevents.
func TestKVUnguardedAcceptsStale(t *testing.T) {
	srv := newServer(t, kv.Config{Unguarded: true})
	do(t, srv, "PUT", "/kv/k", seqOf("/ls/c/l", 5), "new")
	if a := do(t, srv, "PUT", "/kv/k", seqOf("/ls/c/l", 4), "old"); a.status != 200 {
		t.Fatalf("unguarded stale write: %d %s", a.status, a.body)
	}
	mustValue(t, srv, "k", "old")
	if a := do(t, srv, "PUT", "/kv/k", nil, "x"); a.status != 400 {
		t.Fatalf("unguarded write without a sequencer: %d", a.status)
	}
	if v, ok := srv.Get("k"); !ok || string(v) != "old" || len(srv.Accepted()) != 2 {
		t.Fatalf("Get: %q %v; log %+v", v, ok, srv.Accepted())
	}
}
