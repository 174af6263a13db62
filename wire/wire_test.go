package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/wire"
)

// ---------------------------------------------------------------------------
// Names.

func TestValidateName(t *testing.T) {
	const cell = "t"
	comp255 := strings.Repeat("c", 255)
	// A name of exactly n bytes under /ls/t/ built from valid components.
	nameOf := func(n int) string {
		s := "/ls/t"
		for len(s) < n {
			room := n - len(s) - 1 // the slash
			if room > 255 {
				room = 255
			}
			if room < 1 {
				// Not enough room for another component: grow the last one.
				s = s[:len(s)-1]
				continue
			}
			s += "/" + strings.Repeat("a", room)
		}
		return s
	}
	n1024, n1025 := nameOf(1024), nameOf(1025)
	if len(n1024) != 1024 || len(n1025) != 1025 {
		t.Fatalf("test names of %d and %d bytes", len(n1024), len(n1025))
	}
	valid := []string{
		"/ls/t",
		"/ls/t/a",
		"/ls/t/a/b/c",
		"/ls/t/Az09._-",
		"/ls/t/...",  // not "." or "..": allowed
		"/ls/t/.a",   // hidden-style names are fine
		"/ls/t/a..b", // dots inside are fine
		"/ls/t/" + comp255,
		"/ls/t/" + comp255 + "/" + comp255,
		n1024,
	}
	for _, name := range valid {
		if err := wire.ValidateName(cell, name); err != nil {
			t.Errorf("ValidateName(%.60q): %v", name, err)
		}
	}
	invalid := map[string]string{
		"empty":               "",
		"slash":               "/",
		"no cell":             "/ls",
		"ls slash":            "/ls/",
		"relative":            "ls/t/a",
		"other cell":          "/ls/u/a",
		"other cell, prefix":  "/ls/tt/a",
		"other cell root":     "/ls/tt",
		"upper-case ls":       "/LS/t/a",
		"no leading slash":    "t/a",
		"trailing slash":      "/ls/t/a/",
		"root trailing slash": "/ls/t/",
		"doubled slash":       "/ls/t//a",
		"dot":                 "/ls/t/.",
		"dot inside":          "/ls/t/a/./b",
		"dotdot":              "/ls/t/..",
		"dotdot inside":       "/ls/t/a/../b",
		"space":               "/ls/t/sp ace",
		"unicode":             "/ls/t/caf\u00e9",
		"NUL":                 "/ls/t/a\x00b",
		"control":             "/ls/t/a\x01",
		"tab":                 "/ls/t/a\tb",
		"DEL":                 "/ls/t/a\x7f",
		"invalid UTF-8":       "/ls/t/a\xff",
		"backslash":           "/ls/t/a\\b",
		"colon":               "/ls/t/a:b",
		"star":                "/ls/t/*",
		"component 256":       "/ls/t/" + strings.Repeat("c", 256),
		"component 256 deep":  "/ls/t/a/" + strings.Repeat("c", 256) + "/b",
		"total 1025":          n1025,
		"64 KiB":              "/ls/t/" + strings.Repeat("a/", 32*1024),
	}
	for what, name := range invalid {
		err := wire.ValidateName(cell, name)
		if err == nil {
			t.Errorf("%s: ValidateName(%.60q) accepted", what, name)
			continue
		}
		if !errors.Is(err, wire.ErrInvalidName) || wire.CodeOf(err) != wire.CodeInvalidName {
			t.Errorf("%s: error %v is not an invalid-name error", what, err)
		}
		var we *wire.Error
		if !errors.As(err, &we) || we.Msg == "" || len(we.Msg) > 4*wire.MaxNameLen+200 {
			t.Errorf("%s: detail %q", what, err)
		}
	}
	// The messages name the broken rule.
	for name, rule := range map[string]string{
		"/ls/u/a":                           "must start with /ls/t/",
		"/ls/t//a":                          "empty component",
		"/ls/t/..":                          "'.' or '..'",
		"/ls/t/a b":                         "found ' '",
		"/ls/t/a\x00":                       "byte 0x00",
		"/ls/t/" + strings.Repeat("c", 256): "longer than 255",
		n1025:                               "limit is 1024",
	} {
		if err := wire.ValidateName(cell, name); err == nil || !strings.Contains(err.Error(), rule) {
			t.Errorf("ValidateName(%.40q) = %v, want it to mention %q", name, err, rule)
		}
	}
}

