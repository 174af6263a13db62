package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"lockcell/client"
)

// TestWatchPrintsOverflow: an overflow line names the kind of the first
// event lost ("unknown" when the master did not say) and tells the reader
// to re-read, for people and under --json. A real overflow needs a reader
// that stops reading, which watch never does; TestVerbs/Watch covers
// reannounce on a real fail-over.
func TestWatchPrintsOverflow(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		missed client.EventKind
		want   string
	}{{client.ContentsModified, "contents-modified"}, {0, "unknown"}} {
		ev := client.Event{Kind: client.Overflow, Missed: tc.missed, Path: "/ls/t/f", Epoch: 3, Time: at}
		var out bytes.Buffer
		if err := (&env{stdout: &out}).printEvent(ev); err != nil {
			t.Fatal(err)
		}
		line := out.String()
		if f := strings.Fields(line); len(f) < 5 || f[1] != "overflow" || f[2] != "/ls/t/f" ||
			f[3] != "missed="+tc.want || f[4] != "epoch=3" || !strings.Contains(line, "re-read /ls/t/f") {
			t.Fatalf("overflow line %q", line)
		}
		out.Reset()
		if err := (&env{stdout: &out, json: true}).printEvent(ev); err != nil {
			t.Fatal(err)
		}
		var w watchEvent
		if err := json.Unmarshal(out.Bytes(), &w); err != nil || w.Kind != "overflow" || w.Missed != tc.want || w.Epoch != 3 {
			t.Fatalf("overflow --json %q: %+v %v", out.String(), w, err)
		}
	}
}
