package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func rec(i uint64, name string) *Record {
	return &Record{Index: i, Time: TimeOf(int64(i) * int64(time.Second)), Op: "write", Principal: "alice",
		Session: 7, Name: name, Result: "ok"}
}

func indexes(t *testing.T, p Page) []uint64 {
	t.Helper()
	var out []uint64
	for _, l := range p.Lines {
		var r Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, r.Index)
	}
	return out
}

func openTrail(t *testing.T, dir string, o Options) *Trail {
	t.Helper()
	tr, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// Records are kept once, in index order, across a reopen: the replay of
// entries after the last snapshot re-appends indexes the trail holds,
// and those are skipped; a line cut short by a crash is dropped and
// written again by the replay.
func TestTrailKeepsEachIndexOnceAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	tr, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 5; i++ {
		tr.Append(rec(i, "/ls/c/a"))
	}
	tr.Append(rec(3, "/ls/c/again")) // a replayed index: skipped
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash in the middle of writing record 6.
	f, err := os.OpenFile(filepath.Join(dir, segmentName(0)), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `{"index":6,"time":"20`)
	f.Close()

	tr = openTrail(t, dir, Options{})
	if tr.Last() != 5 {
		t.Fatalf("reopened at %d, want 5", tr.Last())
	}
	for i := uint64(4); i <= 7; i++ { // the replay: 4 and 5 again, then 6 and 7
		tr.Append(rec(i, "/ls/c/a"))
	}
	p, err := tr.Read(Query{Since: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(indexes(t, p)); got != "[1 2 3 4 5 6 7]" {
		t.Fatalf("trail %s, want each of 1..7 once", got)
	}
	if p.Next != 8 || p.Last != 7 {
		t.Fatalf("page next %d last %d, want 8 and 7", p.Next, p.Last)
	}
}

// Read selects by index, time and name prefix (a prefix is a name or a
// folder, never a string prefix of a sibling), pages by count, and says
// where to go on; gap records are always shown.
func TestTrailReadSelects(t *testing.T) {
	tr := openTrail(t, t.TempDir(), Options{})
	names := []string{"/ls/c/app/x", "/ls/c/apple", "/ls/c/app", "/ls/c/other", "/ls/c/app/y/z"}
	for i, n := range names {
		tr.Append(rec(uint64(10+i), n))
	}
	tr.Gap(20)
	tr.Append(rec(21, "/ls/c/app/x"))

	p, _ := tr.Read(Query{Prefix: "/ls/c/app/"})
	if got := fmt.Sprint(indexes(t, p)); got != "[10 12 14 20 21]" {
		t.Fatalf("prefix /ls/c/app: %s", got)
	}
	p, _ = tr.Read(Query{Since: 12, MaxRecords: 2})
	if got := fmt.Sprint(indexes(t, p)); got != "[12 13]" || p.Next != 14 {
		t.Fatalf("since 12, two records: %s next %d", got, p.Next)
	}
	p, _ = tr.Read(Query{SinceTime: time.Unix(13, 0)})
	if got := fmt.Sprint(indexes(t, p)); got != "[13 14 20 21]" {
		t.Fatalf("since time 13 s: %s", got)
	}
	var gap Record
	json.Unmarshal(p.Lines[2], &gap)
	if gap.Op != OpGap || gap.Detail == "" {
		t.Fatalf("gap record %+v", gap)
	}
	tr.Gap(15) // a snapshot the trail already covers: nothing
	if tr.Last() != 21 {
		t.Fatalf("a covered gap moved the trail to %d", tr.Last())
	}
}

// Segments rotate at SegmentBytes and the oldest go past RetainBytes;
// a reader asking for a deleted index starts at the oldest kept, which
// Page says. A reader near the end of a large segment finds its place by
// bisection and reads every record from it on.
func TestTrailRotatesRetainsAndSeeks(t *testing.T) {
	dir := t.TempDir()
	tr := openTrail(t, dir, Options{SegmentBytes: 200 << 10, RetainBytes: 600 << 10})
	const n = 20000
	for i := uint64(1); i <= n; i++ {
		tr.Append(rec(i, "/ls/c/some/longer/name/for/the/record"))
	}
	tr.Flush()
	files, _ := filepath.Glob(filepath.Join(dir, "audit-*.jsonl"))
	var total int64
	for _, f := range files {
		st, _ := os.Stat(f)
		total += st.Size()
	}
	if len(files) < 3 || total > 600<<10+200<<10 {
		t.Fatalf("%d segments, %d bytes: want rotation and at most the retention plus one segment", len(files), total)
	}
	p, err := tr.Read(Query{Since: 1, MaxRecords: 3})
	if err != nil {
		t.Fatal(err)
	}
	got := indexes(t, p)
	if p.Oldest <= 1 || got[0] != p.Oldest || got[1] != p.Oldest+1 {
		t.Fatalf("from a deleted index: %v, oldest %d", got, p.Oldest)
	}
	for _, since := range []uint64{n - 1000, n - 1, n} {
		p, err = tr.Read(Query{Since: since, MaxRecords: 5000})
		if err != nil {
			t.Fatal(err)
		}
		got = indexes(t, p)
		if uint64(len(got)) != n-since+1 || got[0] != since || got[len(got)-1] != n {
			t.Fatalf("since %d: %d records from %v to %v", since, len(got), got[0], got[len(got)-1])
		}
	}
	// Reopened, the trail goes on in its newest segment.
	tr.Close()
	tr = openTrail(t, dir, Options{SegmentBytes: 200 << 10, RetainBytes: 600 << 10})
	if tr.Last() != n {
		t.Fatalf("reopened at %d, want %d", tr.Last(), n)
	}
}

// Wait returns once a record past the index is written, and with the
// context's error when none comes.
func TestTrailWait(t *testing.T) {
	tr := openTrail(t, t.TempDir(), Options{})
	tr.Append(rec(1, "/ls/c/a"))
	tr.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := tr.Wait(ctx, 1); err != context.DeadlineExceeded {
		t.Fatalf("wait with nothing new: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- tr.Wait(context.Background(), 1) }()
	tr.Append(rec(2, "/ls/c/a"))
	tr.Flush()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