func TestValidCellNameParentBase(t *testing.T) {
	for _, c := range []string{"t", "prod-1", "A.b_c"} {
		if err := wire.ValidCellName(c); err != nil {
			t.Errorf("ValidCellName(%q): %v", c, err)
		}
	}
	for _, c := range []string{"", ".", "..", "a/b", "a b", strings.Repeat("c", 256), "\u00e9"} {
		if err := wire.ValidCellName(c); !errors.Is(err, wire.ErrInvalidName) {
			t.Errorf("ValidCellName(%q): %v", c, err)
		}
	}
	for name, want := range map[string][2]string{
		"/ls/t/a/b": {"/ls/t/a", "b"},
		"/ls/t/a":   {"/ls/t", "a"},
		"/ls/t":     {"/ls", "t"},
	} {
		if p, b := wire.Parent(name), wire.Base(name); p != want[0] || b != want[1] {
			t.Errorf("Parent/Base(%s) = %q, %q", name, p, b)
		}
	}
	if p := wire.Parent("noslash"); p != "" {
		t.Errorf("Parent(noslash) = %q", p)
	}
}

// ---------------------------------------------------------------------------
// Codes, errors, methods, flags.

func TestErrorsAndCodes(t *testing.T) {
	err := wire.Errorf(wire.CodeNotFound, "x %d", 1)
	if !errors.Is(err, wire.ErrNotFound) || errors.Is(err, wire.ErrExists) {
		t.Fatalf("errors.Is: %v", err)
	}
	if err.Error() != "lockcell: not found: x 1" || wire.ErrNotFound.Error() != "lockcell: not found" {
		t.Fatalf("messages %q %q", err.Error(), wire.ErrNotFound.Error())
	}
	wrapped := fmt.Errorf("open /ls/t/a: %w", err)
	if !errors.Is(wrapped, wire.ErrNotFound) || wire.CodeOf(wrapped) != wire.CodeNotFound {
		t.Fatalf("wrapped: %v %v", errors.Is(wrapped, wire.ErrNotFound), wire.CodeOf(wrapped))
	}
	if wire.CodeOf(nil) != wire.CodeOK || wire.CodeOf(errors.New("plain")) != wire.CodeInternal || wire.CodeOf(io.EOF) != wire.CodeInternal {
		t.Fatal("CodeOf of nil / plain errors")
	}
	if errors.Is(errors.New("lockcell: not found"), wire.ErrNotFound) {
		t.Fatal("a plain error with the same text matched")
	}

	sentinels := map[wire.Code]error{
		wire.CodeNotMaster: wire.ErrNotMaster, wire.CodeBadEpoch: wire.ErrBadEpoch, wire.CodeSessionExpired: wire.ErrSessionExpired,
		wire.CodeNotFound: wire.ErrNotFound, wire.CodeExists: wire.ErrExists, wire.CodePermission: wire.ErrPermission,
		wire.CodeGenerationMismatch: wire.ErrGenerationMismatch, wire.CodeLockHeld: wire.ErrLockHeld, wire.CodeNotHeld: wire.ErrNotHeld,
		wire.CodeInvalidName: wire.ErrInvalidName, wire.CodeTooLarge: wire.ErrTooLarge, wire.CodeHandleInvalid: wire.ErrHandleInvalid,
		wire.CodeNotEmpty: wire.ErrNotEmpty, wire.CodeNotDir: wire.ErrNotDir, wire.CodeBadRequest: wire.ErrBadRequest,
		wire.CodeInternal: wire.ErrInternal, wire.CodeLockDelay: wire.ErrLockDelay, wire.CodeDuplicate: wire.ErrDuplicate,
		wire.CodeUnavailable: wire.ErrUnavailable, wire.CodeUnknownSession: wire.ErrUnknownSession, wire.CodeTooMany: wire.ErrTooMany,
		wire.CodeCanceled: wire.ErrCanceled, wire.CodeIsDir: wire.ErrIsDir,
	}
	names := map[string]wire.Code{}
	for c := wire.Code(0); c <= wire.CodeIsDir; c++ {
		s := c.String()
		if strings.HasPrefix(s, "code(") {
			t.Errorf("code %d has no name", c)
		}
		if o, dup := names[s]; dup {
			t.Errorf("codes %d and %d share the name %q", o, c, s)
		}
		names[s] = c
		if c == wire.CodeOK {
			continue
		}
		sent, ok := sentinels[c]
		if !ok {
			t.Errorf("code %d (%s) has no sentinel", c, s)
			continue
		}
		if wire.CodeOf(sent) != c || !errors.Is(wire.Errorf(c, "detail"), sent) {
			t.Errorf("sentinel of %s", s)
		}
		st := wire.Status{Code: c, Msg: "m"}
		if e := st.Err(); !errors.Is(e, sent) || wire.CodeOf(e) != c || !strings.Contains(e.Error(), "m") {
			t.Errorf("Status{%s}.Err() = %v", s, e)
		}
	}
	if s := wire.Code(200).String(); s != "code(200)" {
		t.Errorf("unknown code: %q", s)
	}
	if (&wire.Status{}).Err() != nil {
		t.Error("Status OK has an error")
	}
	if (&wire.Status{Code: 99}).Err() == nil || wire.CodeOf((&wire.Status{Code: 99}).Err()) != 99 {
		t.Error("Status with an unknown code")
	}
}

