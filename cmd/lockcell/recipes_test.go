package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"lockcell/client/recipe"
	"lockcell/fixtures"
)

// jsonCode is the code of a --json error on stderr.
func jsonCode(t *testing.T, res result) string {
	t.Helper()
	var je struct{ Error, Code string }
	if err := json.Unmarshal([]byte(res.stderr), &je); err != nil {
		t.Fatalf("--json error %q: %v", res.stderr, err)
	}
	return je.Code
}

// lockcell counter add/get: adds print the new value; concurrent adds
// from separate runs lose none; get never creates a counter (not_found);
// a file that is not a counter is not_counter; a bad N is a usage error.
func TestCounterVerbs(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	r := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}}
	if code := jsonCode(t, r.fails(exitError, "", "--json", "counter", "get", "c/n")); code != "not_found" {
		t.Fatalf("get of a missing counter: code %q", code)
	}
	r.fails(exitError, "not found", "cat", "c/n") // get made nothing
	if got := r.ok("counter", "add", "c/n", "5").stdout; got != "5\n" {
		t.Fatalf("add 5 printed %q", got)
	}
	if got := r.ok("counter", "add", "c/n", "-2").stdout; got != "3\n" {
		t.Fatalf("add -2 printed %q", got)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res := r.run("", "counter", "add", "c/n", "1"); res.code != exitOK {
				t.Errorf("concurrent add: exit %d, %q", res.code, res.stderr)
			}
		}()
	}
	wg.Wait()
	var js counterJSON
	if err := json.Unmarshal([]byte(r.ok("counter", "get", "c/n", "--json").stdout), &js); err != nil || js != (counterJSON{"/ls/t/c/n", 11}) {
		t.Fatalf("get --json after 8 concurrent adds of 1 to 3: %+v (%v)", js, err)
	}
	r.ok("put", "c/bad", "twelve")
	if code := jsonCode(t, r.fails(exitError, "", "--json", "counter", "add", "c/bad", "1")); code != "not_counter" {
		t.Fatalf("add to a file that is no counter: code %q", code)
	}
	r.fails(exitUsage, "N must be a decimal integer", "counter", "add", "c/n", "ten")
	r.fails(exitUsage, "no counter command given", "counter")
}

