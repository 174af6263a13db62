package audit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultSegmentBytes = 16 << 20
	DefaultRetainBytes  = 256 << 20
	// flushAt is the buffered bytes past which Append writes at once,
	// without waiting for the entry's end.
	flushAt = 256 << 10
	// flushEvery bounds how long an appended record waits in memory
	// before it is written (readers of the trail and a snapshot write
	// at once), so that a tool tailing the files sees it soon, while
	// the apply path pays a write for many records, not one each.
	flushEvery = 100 * time.Millisecond
	// tailRead is how much of the newest segment Open reads to find the
	// last record: far more than the longest line (names are at most
	// 1 KiB, messages a few hundred bytes).
	tailRead = 1 << 20
)

// Options size the trail's files.
type Options struct {
	// SegmentBytes is the size past which a segment file is closed and
	// the next record starts a new one.
	SegmentBytes int64
	// RetainBytes bounds the trail on disk: past it the oldest segments
	// are deleted (the newest is always kept).
	RetainBytes int64
}

func (o Options) withDefaults() Options {
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.RetainBytes <= 0 {
		o.RetainBytes = DefaultRetainBytes
	}
	return o
}

// segment is one file of the trail, named by the index of its first
// record.
type segment struct {
	first uint64
	size  int64
}

func segmentName(first uint64) string { return fmt.Sprintf("audit-%020d.jsonl", first) }

// Trail is one replica's audit trail: segment files in a folder, the
// newest appended to. Append and Flush are called by the state machine's
// apply goroutine, in index order; Read and Wait by any goroutine.
type Trail struct {
	dir  string
	opts Options

	mu      sync.Mutex
	f       *os.File // the newest segment, opened for appending
	segs    []segment
	buf     []byte        // whole lines appended and not yet written
	last    uint64        // the highest index appended (written or buffered)
	written uint64        // the highest index written to the file
	changed chan struct{} // closed when a record is appended while waiting > 0
	waiting int
	timer   *time.Timer // the pending flush of buf, or nil
	closed  bool
	err     error // the first write error: the trail stops there and says so
}

// Open opens the trail in dir, creating it when missing. A line cut short
// at the end of the newest segment (a crash mid-write) is dropped: the
// state machine's replay after restart writes it again.
func Open(dir string, opts Options) (*Trail, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit trail: %w", err)
	}
	t := &Trail{dir: dir, opts: opts, changed: make(chan struct{})}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("audit trail: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, "audit-") || !strings.HasSuffix(name, ".jsonl") {
			continue
		}
		first, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "audit-"), ".jsonl"), 10, 64)
		if err != nil {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("audit trail: %w", err)
		}
		t.segs = append(t.segs, segment{first: first, size: info.Size()})
	}
	slices.SortFunc(t.segs, func(a, b segment) int { return cmpUint(a.first, b.first) })
	if len(t.segs) == 0 {
		t.segs = []segment{{first: 0}}
	}
	newest := &t.segs[len(t.segs)-1]
	path := filepath.Join(dir, segmentName(newest.first))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit trail: %w", err)
	}
	end, last, err := lastRecord(f, newest.size)
	if err == nil && end != newest.size {
		err = f.Truncate(end)
		newest.size = end
	}
	if err == nil {
		_, err = f.Seek(end, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit trail %s: %w", path, err)
	}
	if last == 0 && len(t.segs) > 1 {
		// The newest segment is empty: the one before it ends the trail.
		prev := t.segs[len(t.segs)-2]
		if pf, err := os.Open(filepath.Join(dir, segmentName(prev.first))); err == nil {
			_, last, _ = lastRecord(pf, prev.size)
			pf.Close()
		}
	}
	t.f, t.last, t.written = f, last, last
	return t, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// lastRecord finds, in the first size bytes of f, the end of the last
// complete line and that line's index (0 when there is none).
func lastRecord(f *os.File, size int64) (end int64, last uint64, err error) {
	from := max(size-tailRead, 0)
	b := make([]byte, size-from)
	if _, err := f.ReadAt(b, from); err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, err
	}
	cut := bytes.LastIndexByte(b, '\n')
	if cut < 0 {
		return from, 0, nil
	}
	end = from + int64(cut) + 1
	line := b[:cut]
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	idx, ok := indexOf(line)
	if !ok {
		return end, 0, fmt.Errorf("the last line is not a record: %.80q", line)
	}
	return end, idx, nil
}