func TestMethodsAndFlags(t *testing.T) {
	mutating := map[wire.Method]bool{wire.MethodOpen: true, wire.MethodClose: true, wire.MethodSetContents: true,
		wire.MethodDelete: true, wire.MethodAcquire: true, wire.MethodRelease: true, wire.MethodCancelAcquire: true}
	for m := wire.MethodCreateSession; m <= wire.MethodCellStatus; m++ {
		if strings.HasPrefix(m.String(), "Method(") {
			t.Errorf("method %d has no name", m)
		}
		if m.Mutating() != mutating[m] {
			t.Errorf("%s.Mutating() = %v", m, m.Mutating())
		}
	}
	for _, m := range []wire.Method{wire.MethodAcquireMulti, wire.MethodReleaseMulti} {
		if strings.HasPrefix(m.String(), "Method(") || !m.Mutating() {
			t.Errorf("%s: a mutating method with a name", m)
		}
	}
	for _, c := range []struct {
		m    wire.Method
		want string
	}{{0, "Method(0)"}, {200, "Method(200)"}, {255, "Method(255)"}} {
		if got := c.m.String(); got != c.want || c.m.Mutating() {
			t.Errorf("Method %d: %q", c.m, got)
		}
	}
	all := wire.OpenRead | wire.OpenWrite | wire.OpenCreate | wire.OpenExcl | wire.OpenDirectory | wire.OpenEphemeral | wire.OpenSequential |
		wire.OpenContainer | wire.OpenTTL | wire.OpenSemaphore
	if !wire.ValidOpenFlags(0) || !wire.ValidOpenFlags(all) || wire.ValidOpenFlags(all+1) || wire.ValidOpenFlags(1<<31) {
		t.Error("ValidOpenFlags")
	}
}

// ---------------------------------------------------------------------------
// Framing and message round trips.

func sampleStat(i uint64) wire.Stat {
	return wire.Stat{Instance: i, ContentGen: i + 1, LockGen: i + 2, ACLGen: i + 3, Checksum: 1<<63 + i, Size: 5,
		CTime: -1, MTime: 1 << 62, Dir: true, Ephemeral: true, ReadACL: "r", WriteACL: "w", ChangeACL: "c",
		LockMode: wire.LockShared, LockHolders: 3, LockWaiters: 1 << 31}
}

// messages returns one populated value of every message type.
func messages() []any {
	return []any{
		&wire.Header{Method: wire.MethodAcquire, Session: 1 << 60, Epoch: 7, Seq: 99, Ack: 98},
		&wire.Status{Code: wire.CodeNotMaster, Msg: "not me", Leader: "127.0.0.1:7001", Epoch: 3},
		&wire.CreateSessionRequest{ClientName: "me"},
		&wire.CreateSessionResponse{Session: 12, Epoch: 3, LeaseMillis: 12000},
		&wire.KeepAliveRequest{AckEvent: 77},
		&wire.KeepAliveResponse{Epoch: 3, HeldMillis: 1, LeaseMillis: 2, Events: []wire.Event{
			{Seq: 1, Kind: wire.EventInvalidate, Path: "/ls/t/a", Gen: 5}, {Seq: 2, Kind: wire.EventLockAcquired, Handle: 9}}},
		&wire.CloseSessionRequest{},
		&wire.OpenRequest{Path: "/ls/t/a", Flags: wire.OpenRead | wire.OpenCreate, Contents: []byte{0, 1, 0xff}, LockDelayMillis: 5000, EventMask: 3},
		&wire.OpenResponse{Handle: 4, Created: true, Stat: sampleStat(4)},
		&wire.HandleRequest{Handle: 1<<64 - 1},
		&wire.Empty{},
		&wire.ContentsResponse{Contents: bytes.Repeat([]byte("x"), 70000), Stat: sampleStat(5)},
		&wire.StatResponse{Stat: sampleStat(6)},
		&wire.ReadDirResponse{Entries: []wire.DirEntry{{Name: "a", Dir: true}, {Name: "b"}}},
		&wire.SetContentsRequest{Handle: 5, Contents: []byte("new"), IfGeneration: 4, HasIfGeneration: true},
		&wire.AcquireRequest{Handle: 5, Mode: wire.LockExclusive, Wait: true},
		&wire.AcquireResponse{LockGen: 8},
		&wire.CancelAcquireRequest{Handle: 5, WaitSeq: 44},
		&wire.CellStatusRequest{},
		&wire.CellStatusResponse{Cell: "t", Self: "1", State: "Leader", Master: "127.0.0.1:7001", Epoch: 2, Term: 3,
			CommitIndex: 4, AppliedIndex: 4, Sessions: 5, Nodes: 6,
			Replicas: []wire.ReplicaStatus{{ID: "1", ClientAddr: "a", RaftAddr: "b", Master: true}, {ID: "2"}}},
	}
}

