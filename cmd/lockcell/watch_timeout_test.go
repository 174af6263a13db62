package main

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/fixtures"
)

// TestWatchTimeoutBoundsTheWholeWatch runs the real binary: a watch given
// --timeout ends that long after it started, with exit 75 and the events
// that arrived printed, for people and under --json (code "timeout"),
// instead of running on until Ctrl-C.
func TestWatchTimeoutBoundsTheWholeWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildCLI(t)
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.Client(t)
	h, err := cl.Open(ctx, c.Name("f"), client.Create|client.Write|client.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	for _, jsonOut := range []bool{false, true} {
		args := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "3s", "watch", "f"}
		if jsonOut {
			args = append([]string{"--json"}, args...)
		}
		// The test's own bound: a watch that ignores --timeout is killed
		// here and fails below.
		rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
		cmd := exec.CommandContext(rctx, bin, args...)
		var out, errb syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// One event while it watches: it must be printed before the end.
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(errb.String()+out.String(), "watching") {
			if time.Now().After(deadline) {
				t.Fatalf("watch never opened: %q %q", out.String(), errb.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := h.SetContents(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		took := time.Since(start)
		rcancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitTimeout {
			t.Fatalf("json=%v: watch --timeout 3s ended after %v with %v; want exit %d\nstdout %q\nstderr %q",
				jsonOut, took, err, exitTimeout, out.String(), errb.String())
		}
		if took < 3*time.Second {
			t.Fatalf("json=%v: watch --timeout 3s ended after only %v", jsonOut, took)
		}
		if !strings.Contains(out.String(), "contents-modified") {
			t.Fatalf("json=%v: the event before the timeout was not printed: %q", jsonOut, out.String())
		}
		if jsonOut {
			var e struct{ Error, Code string }
			if json.Unmarshal([]byte(errb.String()), &e) != nil || e.Code != "timeout" || !strings.Contains(e.Error, "after 1 event") {
				t.Fatalf("watch --json timeout error: %q", errb.String())
			}
		} else if !strings.Contains(errb.String(), "--timeout 3s ended the watch after 1 event") {
			t.Fatalf("watch timeout message: %q", errb.String())
		}
	}
}