// indexOf reads a stored line's index: the first field, as appendLine
// writes it.
func indexOf(line []byte) (uint64, bool) {
	const pre = `{"index":`
	if !bytes.HasPrefix(line, []byte(pre)) {
		return 0, false
	}
	rest := line[len(pre):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	v, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	return v, err == nil
}

// Stats describe the trail for operators.
type Stats struct {
	// Bytes on disk in all segments, and the segments' count.
	Bytes    int64
	Segments int
	// Last is the highest index held.
	Last uint64
	// Err is the write error that stopped the trail, or nil: records
	// applied after it are missing from this replica's trail.
	Err error
}

// Stats reports the trail's size and health.
func (t *Trail) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := Stats{Segments: len(t.segs), Last: t.last, Err: t.err}
	if t.closed {
		st.Err = nil // closed on purpose, not failed
	}
	for _, s := range t.segs {
		st.Bytes += s.size
	}
	return st
}

// Last is the highest index the trail holds (written or buffered).
func (t *Trail) Last() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// Append adds r to the trail, unless the trail already holds its index
// (a replay after restart): records are kept once, in index order. It
// encodes r before it returns (the caller may reuse it) and buffers;
// the trail writes within flushEvery, or at once past flushAt.
func (t *Trail) Append(r *Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.Index <= t.last || t.err != nil {
		return
	}
	if t.segs[len(t.segs)-1].size+int64(len(t.buf)) >= t.opts.SegmentBytes {
		t.rotateLocked(r.Index)
	}
	t.buf = appendLine(t.buf, r)
	t.last = r.Index
	switch {
	case len(t.buf) >= flushAt:
		t.flushLocked()
	case t.timer == nil && !t.closed:
		t.timer = time.AfterFunc(flushEvery, t.flushLater)
	}
	if t.waiting > 0 {
		close(t.changed)
		t.changed, t.waiting = make(chan struct{}), 0
	}
}

// flushLater is the timed flush Append schedules.
func (t *Trail) flushLater() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timer = nil
	t.flushLocked()
}

// Gap records that this replica never saw the records up to and
// including through (it installed a snapshot covering them), when the
// trail does not reach that far.
func (t *Trail) Gap(through uint64) {
	t.mu.Lock()
	after := t.last
	t.mu.Unlock()
	if through <= after {
		return
	}
	t.Append(&Record{Index: through, Time: TimeOf(time.Now().UnixNano()), Op: OpGap, Result: "ok",
		Detail: fmt.Sprintf("this replica installed a snapshot and holds no records from index %d to %d: ask another replica", after+1, through)})
}

// Flush writes the buffered records, so that readers see them.
func (t *Trail) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flushLocked()
}

// Sync writes the buffered records and makes the trail durable. The state
// machine calls it before a snapshot: the records of the entries a
// snapshot covers are never replayed, so they must be on disk first.
func (t *Trail) Sync() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.flushLocked(); err != nil {
		return err
	}
	if err := t.f.Sync(); err != nil {
		t.err = fmt.Errorf("audit trail: sync: %w", err)
	}
	return t.err
}

func (t *Trail) flushLocked() error {
	if t.err != nil || len(t.buf) == 0 {
		return t.err
	}
	n, err := t.f.Write(t.buf)
	t.segs[len(t.segs)-1].size += int64(n)
	if err != nil {
		t.err = fmt.Errorf("audit trail: write: %w", err)
		return t.err
	}
	t.buf = t.buf[:0]
	t.written = t.last
	return nil
}

// rotateLocked closes the newest segment and starts one whose first
// record is first, then drops the oldest segments past RetainBytes.
func (t *Trail) rotateLocked(first uint64) {
	if t.flushLocked() != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(t.dir, segmentName(first)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.err = fmt.Errorf("audit trail: new segment: %w", err)
		return
	}
	t.f.Sync()
	t.f.Close()
	t.f = f
	t.segs = append(t.segs, segment{first: first})
	var total int64
	for _, s := range t.segs {
		total += s.size
	}
	for len(t.segs) > 1 && total > t.opts.RetainBytes {
		total -= t.segs[0].size
		os.Remove(filepath.Join(t.dir, segmentName(t.segs[0].first)))
		t.segs = t.segs[1:]
	}
}

// Close writes what is buffered, syncs and closes the newest segment.
func (t *Trail) Close() error {
	err := t.Sync()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	if t.waiting > 0 {
		close(t.changed)
		t.changed, t.waiting = make(chan struct{}), 0
	}
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	t.err = errors.New("audit trail: closed")
	return err
}

// Query selects records to read.
type Query struct {
	// Since is the first index wanted (records from it on).
	Since uint64
	// SinceTime, when set, skips records whose time is before it.
	SinceTime time.Time
	// Prefix, when set, keeps the records about that name or a name
	// below it (gap records are always kept: they say what is missing).
	Prefix string
	// MaxRecords and MaxBytes bound the page.
	MaxRecords int
	MaxBytes   int
}