func newOf(v any) any { return reflect.New(reflect.TypeOf(v).Elem()).Interface() }

type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

func TestMessageRoundTrips(t *testing.T) {
	for _, v := range messages() {
		for _, val := range []any{v, newOf(v)} { // populated and zero
			name := fmt.Sprintf("%T", val)
			var w countingWriter
			hdr := &wire.Header{Method: wire.MethodOpen, Session: 3, Epoch: 4, Seq: 5}
			if err := wire.WriteMessage(&w, hdr, val); err != nil {
				t.Fatalf("%s: write: %v", name, err)
			}
			if w.writes != 1 {
				t.Fatalf("%s: %d writes for one message", name, w.writes)
			}
			var h2 wire.Header
			if err := wire.ReadMessage(&w, &h2); err != nil || h2 != *hdr {
				t.Fatalf("%s: header %+v %v", name, h2, err)
			}
			got := newOf(val)
			if err := wire.ReadMessage(&w, got); err != nil {
				t.Fatalf("%s: read: %v", name, err)
			}
			if !reflect.DeepEqual(got, val) {
				t.Fatalf("%s: round trip\n got %+v\nwant %+v", name, got, val)
			}
			if w.Len() != 0 {
				t.Fatalf("%s: %d bytes left over", name, w.Len())
			}
			if _, err := wire.ReadFrame(&w); err != io.EOF {
				t.Fatalf("%s: read past the end: %v", name, err)
			}
		}
	}
	// Many values in one message, each its own frame.
	var buf bytes.Buffer
	if err := wire.WriteMessage(&buf, messages()...); err != nil {
		t.Fatal(err)
	}
	for _, v := range messages() {
		got := newOf(v)
		if err := wire.ReadMessage(&buf, got); err != nil || !reflect.DeepEqual(got, v) {
			t.Fatalf("%T in a batch: %+v %v", v, got, err)
		}
	}
	// No values, no bytes.
	var w countingWriter
	if err := wire.WriteMessage(&w); err != nil || w.Len() != 0 {
		t.Fatalf("empty message: %d bytes %v", w.Len(), err)
	}
}

func TestFrameSizeLimits(t *testing.T) {
	// Find the frame overhead of a SetContentsRequest with large contents,
	// then build one exactly at the limit and one a byte over.
	frameLen := func(n int) int {
		var buf bytes.Buffer
		if err := wire.WriteMessage(&buf, &wire.SetContentsRequest{Handle: 1, Contents: make([]byte, n)}); err != nil {
			t.Fatal(err)
		}
		return int(binary.BigEndian.Uint32(buf.Bytes()))
	}
	overhead := frameLen(100000) - 100000
	atLimit := wire.MaxFrameSize - overhead
	if frameLen(atLimit) != wire.MaxFrameSize {
		t.Fatalf("overhead %d is not constant", overhead)
	}
	var buf bytes.Buffer
	if err := wire.WriteMessage(&buf, &wire.SetContentsRequest{Handle: 1, Contents: make([]byte, atLimit)}); err != nil {
		t.Fatalf("frame of exactly MaxFrameSize: %v", err)
	}
	var req wire.SetContentsRequest
	if err := wire.ReadMessage(&buf, &req); err != nil || len(req.Contents) != atLimit {
		t.Fatalf("read of a max frame: %d %v", len(req.Contents), err)
	}
	var w countingWriter
	err := wire.WriteMessage(&w, &wire.Header{}, &wire.SetContentsRequest{Handle: 1, Contents: make([]byte, atLimit+1)})
	if !errors.Is(err, wire.ErrTooLarge) || w.writes != 0 {
		t.Fatalf("frame a byte over: %v, %d writes", err, w.writes)
	}
	// The encoder pool still works after an oversize message.
	if err := wire.WriteMessage(&w, &wire.Empty{}); err != nil || w.Len() != 5 {
		t.Fatalf("after oversize: %d bytes %v", w.Len(), err)
	}
	// An unencodable value is an error, not a panic.
	if err := wire.WriteMessage(&w, make(chan int)); err == nil {
		t.Fatal("encoded a channel")
	}
}

