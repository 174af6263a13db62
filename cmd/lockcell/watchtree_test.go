package main

import (
	"encoding/json"
	"strings"
	"testing"

	"lockcell/fixtures"
)

// watch --recursive prints every change below a directory at any depth,
// one JSON object per line with its position; a second watch --from the
// position of the second change prints the third again, the same change
// at the same position (none missed, none repeated). A position ahead of
// the cell's log exits 65 with code history_compacted; a malformed one, or
// --from without --recursive, is a usage error; a file is not a directory.
func TestWatchRecursive(t *testing.T) {
	c := fixtures.NewCell(t, 3, fixtures.Options{})
	flags := []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "20s"}
	r := cliRunner{t, flags}
	r.ok("mkdir", "wt")
	watch := func(args ...string) (chan int, *syncBuffer, *syncBuffer) {
		out, errw := &syncBuffer{}, &syncBuffer{}
		done := make(chan int, 1)
		go func() {
			done <- run(append(append(append([]string{"lockcell"}, flags...), "--json", "watch", "-r"), args...),
				strings.NewReader(""), out, errw)
		}()
		waitOutput(t, out, `"watching"`, done)
		return done, out, errw
	}
	lines := func(out *syncBuffer) []treeEvent {
		t.Helper()
		var evs []treeEvent
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var ev treeEvent
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("watch -r --json line %q: %v", line, err)
			}
			if ev.Kind != "progress" {
				evs = append(evs, ev)
			}
		}
		return evs
	}

	done, out, errw := watch("--count", "3", "wt")
	r.ok("mkdir", "wt/a")
	r.ok("touch", "wt/a/f")
	r.ok("put", "wt/a/f", "x")
	if code := <-done; code != exitOK {
		t.Fatalf("watch -r: exit %d, stderr %q", code, errw.String())
	}
	evs := lines(out)
	if len(evs) != 4 || evs[0].Kind != "watching" ||
		evs[1].Kind != "created" || evs[1].Path != "/ls/t/wt/a" ||
		evs[2].Kind != "created" || evs[2].Path != "/ls/t/wt/a/f" ||
		evs[3].Kind != "contents" || evs[3].Path != "/ls/t/wt/a/f" || evs[3].Generation <= evs[2].Generation {
		t.Fatalf("watch -r events: %q", out.String())
	}

	done, out, errw = watch("--count", "1", "--from", evs[2].Position, "wt")
	if code := <-done; code != exitOK {
		t.Fatalf("watch -r --from: exit %d, stderr %q", code, errw.String())
	}
	again := lines(out)
	if len(again) != 2 || again[1] != (treeEvent{Time: again[1].Time, Kind: "contents", Path: "/ls/t/wt/a/f",
		Generation: evs[3].Generation, Position: evs[3].Position}) {
		t.Fatalf("watch -r --from %s: %q, want the change at %s", evs[2].Position, out.String(), evs[3].Position)
	}

	res := r.fails(exitHistoryCompacted, "history", "--json", "watch", "-r", "--from", "99999999999.0", "wt")
	var je struct{ Error, Code string }
	if err := json.Unmarshal([]byte(res.stderr), &je); err != nil || je.Code != "history_compacted" {
		t.Fatalf("compacted --json error %q: %+v %v", res.stderr, je, err)
	}
	// --timeout bounds the whole watch: exit 75 once it runs out.
	r2 := cliRunner{t, []string{"--cell", "t", "--replicas", strings.Join(c.Addrs(), ","), "--timeout", "1s"}}
	r2.fails(exitTimeout, "--timeout", "watch", "-r", "wt")
	r.fails(exitUsage, "--from", "watch", "-r", "--from", "x", "wt")
	r.fails(exitUsage, "--from needs --recursive", "watch", "--from", "5.0", "wt")
	r.fails(exitError, "watch /ls/t/wt/a/f", "watch", "-r", "wt/a/f")
}