// lockcell queue put/take: items come out in the order they went in, one
// take each; take waits for an item put after it started; with nothing to
// take, --timeout ends it with exit 75 (code timeout) having taken nothing.
func TestQueueVerbs(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	base := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ",")}
	r := cliRunner{t, append(base, "--timeout", "20s")}
	short := cliRunner{t, append(base, "--timeout", "500ms")}
	if code := jsonCode(t, short.fails(exitTimeout, "", "--json", "queue", "take", "jobs")); code != "timeout" {
		t.Fatalf("take from an empty queue: code %q", code)
	}
	first := strings.TrimSpace(r.ok("queue", "put", "jobs", "one").stdout)
	var put queueItemJSON
	if err := json.Unmarshal([]byte(r.ok("--json", "queue", "put", "jobs", "two").stdout), &put); err != nil ||
		!strings.HasPrefix(first, "/ls/t/jobs/item-") || put.Queue != "/ls/t/jobs" || put.Item <= first {
		t.Fatalf("put printed %q, then %+v (%v)", first, put, err)
	}
	if got := r.ok("queue", "take", "jobs").stdout; got != "one" {
		t.Fatalf("first take: %q", got)
	}
	var took queueItemJSON
	if err := json.Unmarshal([]byte(r.ok("queue", "take", "--json", "jobs").stdout), &took); err != nil ||
		took.Contents == nil || *took.Contents != "two" {
		t.Fatalf("second take --json: %+v (%v)", took, err)
	}
	// A take that waits: it can only end with the item put below (the
	// queue is empty, as the timed-out take shows).
	done := make(chan result, 1)
	go func() { done <- r.run("", "queue", "take", "jobs") }()
	r.ok("queue", "put", "jobs", "three")
	select {
	case res := <-done:
		if res.code != exitOK || res.stdout != "three" {
			t.Fatalf("waiting take: exit %d, %q, %q", res.code, res.stdout, res.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting take did not end within 20 s of the put")
	}
	short.fails(exitTimeout, "--timeout 500ms ended the wait", "queue", "take", "jobs")
}

// lockcell members lists a group's members with their data, and --watch
// (a real process) prints the group when it starts and again when a
// member joins and when one leaves.
func TestMembersVerb(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	r := cliRunner{t, flags}
	if got := r.ok("members", "svc/workers").stdout; got != "" {
		t.Fatalf("members of a missing group: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.Client(t)
	a, err := recipe.Join(ctx, cl, "svc/workers", "w1", []byte("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.ok("members", "svc/workers").stdout; got != "w1\thost-a\n" {
		t.Fatalf("members: %q", got)
	}
	var ms []memberJSON
	if err := json.Unmarshal([]byte(r.ok("members", "--json", "svc/workers").stdout), &ms); err != nil ||
		len(ms) != 1 || ms[0].Name != "w1" || ms[0].Contents == nil || *ms[0].Contents != "host-a" {
		t.Fatalf("members --json: %+v (%v)", ms, err)
	}
	r.fails(exitUsage, "--count goes with --watch", "members", "svc/workers", "--count", "1")

	w := fixtures.StartLineProc(t, "members --watch", buildCLI(t), nil,
		append(flags, "--json", "members", "svc/workers", "--watch", "--count", "3")...)
	set := func(from int, names string) int {
		t.Helper()
		re := regexp.MustCompile(fmt.Sprintf(`^\{"time":"[^"]+","members":\[%s\]\}$`, names))
		i, _ := w.WaitLine(t, from, re, 20*time.Second)
		return i + 1
	}
	next := set(0, `\{"name":"w1","contents":"host-a","contents_base64":"[^"]+"\}`)
	b, err := recipe.Join(ctx, cl, "svc/workers", "w2", nil)
	if err != nil {
		t.Fatal(err)
	}
	next = set(next, `\{"name":"w1".*\},\{"name":"w2","contents":"","contents_base64":""\}`)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	set(next, `\{"name":"w2","contents":"","contents_base64":""\}`)
	b.Close()
	deadline := time.Now().Add(20 * time.Second)
	for !w.Exited() {
		if time.Now().After(deadline) {
			t.Fatal("members --watch --count 3 did not exit after its third set")
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	if err := w.Err(); err != nil {
		t.Fatalf("members --watch: %v; stderr %q", err, w.Stderr())
	}
}

// lockcell barrier: wait passes an open barrier at once, times out on a
// set one (exit 75), and is let through by remove.
func TestBarrierVerbs(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	base := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ",")}
	r := cliRunner{t, append(base, "--timeout", "20s")}
	short := cliRunner{t, append(base, "--timeout", "500ms")}
	if got := short.ok("barrier", "wait", "deploy/hold").stdout; got != "/ls/t/deploy/hold open\n" {
		t.Fatalf("wait on an open barrier: %q", got)
	}
	r.ok("barrier", "set", "deploy/hold")
	if code := jsonCode(t, short.fails(exitTimeout, "", "--json", "barrier", "wait", "deploy/hold")); code != "timeout" {
		t.Fatalf("wait on a set barrier: code %q", code)
	}
	done := make(chan result, 1)
	go func() { done <- r.run("", "barrier", "wait", "deploy/hold") }()
	var rm struct{ Name, State string }
	if err := json.Unmarshal([]byte(r.ok("--json", "barrier", "remove", "deploy/hold").stdout), &rm); err != nil || rm.State != "open" {
		t.Fatalf("remove --json: %+v (%v)", rm, err)
	}
	select {
	case res := <-done:
		if res.code != exitOK || res.stdout != "/ls/t/deploy/hold open\n" {
			t.Fatalf("waiting wait: exit %d, %q, %q", res.code, res.stdout, res.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the wait did not end within 20 s of the remove")
	}
}