// endReader fails the test if anything reads past the frame header.
type endReader struct{ t *testing.T }

func (r endReader) Read([]byte) (int, error) {
	r.t.Error("ReadFrame read past an oversize length")
	return 0, io.EOF
}

func TestReadFrameRejectsOversizeBeforeAllocating(t *testing.T) {
	for _, n := range []uint32{wire.MaxFrameSize + 1, 16 << 20, 1<<31 - 1, 1 << 31, 1<<32 - 1} {
		hdr := binary.BigEndian.AppendUint32(nil, n)
		var b []byte
		var err error
		alloc := allocDuring(func() {
			for range 10 {
				b, err = wire.ReadFrame(io.MultiReader(bytes.NewReader(hdr), endReader{t}))
			}
		})
		if b != nil || !errors.Is(err, wire.ErrTooLarge) || wire.CodeOf(err) != wire.CodeTooLarge {
			t.Fatalf("length %d: %d bytes, %v", n, len(b), err)
		}
		if alloc > 10*4096 {
			t.Fatalf("length %d: %d bytes allocated over 10 reads", n, alloc)
		}
		var h wire.Header
		if err := wire.ReadMessage(io.MultiReader(bytes.NewReader(hdr), endReader{t}), &h); wire.CodeOf(err) != wire.CodeTooLarge {
			t.Fatalf("ReadMessage with length %d: %v", n, err)
		}
	}
	// Exactly the limit is accepted (and read).
	hdr := binary.BigEndian.AppendUint32(nil, wire.MaxFrameSize)
	b, err := wire.ReadFrame(io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(make([]byte, wire.MaxFrameSize))))
	if err != nil || len(b) != wire.MaxFrameSize {
		t.Fatalf("frame at the limit: %d %v", len(b), err)
	}
}

func TestReadFrameTruncated(t *testing.T) {
	var full bytes.Buffer
	if err := wire.WriteMessage(&full, &wire.OpenRequest{Path: "/ls/t/a", Flags: 7, Contents: []byte("abc")}); err != nil {
		t.Fatal(err)
	}
	all := full.Bytes()
	if _, err := wire.ReadFrame(bytes.NewReader(nil)); err != io.EOF {
		t.Fatalf("empty stream: %v", err)
	}
	for i := 1; i < len(all); i++ {
		_, err := wire.ReadFrame(bytes.NewReader(all[:i]))
		if err != io.ErrUnexpectedEOF {
			t.Fatalf("truncated to %d of %d: %v", i, len(all), err)
		}
		var req wire.OpenRequest
		if err := wire.ReadMessage(bytes.NewReader(all[:i]), &req); err != io.ErrUnexpectedEOF {
			t.Fatalf("ReadMessage truncated to %d: %v", i, err)
		}
	}
	// A zero-length frame reads as empty and decodes as a typed error.
	b, err := wire.ReadFrame(bytes.NewReader([]byte{0, 0, 0, 0}))
	if err != nil || len(b) != 0 {
		t.Fatalf("zero-length frame: %v %v", b, err)
	}
	var h wire.Header
	if err := wire.Decode(b, &h); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("decode of nothing: %v", err)
	}
	// A frame must hold exactly one value: a valid message followed by junk
	// is malformed, so nothing a peer smuggles after it goes unnoticed.
	var one bytes.Buffer
	wire.WriteMessage(&one, &wire.HandleRequest{Handle: 5})
	body := append(one.Bytes()[4:], 0xc1, 0xc1)
	var hr wire.HandleRequest
	if err := wire.Decode(body, &hr); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("trailing junk: %+v %v", hr, err)
	}
}

func TestDecodeTypedErrors(t *testing.T) {
	for _, b := range [][]byte{{0xc1}, {0xa3, 'a', 'b', 'c'}, {0x81, 0xa1, 'm', 0xa1, 'x'}} {
		var h wire.Header
		err := wire.Decode(b, &h)
		if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "Header") {
			t.Errorf("% x: %v", b, err)
		}
	}
	// Unknown fields are skipped: a newer peer's message still decodes.
	b, _ := msgpack.Marshal(map[string]any{"m": 4, "s": 9, "zz": []any{1, "x", map[string]any{"k": nil}}})
	var h wire.Header
	if err := wire.Decode(b, &h); err != nil || h.Method != 4 || h.Session != 9 {
		t.Fatalf("unknown fields: %+v %v", h, err)
	}
}