// Page is a run of records in index order.
type Page struct {
	// Lines are the records as stored, one JSON object each, without
	// the newline.
	Lines [][]byte
	// Next is the index to ask for next: past every record looked at,
	// kept or not.
	Next uint64
	// Oldest is the first index the trail still holds (older segments
	// were deleted past RetainBytes); Last the newest written.
	Oldest, Last uint64
}

// Read returns the written records that q selects, from q.Since on.
func (t *Trail) Read(q Query) (Page, error) {
	if q.MaxRecords <= 0 {
		q.MaxRecords = 1000
	}
	if q.MaxBytes <= 0 {
		q.MaxBytes = 1 << 20
	}
	t.mu.Lock()
	if err := t.flushLocked(); err != nil {
		t.mu.Unlock()
		return Page{}, err
	}
	segs := slices.Clone(t.segs)
	page := Page{Next: q.Since, Last: t.written}
	t.mu.Unlock()

	page.Oldest = segs[0].first
	start := 0
	for i, s := range segs {
		if s.first <= q.Since {
			start = i
		}
	}
	bytesOut := 0
	for _, s := range segs[start:] {
		f, err := os.Open(filepath.Join(t.dir, segmentName(s.first)))
		if errors.Is(err, os.ErrNotExist) {
			continue // dropped past RetainBytes while we read
		}
		if err != nil {
			return page, fmt.Errorf("audit trail: %w", err)
		}
		from := int64(0)
		if s.first <= q.Since {
			from = seekIndex(f, s.size, q.Since)
		}
		// Only what was written when we looked: a line being written
		// past s.size is not read half.
		rd := bufio.NewReaderSize(io.NewSectionReader(f, from, s.size-from), 64<<10)
		full, err := readLines(rd, q, &page, &bytesOut)
		f.Close()
		if err != nil {
			return page, fmt.Errorf("audit trail: %w", err)
		}
		if full {
			return page, nil
		}
	}
	return page, nil
}

// readLines adds the lines rd holds that q selects to page, until rd
// ends (full false) or the page is full (full true).
func readLines(rd *bufio.Reader, q Query, page *Page, bytesOut *int) (full bool, err error) {
	for {
		line, err := rd.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Longer than any record appendLine writes: not ours; skip it.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = rd.ReadSlice('\n')
			}
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return false, nil
			}
			return false, err
		}
		line = line[:len(line)-1]
		idx, ok := indexOf(line)
		if !ok || idx < q.Since {
			continue
		}
		if len(page.Lines) >= q.MaxRecords || *bytesOut+len(line) > q.MaxBytes && len(page.Lines) > 0 {
			return true, nil
		}
		page.Next = idx + 1
		if !q.keeps(line) {
			continue
		}
		page.Lines = append(page.Lines, bytes.Clone(line))
		*bytesOut += len(line)
	}
}

// seekIndex finds, by bisection over the first size bytes of f, the
// start of a line at or before the first record with index since or
// more, so that a reader following the trail's end reads a little of
// its newest segment, not all of it.
func seekIndex(f *os.File, size int64, since uint64) int64 {
	lo, hi := int64(0), size
	buf := make([]byte, 8<<10)
	for hi-lo > 64<<10 {
		mid := lo + (hi-lo)/2
		n, _ := f.ReadAt(buf, mid)
		nl := bytes.IndexByte(buf[:n], '\n')
		if nl < 0 {
			return lo
		}
		start := mid + int64(nl) + 1
		rest := buf[nl+1 : n]
		if end := bytes.IndexByte(rest, '\n'); end >= 0 {
			rest = rest[:end]
		}
		idx, ok := indexOf(rest)
		if !ok {
			return lo
		}
		if idx < since {
			lo = start
		} else {
			hi = mid
		}
	}
	return lo
}

// keeps says whether q selects the stored line.
func (q Query) keeps(line []byte) bool {
	if q.Prefix == "" && q.SinceTime.IsZero() {
		return true
	}
	var r struct {
		Op   string `json:"op"`
		Name string `json:"name"`
		Time string `json:"time"`
	}
	if err := jsonUnmarshal(line, &r); err != nil {
		return false
	}
	if r.Op == OpGap {
		return true
	}
	if !q.SinceTime.IsZero() {
		if at, err := time.Parse(time.RFC3339Nano, r.Time); err != nil || at.Before(q.SinceTime) {
			return false
		}
	}
	if q.Prefix != "" {
		p := strings.TrimSuffix(q.Prefix, "/")
		return r.Name == p || strings.HasPrefix(r.Name, p+"/")
	}
	return true
}

// Wait returns when the trail holds a record past after (Read then
// returns it), or when ctx ends (with its error).
func (t *Trail) Wait(ctx context.Context, after uint64) error {
	for {
		t.mu.Lock()
		if t.last > after || t.err != nil {
			err := t.err
			t.mu.Unlock()
			return err
		}
		t.waiting++
		ch := t.changed
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
