package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

const readers = 100

// TestConfigWatch runs configwatch with 100 readers, each with its own
// session, against a cell, and writes ten versions of the config. After
// each write has returned, every reader reads the new version at once
// (the cache never serves a copy older than a write that returned), each
// reader's events bring it every version in order (never one older than
// the last it saw), and all reach the final version.
func TestConfigWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the example binary against a cell; skipped with -short")
	}
	bin := fixtures.Binary{Pkg: "./examples/configwatch"}.Build(t)
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	writer := c.Client(t)
	const name = "configwatch-test/app.json"
	h, err := writer.Open(ctx, name, client.Read|client.Write|client.Create, client.WithParents(),
		client.WithContents([]byte(`{"version":0}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	env := []string{"LOCKCELL_CELL=" + c.Options().Cell, "LOCKCELL_REPLICAS=" + strings.Join(c.Addrs(), ",")}
	start := time.Now()
	p := fixtures.StartLineProc(t, "configwatch", bin, env, "-config", name, "-readers", strconv.Itoa(readers), "-listen", "127.0.0.1:0")
	_, m := p.WaitLine(t, 0, regexp.MustCompile(`^ready (\S+)$`), time.Minute)
	url := "http://" + m[1] + "/versions"
	t.Logf("%d readers ready %v after the start", readers, time.Since(start).Round(time.Millisecond))

	const last = 10
	var hits uint64
	var propagation time.Duration
	for v := 1; v <= last; v++ {
		if err := h.SetContents(ctx, fmt.Appendf(nil, `{"version":%d}`, v)); err != nil {
			t.Fatal(err)
		}
		wrote := time.Now()
		got := versions(t, url)
		for i, rv := range got.Versions {
			if rv != v {
				t.Errorf("reader %d read version %d after version %d was written", i, rv, v)
			}
		}
		if len(got.Versions) != readers {
			t.Fatalf("%d readers answered, want %d", len(got.Versions), readers)
		}
		hits = got.CacheHits
		// Every reader hears of it and reads it again.
		waitAll(t, p, v, 30*time.Second)
		propagation = max(propagation, time.Since(wrote))
	}

	// Each reader saw versions only go up, and ended on the last.
	seen := map[int]int{}
	re := regexp.MustCompile(`^reader (\d+) version (\d+)$`)
	for _, line := range p.Lines() {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r, _ := strconv.Atoi(m[1])
		v, _ := strconv.Atoi(m[2])
		if prev, ok := seen[r]; ok && v <= prev {
			t.Errorf("reader %d saw version %d after %d", r, v, prev)
		}
		seen[r] = v
	}
	for r := range readers {
		if seen[r] != last {
			t.Errorf("reader %d ended on version %d, want %d", r, seen[r], last)
		}
	}
	// SIGTERM closes the 100 sessions together and exits cleanly.
	p.Signal(syscall.SIGTERM)
	if !p.Wait(10 * time.Second) {
		t.Errorf("configwatch still runs 10s after SIGTERM")
	} else if code := p.ProcessState().ExitCode(); code != 0 {
		t.Errorf("configwatch exited %d on SIGTERM; stderr:\n%s", code, p.Stderr())
	}
	if hits == 0 {
		t.Errorf("no read came from the cache: the test would not test it")
	}
	t.Logf("%d readers, %d versions: slowest write-to-all-readers %v; %d cache hits",
		readers, last, propagation.Round(time.Millisecond), hits)
}

type answer struct {
	Versions  []int  `json:"versions"`
	CacheHits uint64 `json:"cacheHits"`
}

func versions(t *testing.T, url string) answer {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("%s: %s: %v", url, resp.Status, err)
	}
	return a
}

// waitAll waits until every reader has printed version v.
func waitAll(t *testing.T, p *fixtures.LineProc, v int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	re := regexp.MustCompile(fmt.Sprintf(`^reader (\d+) version %d$`, v))
	from := 0
	got := map[string]bool{}
	for len(got) < readers {
		i, m, ok := p.FindLine(from, re, time.Until(deadline))
		if !ok {
			t.Fatalf("%d of %d readers saw version %d within %v; stderr:\n%s", len(got), readers, v, timeout, p.Stderr())
		}
		got[m[1]] = true
		from = i + 1
	}
}