// ---------------------------------------------------------------------------
// Hostile input: msgpack bombs.

func allocDuring(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// bombs are msgpack headers that claim far more than they hold.
func bombs() [][]byte {
	chain := func(hdr []byte, n int) []byte { return bytes.Repeat(hdr, n) }
	out := [][]byte{
		{0xdd, 0xff, 0xff, 0xff, 0xff},       // array32 of 4G
		{0xdb, 0xff, 0xff, 0xff, 0xff},       // str32 of 4 GiB
		{0xdf, 0xff, 0xff, 0xff, 0xff},       // map32 of 4G
		{0xc6, 0xff, 0xff, 0xff, 0xff},       // bin32 of 4 GiB
		{0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}, // ext32 of 4 GiB
		{0xdc, 0xff, 0xff},
		{0xde, 0xff, 0xff},
		chain([]byte{0xdc, 0xff, 0xff}, 64),
		chain([]byte{0xdc, 0xff, 0xff}, 5000),
		chain([]byte{0xde, 0xff, 0xff}, 64),
		chain([]byte{0x91}, 10000),
		chain([]byte{0x81, 0xa1, 'x'}, 3000),
	}
	// The same headers as the value of every field name in use, and of an
	// unknown field.
	for _, key := range []string{"m", "s", "e", "q", "a", "p", "f", "c", "h", "g", "i", "w", "n", "v", "r", "l", "ld", "em", "zz"} {
		for _, hdr := range [][]byte{
			{0xdd, 0xff, 0xff, 0xff, 0xff},
			{0xdb, 0xff, 0xff, 0xff, 0xff},
			{0xdf, 0xff, 0xff, 0xff, 0xff},
			{0xc6, 0xff, 0xff, 0xff, 0xff},
			{0xc9, 0xff, 0xff, 0xff, 0xff, 0x01},
			chain([]byte{0xdc, 0xff, 0xff}, 50),
		} {
			b := append([]byte{0x81, 0xa0 | byte(len(key))}, key...)
			out = append(out, append(b, hdr...))
		}
	}
	// A map32 claiming 4G fields whose first value is an array32 bomb.
	out = append(out, []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'e', 0xdd, 0xff, 0xff, 0xff, 0xff})
	return out
}

// decodeTarget is one type the fuzz target decodes into.
type decodeTarget struct {
	new func() any
}

func targets() []decodeTarget {
	return []decodeTarget{
		{new: func() any { return new(wire.Header) }},
		{new: func() any { return new(wire.Status) }},
		{new: func() any { return new(wire.CreateSessionRequest) }},
		{new: func() any { return new(wire.CreateSessionResponse) }},
		{new: func() any { return new(wire.KeepAliveRequest) }},
		{new: func() any { return new(wire.KeepAliveResponse) }},
		{new: func() any { return new(wire.CloseSessionRequest) }},
		{new: func() any { return new(wire.OpenRequest) }},
		{new: func() any { return new(wire.OpenResponse) }},
		{new: func() any { return new(wire.HandleRequest) }},
		{new: func() any { return new(wire.Empty) }},
		{new: func() any { return new(wire.ContentsResponse) }},
		{new: func() any { return new(wire.StatResponse) }},
		{new: func() any { return new(wire.ReadDirResponse) }},
		{new: func() any { return new(wire.SetContentsRequest) }},
		{new: func() any { return new(wire.AcquireRequest) }},
		{new: func() any { return new(wire.AcquireResponse) }},
		{new: func() any { return new(wire.CancelAcquireRequest) }},
		{new: func() any { return new(wire.CellStatusRequest) }},
		{new: func() any { return new(wire.CellStatusResponse) }},
	}
}

// Every bomb into every type: a typed error, and an allocation bounded by
// the input (docs/testplan.md#allocation-bound: 64 x input + 1 MiB).
func TestDecodeBombsAreTypedAndCheap(t *testing.T) {
	for i, b := range bombs() {
		for _, tg := range targets() {
			v := tg.new()
			var err error
			alloc := allocDuring(func() { err = wire.Decode(b, v) })
			if !errors.Is(err, wire.ErrBadRequest) {
				t.Errorf("bomb %d (% x...) into %T: %v, want a bad-request error", i, b[:min(8, len(b))], v, err)
			}
			if limit := uint64(64*len(b) + 1<<20); alloc > limit {
				t.Errorf("bomb %d (% x...) into %T: %d bytes allocated, limit %d", i, b[:min(8, len(b))], v, alloc, limit)
			}
		}
	}
}

// denseSlices decodes a full frame of the smallest possible elements of
// each slice of structs (an empty map each) and checks the allocation
// against factor x frame + 1 MiB.
func denseSlices(t *testing.T, factor int) {
	const n = 1 << 20
	for _, c := range []struct {
		key string
		v   func() any
		len func(any) int
	}{
		{"e", func() any { return new(wire.ReadDirResponse) }, func(v any) int { return len(v.(*wire.ReadDirResponse).Entries) }},
		{"v", func() any { return new(wire.KeepAliveResponse) }, func(v any) int { return len(v.(*wire.KeepAliveResponse).Events) }},
		{"r", func() any { return new(wire.CellStatusResponse) }, func(v any) int { return len(v.(*wire.CellStatusResponse).Replicas) }},
	} {
		// The densest element the codec accepts: a one-field map (an
		// empty map, one byte, is under codec.MinArrayElem and rejected).
		b := append([]byte{0x81, 0xa1, c.key[0], 0xdd}, binary.BigEndian.AppendUint32(nil, n)...)
		elem := map[string][]byte{"e": {0x81, 0xa1, 'n', 0xa0}, "v": {0x81, 0xa1, 'q', 0x00}, "r": {0x81, 0xa1, 'i', 0xa0}}[c.key]
		b = append(b, bytes.Repeat(elem, n)...)
		v := c.v()
		var err error
		alloc := allocDuring(func() { err = wire.Decode(b, v) })
		if err != nil || c.len(v) != n {
			t.Fatalf("%T: %d elements, %v", v, c.len(v), err)
		}
		if limit := uint64(factor*len(b) + 1<<20); alloc > limit {
			t.Errorf("%T: %d bytes allocated for a %d-byte frame, limit %d", v, alloc, len(b), limit)
		}
		// Empty-map elements: rejected before decoding.
		empty := append(append([]byte{0x81, 0xa1, c.key[0], 0xdd}, binary.BigEndian.AppendUint32(nil, n)...), bytes.Repeat([]byte{0x80}, n)...)
		v = c.v()
		alloc = allocDuring(func() { err = wire.Decode(empty, v) })
		if !errors.Is(err, wire.ErrBadRequest) || alloc > 1<<20 {
			t.Errorf("%T of empty maps: %v, %d bytes allocated", v, err, alloc)
		}
		// One element fewer than claimed: rejected before decoding.
		v = c.v()
		alloc = allocDuring(func() { err = wire.Decode(b[:len(b)-len(elem)], v) })
		if !errors.Is(err, wire.ErrBadRequest) || alloc > 1<<20 {
			t.Errorf("%T short by one: %v, %d bytes allocated", v, err, alloc)
		}
	}
}

// The worst honest case stays within a constant factor of the frame.
func TestDecodeDenseSlicesAreBounded(t *testing.T) { denseSlices(t, 128) }

// ... and within 64 x input + 1 MiB (docs/testplan.md#allocation-bound).
func TestDecodeDenseSlicesWithinPlanBound(t *testing.T) {
	denseSlices(t, 64)
}

// Nesting: what a newer peer might send in an unknown field is skipped;
// deep nesting is refused.
func TestDecodeNesting(t *testing.T) {
	nested := func(depth int) []byte {
		b := []byte{0x82, 0xa1, 'm', 0x04, 0xa2, 'z', 'z'}
		b = append(b, bytes.Repeat([]byte{0x91}, depth)...)
		return append(b, 0x01)
	}
	var h wire.Header
	if err := wire.Decode(nested(10), &h); err != nil || h.Method != 4 {
		t.Fatalf("10 levels in an unknown field: %+v %v", h, err)
	}
	if err := wire.Decode(nested(1000), &h); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("1000 levels: %v", err)
	}
}

// TestDecodeBombsAllocation: msgpack v5.4.1 allocates claimed str/bin/array
// lengths before noticing a short input; wire.Decode must bound them first.
func TestDecodeBombsAllocation(t *testing.T) {
	cases := []struct {
		v any
		b []byte
	}{
		{new(wire.OpenRequest), []byte{0x81, 0xa1, 'c', 0xc6, 0xff, 0xff, 0xff, 0xff}},
		{new(wire.SetContentsRequest), []byte{0x81, 0xa1, 'c', 0xc6, 0xff, 0xff, 0xff, 0xff}},
		{new(wire.SetContentsRequest), []byte{0x81, 0xa1, 'c', 0xdb, 0xff, 0xff, 0xff, 0xff}},
		{new(wire.ContentsResponse), []byte{0x81, 0xa1, 'c', 0xc6, 0xff, 0xff, 0xff, 0xff}},
		// Counts of 1M elements (not 4G, which kills the process): tens of MB each.
		{new(wire.KeepAliveResponse), []byte{0x81, 0xa1, 'v', 0xdd, 0x00, 0x10, 0x00, 0x00}},
		{new(wire.ReadDirResponse), []byte{0x81, 0xa1, 'e', 0xdd, 0x00, 0x10, 0x00, 0x00}},
		{new(wire.CellStatusResponse), []byte{0x81, 0xa1, 'r', 0xdd, 0x00, 0x10, 0x00, 0x00}},
		{new(wire.CellStatusResponse), []byte{0x81, 0xa1, 'r', 0xdc, 0xff, 0xff}},
	}
	for _, c := range cases {
		var err error
		alloc := allocDuring(func() { err = wire.Decode(c.b, c.v) })
		if err == nil {
			t.Errorf("% x into %T decoded", c.b, c.v)
		}
		if limit := uint64(64*len(c.b) + 1<<20); alloc > limit {
			t.Errorf("% x into %T: %d bytes allocated, limit %d", c.b, c.v, alloc, limit)
		}
	}
	// The ratchet: the same 8-byte Header, decoded again and again.
	b := []byte{0x81, 0xa1, 'z', 0xdb, 0xff, 0xff, 0xff, 0xff}
	const n = 40
	alloc := allocDuring(func() {
		for range n {
			var h wire.Header
			if err := wire.Decode(b, &h); err == nil {
				t.Error("decoded")
			}
		}
	})
	if limit := uint64(n * (64*len(b) + 1<<20)); alloc > limit {
		t.Errorf("%d decodes of % x into a Header: %d bytes allocated, limit %d", n, b, alloc, limit)
	}
}

// FuzzDecode decodes arbitrary frame bodies into every message type: no
// panic, every failure a typed CodeBadRequest error, and whatever decodes
// re-encodes to a value that decodes the same.
func FuzzDecode(f *testing.F) {
	for _, b := range bombs() {
		f.Add(b)
	}
	for _, v := range messages() {
		b, err := msgpack.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xc0})
	f.Add([]byte{0x80})
	f.Add([]byte{0x90})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, tg := range targets() {
			v := tg.new()
			if err := wire.Decode(b, v); err != nil {
				var we *wire.Error
				if !errors.As(err, &we) || we.Code != wire.CodeBadRequest {
					t.Fatalf("%T: untyped error %v", v, err)
				}
				continue
			}
			var buf bytes.Buffer
			if err := wire.WriteMessage(&buf, v); err != nil {
				if errors.Is(err, wire.ErrTooLarge) {
					continue
				}
				t.Fatalf("%T: re-encode %+v: %v", v, v, err)
			}
			v2 := tg.new()
			if err := wire.ReadMessage(bytes.NewReader(buf.Bytes()), v2); err != nil {
				t.Fatalf("%T: decode of re-encoded %+v: %v", v, v, err)
			}
			var buf2 bytes.Buffer
			if err := wire.WriteMessage(&buf2, v2); err != nil || !bytes.Equal(buf.Bytes(), buf2.Bytes()) {
				t.Fatalf("%T: re-encoding is not stable: %+v vs %+v (%v)", v, v, v2, err)
			}
		}
	})
}

// Every code has a stable machine name of its own, so scripts and alert
// rules can match it (a new code without one would print "code_N").
func TestEveryCodeHasAMachineName(t *testing.T) {
	seen := map[string]wire.Code{}
	for c := wire.Code(0); c < 255; c++ {
		if c.String() == fmt.Sprintf("code(%d)", c) {
			continue
		}
		name := c.Name()
		if name == fmt.Sprintf("code_%d", c) {
			t.Errorf("code %d (%s) has no machine name", c, c)
		}
		if prev, dup := seen[name]; dup {
			t.Errorf("codes %d and %d share the name %q", prev, c, name)
		}
		seen[name] = c
	}
	if got := wire.CodeQuotaExceeded.Name(); got != "quota_exceeded" {
		t.Errorf("quota name %q", got)
	}
	if got := wire.Code(200).Name(); got != "code_200" {
		t.Errorf("unknown code's name %q", got)
	}
}
