package wire_test

// Fuzz targets (docs/testplan.md#fuzzing) for the client<->master protocol:
// FuzzFrame (the byte stream a server reads from one yamux stream),
// FuzzDecodeRequest (one frame body into every message type),
// FuzzRoundTrip (decode(encode(x)) == x for every message type) and
// FuzzPath (name validation against docs/testplan.md#path-rules).
//
// Every target asserts: no panic, every rejection a typed *wire.Error of
// the documented code, and an allocation bound of 64 x len(input) + 1 MiB
// (runtime.MemStats.TotalAlloc around the decode). Seed corpora, including
// the msgpack bombs, live in testdata/fuzz/<Target>/ and are replayed by
// plain `go test`. `make fuzz-short` fuzzes each target for a few seconds.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"lockcell/wire"

	"lockcell/fixtures/fuzzbound"
)

// fzWantCode fails unless err is a *wire.Error of code c.
func fzWantCode(t *testing.T, what string, err error, c wire.Code) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != c {
		t.Fatalf("%s: error %v (%T), want a *wire.Error of code %v", what, err, err, c)
	}
}

// ---------------------------------------------------------------------------
// Message types.

type fzType struct {
	name string
	new  func() any
}

// fzTypes lists every message type: the requests a master decodes first
// (Header, then each method's body), then the responses a client decodes.
// A fuzz input's leading byte picks one (modulo the length), so the order
// is part of the committed corpus: append only.
var fzTypes = []fzType{
	{"Header", func() any { return new(wire.Header) }},
	{"CreateSessionRequest", func() any { return new(wire.CreateSessionRequest) }},
	{"KeepAliveRequest", func() any { return new(wire.KeepAliveRequest) }},
	{"CloseSessionRequest", func() any { return new(wire.CloseSessionRequest) }},
	{"OpenRequest", func() any { return new(wire.OpenRequest) }},
	{"HandleRequest", func() any { return new(wire.HandleRequest) }},
	{"SetContentsRequest", func() any { return new(wire.SetContentsRequest) }},
	{"AcquireRequest", func() any { return new(wire.AcquireRequest) }},
	{"CancelAcquireRequest", func() any { return new(wire.CancelAcquireRequest) }},
	{"CellStatusRequest", func() any { return new(wire.CellStatusRequest) }},
	{"CheckSequencerRequest", func() any { return new(wire.CheckSequencerRequest) }},
	{"ListSessionsRequest", func() any { return new(wire.ListSessionsRequest) }},
	{"SetACLRequest", func() any { return new(wire.SetACLRequest) }},
	{"Status", func() any { return new(wire.Status) }},
	{"CreateSessionResponse", func() any { return new(wire.CreateSessionResponse) }},
	{"KeepAliveResponse", func() any { return new(wire.KeepAliveResponse) }},
	{"OpenResponse", func() any { return new(wire.OpenResponse) }},
	{"SequencerResponse", func() any { return new(wire.SequencerResponse) }},
	{"CheckSequencerResponse", func() any { return new(wire.CheckSequencerResponse) }},
	{"Empty", func() any { return new(wire.Empty) }},
	{"ContentsResponse", func() any { return new(wire.ContentsResponse) }},
	{"StatResponse", func() any { return new(wire.StatResponse) }},
	{"ReadDirResponse", func() any { return new(wire.ReadDirResponse) }},
	{"AcquireResponse", func() any { return new(wire.AcquireResponse) }},
	{"CellStatusResponse", func() any { return new(wire.CellStatusResponse) }},
	{"ListSessionsResponse", func() any { return new(wire.ListSessionsResponse) }},
	{"BackupRequest", func() any { return new(wire.BackupRequest) }},
	{"BackupResponse", func() any { return new(wire.BackupResponse) }},
	{"ReplicaAddRequest", func() any { return new(wire.ReplicaAddRequest) }},
	{"ReplicaRemoveRequest", func() any { return new(wire.ReplicaRemoveRequest) }},
	{"ReplicaListRequest", func() any { return new(wire.ReplicaListRequest) }},
	{"ReplicaListResponse", func() any { return new(wire.ReplicaListResponse) }},
	{"BreakLockRequest", func() any { return new(wire.BreakLockRequest) }},
	{"BreakLockResponse", func() any { return new(wire.BreakLockResponse) }},
	{"ListLocksRequest", func() any { return new(wire.ListLocksRequest) }},
	{"ListLocksResponse", func() any { return new(wire.ListLocksResponse) }},
	{"RequestReleaseRequest", func() any { return new(wire.RequestReleaseRequest) }},
	{"RequestReleaseResponse", func() any { return new(wire.RequestReleaseResponse) }},
	{"ReplicaTransferLeadershipRequest", func() any { return new(wire.ReplicaTransferLeadershipRequest) }},
	{"ReplicaTransferLeadershipResponse", func() any { return new(wire.ReplicaTransferLeadershipResponse) }},
	{"AuditReadRequest", func() any { return new(wire.AuditReadRequest) }},
	{"AuditReadResponse", func() any { return new(wire.AuditReadResponse) }},
	{"QuotaUsageRequest", func() any { return new(wire.QuotaUsageRequest) }},
	{"QuotaUsageResponse", func() any { return new(wire.QuotaUsageResponse) }},
	{"TxnRequest", func() any { return new(wire.TxnRequest) }},
	{"TxnResponse", func() any { return new(wire.TxnResponse) }},
	{"WatchSubtreeRequest", func() any { return new(wire.WatchSubtreeRequest) }},
	{"WatchSubtreeResponse", func() any { return new(wire.WatchSubtreeResponse) }},
	{"AcquireMultiRequest", func() any { return new(wire.AcquireMultiRequest) }},
	{"AcquireMultiResponse", func() any { return new(wire.AcquireMultiResponse) }},
	{"ReleaseMultiRequest", func() any { return new(wire.ReleaseMultiRequest) }},
	{"ResumeSessionRequest", func() any { return new(wire.ResumeSessionRequest) }},
	{"ResumeSessionResponse", func() any { return new(wire.ResumeSessionResponse) }},
	{"FollowerReadRequest", func() any { return new(wire.FollowerReadRequest) }},
	{"FollowerReadResponse", func() any { return new(wire.FollowerReadResponse) }},
	{"BatchKeepAliveRequest", func() any { return new(wire.BatchKeepAliveRequest) }},
	{"BatchKeepAliveResponse", func() any { return new(wire.BatchKeepAliveResponse) }},
}

// TestFuzzCoversEveryMessage keeps fzTypes complete: every struct type of
// the package named *Request or *Response, and Header, Status and Empty,
// must be fuzzed (FuzzDecodeRequest, FuzzRoundTrip).
func TestFuzzCoversEveryMessage(t *testing.T) {
	have := map[string]bool{}
	for _, tp := range fzTypes {
		have[tp.name] = true
		if got := reflect.TypeOf(tp.new()).Elem().Name(); got != tp.name {
			t.Errorf("fzTypes entry %s makes a %s", tp.name, got)
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			if _, isStruct := ts.Type.(*ast.StructType); !isStruct {
				return false
			}
			id := ts.Name.Name
			if strings.HasSuffix(id, "Request") || strings.HasSuffix(id, "Response") || id == "Header" || id == "Status" || id == "Empty" {
				if !have[id] {
					t.Errorf("message type %s (%s) is not in fzTypes: add it, with a sample in fzSamples and a value in FuzzRoundTrip", id, name)
				}
			}
			return false
		})
	}
}

// fzBodyFor returns a fresh request body for method m as the master
// decodes it (master.call.dispatch), or nil when the master reads no body
// for m (the body frame is still read off the stream).
func fzBodyFor(m wire.Method) any {
	switch m {
	case wire.MethodCreateSession:
		return new(wire.CreateSessionRequest)
	case wire.MethodKeepAlive:
		return new(wire.KeepAliveRequest)
	case wire.MethodOpen:
		return new(wire.OpenRequest)
	case wire.MethodSetContents:
		return new(wire.SetContentsRequest)
	case wire.MethodAcquire:
		return new(wire.AcquireRequest)
	case wire.MethodCancelAcquire:
		return new(wire.CancelAcquireRequest)
	case wire.MethodCheckSequencer:
		return new(wire.CheckSequencerRequest)
	case wire.MethodSetACL:
		return new(wire.SetACLRequest)
	case wire.MethodBackup:
		return new(wire.BackupRequest)
	case wire.MethodReplicaAdd:
		return new(wire.ReplicaAddRequest)
	case wire.MethodReplicaRemove:
		return new(wire.ReplicaRemoveRequest)
	case wire.MethodReplicaList:
		return new(wire.ReplicaListRequest)
	case wire.MethodBreakLock:
		return new(wire.BreakLockRequest)
	case wire.MethodListLocks:
		return new(wire.ListLocksRequest)
	case wire.MethodRequestRelease:
		return new(wire.RequestReleaseRequest)
	case wire.MethodReplicaTransferLeadership:
		return new(wire.ReplicaTransferLeadershipRequest)
	case wire.MethodAuditRead:
		return new(wire.AuditReadRequest)
	case wire.MethodQuotaUsage:
		return new(wire.QuotaUsageRequest)
	case wire.MethodTxn:
		return new(wire.TxnRequest)
	case wire.MethodWatchSubtree:
		return new(wire.WatchSubtreeRequest)
	case wire.MethodAcquireMulti:
		return new(wire.AcquireMultiRequest)
	case wire.MethodReleaseMulti:
		return new(wire.ReleaseMultiRequest)
	case wire.MethodResumeSession:
		return new(wire.ResumeSessionRequest)
	case wire.MethodFollowerRead:
		return new(wire.FollowerReadRequest)
	case wire.MethodBatchKeepAlive:
		return new(wire.BatchKeepAliveRequest)
	case wire.MethodClose, wire.MethodGetContentsAndStat, wire.MethodGetStat, wire.MethodReadDir,
		wire.MethodDelete, wire.MethodRelease, wire.MethodGetSequencer:
		return new(wire.HandleRequest)
	}
	return nil
}

// fzSamples returns one populated value of every type in fzTypes, in order.
func fzSamples() []any {
	st := wire.Stat{Instance: 3, ContentGen: 4, LockGen: 5, ACLGen: 6, Checksum: 1<<64 - 1, Size: 3, CTime: -7, MTime: 1 << 62,
		Dir: true, Ephemeral: true, ReadACL: "r", WriteACL: "w", ChangeACL: "c", LockMode: wire.LockShared,
		LockHolders: 2, LockWaiters: 1, LockDelayUntil: 99, Holders: []wire.LockHolder{{Session: 7, Principal: "alice", Host: "h1", PID: 42, Program: "batch", Since: 1 << 60}, {Session: 1 << 40}},
		Waiters:     []wire.LockWaiter{{Session: 9, Principal: "bob", Mode: wire.LockExclusive, Host: "h2", PID: 1 << 40, Program: "cron", Since: -1}},
		LockDelayBy: &wire.LockDelayCause{Session: 5, Principal: "carol", Host: "h3", PID: 7, Program: "web", Time: 98},
		TTLMillis:   30_000, Container: true}
	return []any{
		&wire.Header{Method: wire.MethodOpen, Session: 1 << 40, Epoch: 2, Seq: 3, Ack: 2, OnBehalfOf: "alice"},
		&wire.CreateSessionRequest{ClientName: "fuzz", Host: "host", PID: 4242, Program: "fuzz.test"},
		&wire.KeepAliveRequest{AckEvent: 1<<40 | 7},
		&wire.CloseSessionRequest{},
		&wire.OpenRequest{Path: "/ls/c/a", Flags: wire.OpenRead | wire.OpenWrite | wire.OpenCreate, Contents: []byte("x"),
			LockDelayMillis: 1000, EventMask: wire.MaskContentsModified, Cache: true},
		&wire.OpenRequest{Path: "/ls/c/a", Flags: wire.OpenRead, CacheMissing: true},
		&wire.OpenRequest{Path: "/ls/c/t", Flags: wire.OpenRead | wire.OpenWrite | wire.OpenCreate | wire.OpenTTL, TTLMillis: 30_000},
		&wire.HandleRequest{Handle: 9, Sequencer: []byte{1, 2, 3}, Cache: true},
		&wire.SetContentsRequest{Handle: 9, Contents: []byte("hello"), IfGeneration: 4, HasIfGeneration: true, Sequencer: []byte{1}},
		&wire.AcquireRequest{Handle: 9, Mode: wire.LockExclusive, Wait: true},
		&wire.CancelAcquireRequest{Handle: 9, WaitSeq: 5},
		&wire.CellStatusRequest{},
		&wire.CellStatusRequest{Detail: true},
		&wire.CheckSequencerRequest{Sequencer: []byte{1, 0, 0}},
		&wire.ListSessionsRequest{},
		&wire.SetACLRequest{Handle: 9, Read: "readers", Write: "writers", ChangeACL: "admins", IfGeneration: 7, HasIfGeneration: true},
		&wire.Status{Code: wire.CodeNotMaster, Msg: "m", Leader: "127.0.0.1:7001", Epoch: 2},
		&wire.CreateSessionResponse{Session: 1, Epoch: 2, LeaseMillis: 12000},
		&wire.KeepAliveResponse{Epoch: 2, HeldMillis: 3, LeaseMillis: 4, Events: []wire.Event{
			{Seq: 1, Kind: wire.EventInvalidate, Path: "/ls/c/a"}, {Seq: 2, Kind: wire.EventChildAdded, Path: "/ls/c", Child: "a", Handle: 4, Gen: 5},
			{Seq: 3, Kind: wire.EventReleaseRequested, Path: "/ls/c/a", Handle: 4, Gen: 5, Reason: "deploy", From: 8, FromPrincipal: "bob"},
			{Seq: 4, Kind: wire.EventContents, Path: "/ls/c/a", Handle: 4, Pos: &wire.EventPos{Instance: 3, ContentGen: 9, LockGen: 5}}}},
		&wire.OpenResponse{Handle: 4, Created: true, Stat: st, Cacheable: true},
		&wire.OpenResponse{Handle: 5, Created: true, Stat: st, Name: "/ls/c/q/job-0000000017"},
		&wire.OpenResponse{Missing: true, Cacheable: true},
		&wire.SequencerResponse{Sequencer: []byte{1, 2}},
		&wire.CheckSequencerResponse{Valid: false, Reason: "stale"},
		&wire.Empty{},
		&wire.ContentsResponse{Contents: []byte("abc"), Stat: st, Cacheable: true},
		&wire.StatResponse{Stat: st, Cacheable: true},
		&wire.ReadDirResponse{Entries: []wire.DirEntry{{Name: "a", Dir: true}, {Name: "b"}}, Cacheable: true},
		&wire.AcquireResponse{LockGen: 8, Sequencer: []byte{1, 2, 3}},
		&wire.CellStatusResponse{Cell: "c", Self: "1", State: "Leader", Master: "m", Epoch: 1, Term: 2, CommitIndex: 3,
			AppliedIndex: 4, Sessions: 5, Nodes: 6, Replicas: []wire.ReplicaStatus{{ID: "1", ClientAddr: "a", RaftAddr: "b", Master: true}}},
		&wire.CellStatusResponse{Cell: "c", Self: "1", State: "Leader", Master: "m", Epoch: 1, Term: 2, CommitIndex: 3,
			AppliedIndex: 4, Replicas: []wire.ReplicaStatus{{ID: "2", ClientAddr: "a", RaftAddr: "b", Suffrage: wire.SuffrageVoter,
				Healthy: true, LastContactMillis: 12, MatchIndex: 3}}, Detail: true,
			Disk: &wire.DiskUsage{DataBytes: 1 << 30, LogStoreBytes: 1 << 29, SnapshotsBytes: 1 << 20, LastSnapshotBytes: 1 << 19,
				LastSnapshotIndex: 2, AgeMillis: 4999}},
		&wire.ListSessionsResponse{Sessions: []wire.SessionInfo{{ID: 1, Client: "c", Principal: "p", Created: 5, LeaseMillis: 6,
			Handles: 7, Locks: []string{"/ls/c/a"}, Host: "h", PID: 8, Program: "prog"}}, Total: 1},
		&wire.BackupRequest{ID: 3, Offset: 1 << 19},
		&wire.BackupResponse{ID: 3, Offset: 1 << 19, Chunk: []byte("snap"), Total: 1 << 20, Checksum: make([]byte, 32), Cell: "c",
			Applied: 9, Term: 2, Epoch: 1, Time: 5, Nodes: 4, Sessions: 1},
		&wire.ReplicaAddRequest{ID: "6", ClientAddr: "10.0.0.6:7001", RaftAddr: "10.0.0.6:8001"},
		&wire.ReplicaRemoveRequest{ID: "3"},
		&wire.ReplicaListRequest{},
		&wire.ReplicaListResponse{Replicas: []wire.ReplicaStatus{{ID: "1", ClientAddr: "a", RaftAddr: "b", Master: true,
			Suffrage: wire.SuffrageVoter, Healthy: true}, {ID: "6", ClientAddr: "c", RaftAddr: "d", Suffrage: wire.SuffrageNonvoter,
			LastContactMillis: 1500}}, ConfiguredSize: 5, Index: 42},
		&wire.BreakLockRequest{Path: "/ls/c/a", Reason: "stuck batch job"},
		&wire.BreakLockResponse{Holders: []wire.LockHolder{{Session: 7, Principal: "alice"}}, LockGen: 9},
		&wire.ListLocksRequest{Prefix: "/ls/c/jobs"},
		&wire.ListLocksResponse{Locks: []wire.LockInfo{{Path: "/ls/c/jobs/a", Mode: wire.LockShared, Generation: 5,
			Holders: []wire.LockHolder{{Session: 7, Principal: "alice"}}, HolderCount: 2,
			Waiters: []wire.LockWaiter{{Session: 8, Principal: "bob", Mode: wire.LockExclusive}}, WaiterCount: 1, LockDelayUntil: 99}},
			Truncated: true},
		&wire.RequestReleaseRequest{Handle: 9, Reason: "the nightly job needs it"},
		&wire.RequestReleaseResponse{Asked: 2},
		&wire.ReplicaTransferLeadershipRequest{ID: "3", From: "1"},
		&wire.ReplicaTransferLeadershipResponse{From: "1", To: "3", ToClientAddr: "10.0.0.3:7001"},
		&wire.AuditReadRequest{Since: 12, SinceTime: 1_700_000_000_000_000_000, Prefix: "/ls/c/svc", Max: 100, WaitMillis: 20000},
		&wire.AuditReadResponse{Records: [][]byte{[]byte(`{"index":12,"op":"write","result":"ok"}`)}, Next: 13, Oldest: 1, Last: 40, Replica: "2"},
		&wire.QuotaUsageRequest{Principal: "alice"},
		&wire.WatchSubtreeRequest{Handle: 9, After: wire.SubtreePos{Index: 120, Ord: 2}, Kinds: wire.SubtreeAllKinds, Max: 100, WaitMillis: 5000},
		&wire.WatchSubtreeResponse{Changes: []wire.SubtreeChange{{Pos: wire.SubtreePos{Index: 121, Ord: 1}, Path: "/ls/c/d/e", Kind: wire.SubtreeCreated, Generation: 121}},
			Next: wire.SubtreePos{Index: 130}},
		&wire.TxnRequest{Checks: []wire.TxnCheck{{Kind: wire.TxnCheckGeneration, Path: "/ls/c/x", Generation: 7}},
			Ops: []wire.TxnOp{{Kind: wire.TxnOpSet, Path: "/ls/c/x", Contents: []byte("8")}}},
		&wire.TxnResponse{Failed: &wire.TxnFailure{Check: 0, Op: -1, Code: wire.CodeGenerationMismatch, Msg: "check 0 (/ls/c/x): content generation is 9, not 7"}},
		&wire.AcquireMultiRequest{Handles: []uint64{9, 4}, Wait: true},
		&wire.AcquireMultiResponse{Locks: []wire.AcquireResponse{{LockGen: 12, Sequencer: []byte("s1")}, {LockGen: 12, Sequencer: []byte("s2")}}},
		&wire.ReleaseMultiRequest{Handles: []uint64{9, 4}},
		&wire.QuotaUsageResponse{Principal: "alice", Admin: true, Limits: []wire.QuotaLimit{
			{Name: wire.QuotaNodesPerPrincipal, Used: 3, Max: 100000, Exempt: true},
			{Name: wire.QuotaContentBytes, Used: 1 << 20, Max: 512 << 20, Reserve: 4 << 20, Bytes: true}},
			TopByNodes:        []wire.PrincipalUsage{{Principal: "bob", Nodes: 9, ContentBytes: 10}},
			TopByContentBytes: []wire.PrincipalUsage{{Principal: "carol", Nodes: 1, ContentBytes: 1 << 30}}},
		&wire.ResumeSessionRequest{Session: 1 << 40, Secret: make([]byte, wire.ResumeSecretSize)},
		&wire.ResumeSessionResponse{Session: 1 << 40, Epoch: 3, LeaseMillis: 12000, Incarnation: 1 << 41, NextSeq: 17,
			Handles: []wire.ResumedHandle{{Handle: 9, Path: "/ls/c/leader", Instance: 4, Flags: wire.OpenRead | wire.OpenWrite,
				EventMask: wire.MaskLockAcquired, LockMode: wire.LockExclusive, LockGen: 1 << 41}}, Truncated: true},
		&wire.FollowerReadRequest{Read: wire.MethodGetContentsAndStat, Req: wire.HandleRequest{Handle: 9, After: "b", Limit: 10},
			MaxStaleMillis: 500, MinIndex: 120},
		&wire.FollowerReadResponse{Replica: "2", Index: 130, AgeMillis: 12,
			Contents: &wire.ContentsResponse{Contents: []byte("x"), Stat: wire.Stat{Instance: 3, ContentGen: 7}},
			Dir:      &wire.ReadDirResponse{Entries: []wire.DirEntry{{Name: "a", Dir: true}}, More: true}},
		&wire.BatchKeepAliveRequest{Entries: []wire.BatchKeepAliveEntry{{Session: 1 << 40, Incarnation: 2, Epoch: 3, AckEvent: 9,
			Prompt: true, Principal: "alice"}}, HoldMillis: 6000},
		&wire.BatchKeepAliveResponse{Epoch: 3, TTLMillis: 12000, Results: []wire.BatchKeepAliveResult{{Session: 1 << 40,
			HeldMillis: 5000, LeaseMillis: 11000, Events: []wire.Event{{Seq: 10, Kind: wire.EventInvalidate, Path: "/ls/c/f"}}},
			{Session: 7, Code: wire.CodeSessionExpired, Msg: "gone"}}},
	}
}

// fzEncode returns the body bytes of one frame holding v.
func fzEncode(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := wire.WriteMessage(&buf, v); err != nil {
		t.Fatalf("encode %T: %v", v, err)
	}
	return buf.Bytes()[4:]
}

// fzNorm sets every empty slice reachable from v (a pointer) to nil: the
// codec does not distinguish an empty slice from a missing one, and
// neither does any caller.
func fzNorm(v any) any {
	fzNormValue(reflect.ValueOf(v))
	return v
}

func fzNormValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			fzNormValue(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fzNormValue(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() == 0 {
			if !v.IsNil() && v.CanSet() {
				v.SetZero()
			}
			return
		}
		for i := 0; i < v.Len(); i++ {
			fzNormValue(v.Index(i))
		}
	}
}

// fzRoundTrip encodes v as a frame, reads it back into a fresh value of
// its type and checks the two are equal (up to empty vs nil slices), and
// that re-encoding what was decoded is a fixed point. A value too large
// for a frame must fail with CodeTooLarge.
func fzRoundTrip(t *testing.T, v any) {
	t.Helper()
	got, enc, ok := fzEncodeDecode(t, v)
	if !ok {
		return
	}
	want := reflect.New(reflect.TypeOf(v).Elem())
	want.Elem().Set(reflect.ValueOf(v).Elem())
	if !reflect.DeepEqual(fzNorm(got), fzNorm(want.Interface())) {
		t.Fatalf("%T: decode(encode(x)) != x\n got %+v\nwant %+v", v, got, v)
	}
	got2, enc2, _ := fzEncodeDecode(t, got)
	if _, enc3, _ := fzEncodeDecode(t, got2); !bytes.Equal(enc2, enc3) {
		t.Fatalf("%T: encoding is not a fixed point: % x / % x (first % x)", v, enc2, enc3, enc)
	}
}

// fzEncodeDecode writes v as one frame and reads it back.
func fzEncodeDecode(t *testing.T, v any) (got any, enc []byte, ok bool) {
	t.Helper()
	var buf bytes.Buffer
	if err := wire.WriteMessage(&buf, v); err != nil {
		fzWantCode(t, "encode", err, wire.CodeTooLarge)
		return nil, nil, false
	}
	enc = append([]byte(nil), buf.Bytes()...)
	got = reflect.New(reflect.TypeOf(v).Elem()).Interface()
	if err := wire.ReadMessage(&buf, got); err != nil {
		t.Fatalf("%T: decode of its own encoding: %v\n%+v", v, err, v)
	}
	if buf.Len() != 0 {
		t.Fatalf("%T: %d bytes left after one frame", v, buf.Len())
	}
	return got, enc, true
}

// ---------------------------------------------------------------------------
// FuzzDecodeRequest: one frame body into the type its first byte picks.

func FuzzDecodeRequest(f *testing.F) {
	for i, v := range fzSamples() {
		f.Add(append([]byte{byte(i)}, fzEncode(f, v)...))
		f.Add(append([]byte{byte(i)}, fzEncode(f, reflect.New(reflect.TypeOf(v).Elem()).Interface())...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		tp := fzTypes[int(in[0])%len(fzTypes)]
		body := in[1:]
		v := tp.new()
		var err error
		alloc := fuzzbound.Alloc(func() { err = wire.Decode(body, v) })
		if limit := fuzzbound.Limit(len(body)); alloc > limit {
			t.Fatalf("%s: decoding %d bytes allocated %d, limit %d", tp.name, len(body), alloc, limit)
		}
		if err != nil {
			fzWantCode(t, tp.name, err, wire.CodeBadRequest)
			if !strings.Contains(err.Error(), tp.name) {
				t.Fatalf("%s: rejection does not name the type: %v", tp.name, err)
			}
			return
		}
		// Decoding is a function of the bytes.
		v2 := tp.new()
		if err := wire.Decode(body, v2); err != nil || !reflect.DeepEqual(v, v2) {
			t.Fatalf("%s: second decode differs: %+v vs %+v (%v)", tp.name, v, v2, err)
		}
		fzRoundTrip(t, v)
	})
}

// ---------------------------------------------------------------------------
// FuzzFrame: the bytes a server reads from one stream.

// fzFrame returns a frame header claiming n bytes followed by body.
func fzFrame(n uint32, body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, n), body...)
}

// fzSetContentsFrame returns a SetContentsRequest frame whose body is
// exactly n bytes (n >= 8): fixmap{"c": bin32}.
func fzSetContentsFrame(n int) []byte {
	body := make([]byte, n)
	copy(body, []byte{0x81, 0xa1, 'c', 0xc6})
	binary.BigEndian.PutUint32(body[4:], uint32(n-8))
	return fzFrame(uint32(n), body)
}

// fzFramePrefix builds the large frames a fuzz input names with its
// selector byte, so the corpus holds max-size and max+1 frames without
// megabyte files. A header frame (SetContents) comes first where the big
// frame is a body.
func fzFramePrefix(sel uint8) []byte {
	fzPrefixOnce.Do(func() {
		for i := range fzPrefixes {
			fzPrefixes[i] = fzBuildFramePrefix(uint8(i))
		}
	})
	return fzPrefixes[sel%32]
}

var (
	fzPrefixOnce sync.Once
	fzPrefixes   [32][]byte
)

func fzBuildFramePrefix(sel uint8) []byte {
	h := fzEncodeHeader()
	hdr := fzFrame(uint32(len(h)), h)
	switch sel % 32 { // mostly plain streams: big frames are slow to fuzz
	case 1: // a body frame of exactly MaxFrameSize
		return append(hdr, fzSetContentsFrame(wire.MaxFrameSize)...)
	case 2: // a body frame one byte over
		return append(hdr, fzSetContentsFrame(wire.MaxFrameSize+1)...)
	case 3: // one byte under
		return append(hdr, fzSetContentsFrame(wire.MaxFrameSize-1)...)
	case 4: // a header claiming 2^31-1 bytes
		return fzFrame(1<<31-1, nil)
	case 5: // a header claiming 2^32-1 bytes
		return fzFrame(1<<32-1, nil)
	case 6: // a max-size body frame cut off half way
		b := append(hdr, fzSetContentsFrame(wire.MaxFrameSize)...)
		return b[:len(hdr)+4+wire.MaxFrameSize/2]
	case 7: // the header frame itself a byte over the limit
		return fzSetContentsFrame(wire.MaxFrameSize + 1)
	}
	return nil
}

func fzEncodeHeader() []byte {
	var buf bytes.Buffer
	wire.WriteMessage(&buf, &wire.Header{Method: wire.MethodSetContents, Session: 1, Epoch: 1, Seq: 1})
	return buf.Bytes()[4:]
}

// fzReadFrameOracle checks one ReadFrame outcome against the stream's
// bytes: at offset off of in, ReadFrame returned (b, err) and left rest
// bytes unread.
func fzReadFrameOracle(t *testing.T, in []byte, off int, b []byte, err error, rest int) (next int, ok bool) {
	t.Helper()
	left := in[off:]
	switch {
	case len(left) == 0:
		if err != io.EOF {
			t.Fatalf("offset %d: at the end of the stream: %v, want io.EOF", off, err)
		}
		return off, false
	case len(left) < 4:
		if err != io.ErrUnexpectedEOF {
			t.Fatalf("offset %d: %d header bytes: %v, want io.ErrUnexpectedEOF", off, len(left), err)
		}
		return off, false
	}
	n := binary.BigEndian.Uint32(left)
	switch {
	case n > wire.MaxFrameSize:
		fzWantCode(t, "oversize frame", err, wire.CodeTooLarge)
		if b != nil || rest != len(left)-4 {
			t.Fatalf("offset %d: oversize frame of %d: read %d bytes past its header", off, n, len(left)-4-rest)
		}
		return off, false
	case uint64(n) > uint64(len(left)-4):
		if err != io.ErrUnexpectedEOF || b != nil {
			t.Fatalf("offset %d: frame of %d with %d bytes: %v, want io.ErrUnexpectedEOF", off, n, len(left)-4, err)
		}
		return off, false
	}
	if err != nil || !bytes.Equal(b, left[4:4+n]) || rest != len(left)-4-int(n) {
		t.Fatalf("offset %d: frame of %d: got %d bytes, %v, %d left", off, n, len(b), err, rest)
	}
	return off + 4 + int(n), true
}

func FuzzFrame(f *testing.F) {
	samples := map[reflect.Type]any{}
	for _, v := range fzSamples() {
		samples[reflect.TypeOf(v)] = v
	}
	var calls []byte
	for m := wire.Method(0); m <= 20; m++ { // every method, and unknown ones
		h := &wire.Header{Method: m, Session: 2, Epoch: 3, Seq: uint64(m)}
		var body any = &wire.Empty{}
		if b := fzBodyFor(m); b != nil {
			body = samples[reflect.TypeOf(b)]
		}
		var buf bytes.Buffer
		if err := wire.WriteMessage(&buf, h, body); err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(0), buf.Bytes())
		calls = append(calls, buf.Bytes()...)
	}
	f.Add(uint8(0), calls)
	for sel := range uint8(8) { // the big frames of fzFramePrefix
		f.Add(sel, []byte{})
	}
	f.Fuzz(func(t *testing.T, sel uint8, tail []byte) {
		p := fzFramePrefix(sel)
		in := append(p[:len(p):len(p)], tail...) // never writes into the shared prefix
		r := bytes.NewReader(in)
		off := 0
		alloc := fuzzbound.Alloc(func() {
			for range 64 {
				// The header frame, as cell.Server.serveStream reads it.
				var h wire.Header
				hb, err := wire.ReadFrame(r)
				var ok bool
				if off, ok = fzReadFrameOracle(t, in, off, hb, err, r.Len()); !ok {
					return
				}
				if err := wire.Decode(hb, &h); err != nil {
					fzWantCode(t, "header", err, wire.CodeBadRequest)
					// ReadMessage agrees with ReadFrame + Decode.
					if err2 := wire.ReadMessage(bytes.NewReader(in[off-4-len(hb):]), &wire.Header{}); wire.CodeOf(err2) != wire.CodeBadRequest {
						t.Fatalf("ReadMessage of a bad header: %v", err2)
					}
					return
				}
				// The body frame, decoded as the master does.
				body, err := wire.ReadFrame(r)
				if off, ok = fzReadFrameOracle(t, in, off, body, err, r.Len()); !ok {
					return
				}
				if v := fzBodyFor(h.Method); v != nil {
					if err := wire.Decode(body, v); err != nil {
						fzWantCode(t, "body of "+h.Method.String(), err, wire.CodeBadRequest)
					}
				}
			}
		})
		if limit := fuzzbound.Limit(len(in)); alloc > limit {
			t.Fatalf("reading %d bytes of frames allocated %d, limit %d", len(in), alloc, limit)
		}
	})
}

// ---------------------------------------------------------------------------
// FuzzRoundTrip: decode(encode(x)) == x for values built from fuzz input.

func FuzzRoundTrip(f *testing.F) {
	f.Add(uint8(4), "/ls/c/a", "", "", []byte("contents"), []byte{}, uint64(1), uint64(2), uint64(3), int64(-1), uint32(7), uint8(0xff))
	f.Add(uint8(14), "\xff\xfe", "\x00", "ü", []byte{}, []byte{0xc1}, uint64(1<<64-1), uint64(0), uint64(1<<63), int64(-1<<63), uint32(1<<32-1), uint8(3))
	f.Add(uint8(24), "", "", "", []byte(nil), []byte(nil), uint64(0), uint64(0), uint64(0), int64(0), uint32(0), uint8(0))
	f.Fuzz(func(t *testing.T, kind uint8, s1, s2, s3 string, b1, b2 []byte, u1, u2, u3 uint64, i1 int64, u32 uint32, bits uint8) {
		bit := func(i int) bool { return bits&(1<<i) != 0 }
		n := int(bits>>4) % 4 // elements in slice fields
		st := wire.Stat{Instance: u1, ContentGen: u2, LockGen: u3, ACLGen: u1 ^ u2, Checksum: u2 ^ u3, Size: u3,
			CTime: i1, MTime: -i1, Dir: bit(0), Ephemeral: bit(1), ReadACL: s1, WriteACL: s2, ChangeACL: s3,
			LockMode: uint8(u32), LockHolders: u32, LockWaiters: ^u32, LockDelayUntil: i1 ^ 1, TTLMillis: -i1 ^ 2, Container: bit(4)}
		if bit(2) {
			st.LockDelayBy = &wire.LockDelayCause{Session: u3, Principal: s1, Host: s2, PID: i1, Program: s3, Time: -i1}
		}
		var events []wire.Event
		var entries []wire.DirEntry
		var replicas []wire.ReplicaStatus
		var sessions []wire.SessionInfo
		for i := range n {
			events = append(events, wire.Event{Seq: u1 + uint64(i), Kind: uint8(u32) + uint8(i), Path: s1, Handle: u2, Gen: u3, Child: s2, Reason: s3,
				From: u1 ^ u3, FromPrincipal: s2 + s3})
			if bit(i + 3) {
				events[i].Pos = &wire.EventPos{Instance: u3 + uint64(i), ContentGen: u1, LockGen: u2}
			}
			entries = append(entries, wire.DirEntry{Name: s1 + s3, Dir: bit(i)})
			replicas = append(replicas, wire.ReplicaStatus{ID: s1, ClientAddr: s2, RaftAddr: s3, Master: bit(i), Suffrage: s3,
				Healthy: bit(i + 1), LastContactMillis: i1, MatchIndex: u2})
			st.Holders = append(st.Holders, wire.LockHolder{Session: u2 + uint64(i), Principal: s3, Host: s1, PID: i1, Program: s2, Since: -i1})
			st.Waiters = append(st.Waiters, wire.LockWaiter{Session: u1 + uint64(i), Principal: s2, Mode: uint8(i), Host: s3, PID: -i1, Program: s1, Since: i1})
			sessions = append(sessions, wire.SessionInfo{ID: u1, Client: s1, Principal: s2, Created: i1, LeaseMillis: -i1,
				Handles: u32, Locks: []string{s3, s1}[:i%3], Host: s2, PID: i1, Program: s3})
		}
		vals := []any{
			&wire.Header{Method: wire.Method(u32), Session: u1, Epoch: u2, Seq: u3, Ack: u1 ^ u3, Incarnation: u2 ^ u3, OnBehalfOf: s3,
				ProxyCache: map[bool]uint64{true: u2}[bit(0)]},
			&wire.CreateSessionRequest{ClientName: s1, Host: s2, PID: i1, Program: s3},
			&wire.KeepAliveRequest{AckEvent: u1},
			&wire.CloseSessionRequest{},
			&wire.OpenRequest{Path: s1, Flags: u32, Contents: b1, LockDelayMillis: i1, EventMask: ^u32, Cache: bit(2), CacheMissing: bit(3),
				TTLMillis: i1 ^ 3},
			&wire.HandleRequest{Handle: u1, Sequencer: b2, Cache: bit(3)},
			&wire.SetContentsRequest{Handle: u1, Contents: b1, IfGeneration: u2, HasIfGeneration: bit(4), Sequencer: b2},
			&wire.AcquireRequest{Handle: u1, Mode: uint8(u32), Wait: bit(5)},
			&wire.CancelAcquireRequest{Handle: u1, WaitSeq: u2},
			&wire.CellStatusRequest{StateHash: bit(1), AllowMaster: bit(2), Detail: bit(3)},
			&wire.CheckSequencerRequest{Sequencer: b1},
			&wire.ListSessionsRequest{},
			&wire.SetACLRequest{Handle: u1, Read: s1, Write: s2, ChangeACL: s3},
			&wire.Status{Code: wire.Code(u32), Msg: s1, Leader: s2, Epoch: u1},
			&wire.CreateSessionResponse{Session: u1, Epoch: u2, LeaseMillis: i1, ResumeSecret: b2},
			&wire.KeepAliveResponse{Epoch: u1, HeldMillis: i1, LeaseMillis: -i1, Events: events, Proxy: map[bool]uint64{true: u3}[bit(1)]},
			&wire.OpenResponse{Handle: u1, Created: bit(6), Stat: st, Cacheable: bit(7), Missing: bit(5), Name: s2},
			&wire.SequencerResponse{Sequencer: b1},
			&wire.CheckSequencerResponse{Valid: bit(0), Reason: s1},
			&wire.Empty{},
			&wire.ContentsResponse{Contents: b1, Stat: st, Cacheable: bit(1), ProxyCacheable: bit(3), Proxy: map[bool]uint64{true: u1}[bit(2)]},
			&wire.StatResponse{Stat: st, Cacheable: bit(2), ProxyCacheable: bit(1), Proxy: map[bool]uint64{true: u2}[bit(3)]},
			&wire.ReadDirResponse{Entries: entries, Cacheable: bit(3)},
			&wire.AcquireResponse{LockGen: u1, Sequencer: b1},
			&wire.CellStatusResponse{Cell: s1, Self: s2, State: s3, Master: s1, Epoch: u1, Term: u2, CommitIndex: u3,
				AppliedIndex: u1, Sessions: u2, Nodes: u3, Replicas: replicas, Detail: bit(4),
				Disk: &wire.DiskUsage{DataBytes: i1, LogStoreBytes: -i1, SnapshotsBytes: i1 ^ 1, LastSnapshotBytes: i1, LastSnapshotIndex: u3, AgeMillis: i1}},
			&wire.ListSessionsResponse{Sessions: sessions, Total: u1},
			&wire.BackupRequest{ID: u1, Offset: u2},
			&wire.BackupResponse{ID: u1, Offset: u2, Chunk: b1, Total: u3, Checksum: b2, Cell: s1, Applied: u1, Term: u2,
				Epoch: u3, Time: i1, Nodes: u1 ^ u2, Sessions: u2 ^ u3},
			&wire.ReplicaAddRequest{ID: s1, ClientAddr: s2, RaftAddr: s3},
			&wire.ReplicaRemoveRequest{ID: s1},
			&wire.ReplicaListRequest{},
			&wire.ReplicaListResponse{Replicas: replicas, ConfiguredSize: int(i1), Index: u1},
			&wire.BreakLockRequest{Path: s1, Reason: s2},
			&wire.BreakLockResponse{Holders: st.Holders, LockGen: u2},
			&wire.ListLocksRequest{Prefix: s1},
			&wire.ListLocksResponse{Locks: []wire.LockInfo{{Path: s1, Mode: uint8(u32), Generation: u1, Holders: st.Holders,
				HolderCount: u32, Waiters: []wire.LockWaiter{{Session: u2, Principal: s2, Mode: uint8(u32)}}[:len(events)%2],
				WaiterCount: ^u32, LockDelayUntil: i1}}[:len(events)%2], Truncated: bit(1)},
			&wire.RequestReleaseRequest{Handle: u1, Reason: s1},
			&wire.RequestReleaseResponse{Asked: u32},
			&wire.ReplicaTransferLeadershipRequest{ID: s1, From: s2},
			&wire.ReplicaTransferLeadershipResponse{From: s1, To: s2, ToClientAddr: s3},
			&wire.AuditReadRequest{Since: u1, SinceTime: i1, Prefix: s1, Max: u32, WaitMillis: -i1},
			&wire.AuditReadResponse{Records: [][]byte{b1, b2}[:n%3], Next: u1, Oldest: u2, Last: u3, Replica: s2},
			&wire.QuotaUsageRequest{Principal: s1},
			&wire.WatchSubtreeRequest{Handle: u1, After: wire.SubtreePos{Index: u2, Ord: u32}, Now: bit(0), Kinds: uint8(u32), Max: u32, WaitMillis: ^u32},
			&wire.WatchSubtreeResponse{Changes: []wire.SubtreeChange{{Pos: wire.SubtreePos{Index: u1, Ord: u32}, Path: s1, Kind: uint8(u32), Generation: u3}}[:n%2],
				Next: wire.SubtreePos{Index: u2}, Compacted: bit(1)},
			&wire.TxnRequest{Checks: []wire.TxnCheck{{Kind: uint8(u32), Path: s1, Generation: u1, Mode: uint8(u32 >> 8), Sequencer: b1}}[:n%2],
				Ops: []wire.TxnOp{{Kind: uint8(u32), Path: s2, Contents: b2}}[:(n/2)%2]},
			&wire.TxnResponse{Generation: u1, Failed: map[bool]*wire.TxnFailure{true: {Check: int(i1), Op: -int(i1), Code: wire.Code(u32), Msg: s3}}[bit(4)]},
			&wire.AcquireMultiRequest{Handles: []uint64{u1, u2, u3}[:n%4], Wait: bit(2)},
			&wire.AcquireMultiResponse{Locks: []wire.AcquireResponse{{LockGen: u1, Sequencer: b1}, {LockGen: u2, Sequencer: b2}}[:n%3]},
			&wire.ReleaseMultiRequest{Handles: []uint64{u3, u1}[:n%3]},
			&wire.QuotaUsageResponse{Principal: s1, Admin: bit(0), Limits: []wire.QuotaLimit{{Name: s2, Used: i1, Max: -i1, Reserve: i1 ^ 1,
				Bytes: bit(1), Exempt: bit(2)}}[:n%2], TopByNodes: []wire.PrincipalUsage{{Principal: s3, Nodes: i1, ContentBytes: -i1}}[:n%2],
				TopByContentBytes: []wire.PrincipalUsage{{Principal: s2, Nodes: -i1, ContentBytes: i1}}[:(n/2)%2]},
			&wire.ResumeSessionRequest{Session: u1, Secret: b1},
			&wire.ResumeSessionResponse{Session: u1, Epoch: u2, LeaseMillis: i1, Incarnation: u3, NextSeq: u1 ^ u2,
				Handles: []wire.ResumedHandle{{Handle: u2, Path: s1, Instance: u3, Flags: u32, EventMask: ^u32, LockMode: uint8(u32),
					LockGen: u1}}[:n%2], Truncated: bit(3)},
			&wire.FollowerReadRequest{Read: wire.Method(u32), Req: wire.HandleRequest{Handle: u1, Sequencer: b1, Cache: bit(0), After: s1, Limit: u32},
				MaxStaleMillis: i1, MinIndex: u2},
			&wire.FollowerReadResponse{Replica: s2, Index: u3, AgeMillis: -i1, Master: bit(1),
				Contents: map[bool]*wire.ContentsResponse{true: {Contents: b2, Stat: wire.Stat{Instance: u1}, Cacheable: bit(2)}}[bit(3)],
				Stat:     map[bool]*wire.StatResponse{true: {Stat: wire.Stat{ContentGen: u2}}}[bit(4)],
				Dir:      map[bool]*wire.ReadDirResponse{true: {Entries: []wire.DirEntry{{Name: s3}}, More: bit(5)}}[bit(2)]},
			&wire.BatchKeepAliveRequest{Entries: []wire.BatchKeepAliveEntry{{Session: u1, Incarnation: u2, Epoch: u3, AckEvent: u1 ^ u2,
				Prompt: bit(2), Principal: s1}}[:n%2], HoldMillis: i1},
			&wire.BatchKeepAliveResponse{Epoch: u1, TTLMillis: i1, Results: []wire.BatchKeepAliveResult{{Session: u2,
				Code: wire.Code(u32 % 64), Msg: s2, HeldMillis: i1, LeaseMillis: -i1}}[:n%2]},
		}
		if len(vals) != len(fzTypes) {
			t.Fatalf("%d values for %d types", len(vals), len(fzTypes))
		}
		fzRoundTrip(t, vals[int(kind)%len(vals)])
	})
}

// ---------------------------------------------------------------------------
// FuzzPath: name validation against docs/testplan.md#path-rules.

// fzZooKeeperForbidden reports whether r is a code point ZooKeeper's
// PathUtils.validatePath refuses.
func fzZooKeeperForbidden(r rune) bool {
	return r <= 0x1f || r >= 0x7f && r <= 0x9f || r >= 0xd800 && r <= 0xf8ff || r >= 0xfff0 && r <= 0xffff
}

// fzCheckAcceptedName asserts every rule of docs/testplan.md#path-rules on a
// name ValidateName accepted in cell.
func fzCheckAcceptedName(t *testing.T, cell, name string) {
	t.Helper()
	root := "/ls/" + cell
	fail := func(rule string) { t.Fatalf("ValidateName(%q, %.80q) accepted a name that %s", cell, name, rule) }
	if !strings.HasPrefix(name, "/ls/") {
		fail("does not start with /ls/")
	}
	if name != root && !strings.HasPrefix(name, root+"/") {
		fail("is outside the cell's root " + root)
	}
	if !utf8.ValidString(name) {
		fail("is not valid UTF-8")
	}
	if len(name) > wire.MaxNameLen {
		fail("is longer than MaxNameLen")
	}
	if name != "/" && strings.HasSuffix(name, "/") {
		fail("ends in '/'")
	}
	if strings.Contains(name, "//") {
		fail("has an empty component")
	}
	for _, r := range name {
		if fzZooKeeperForbidden(r) || r == utf8.RuneError {
			fail("holds a forbidden code point")
		}
	}
	comps := strings.Split(name[1:], "/")
	if len(comps) > wire.MaxNameLen/2 {
		fail("is deeper than a 1 KiB name can be")
	}
	for _, c := range comps {
		switch {
		case c == "":
			fail("has an empty component")
		case c == "." || c == "..":
			fail("has a '.' or '..' component")
		case len(c) > wire.MaxComponentLen:
			fail("has a component longer than MaxComponentLen")
		}
		for i := 0; i < len(c); i++ {
			b := c[i]
			if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-') {
				fail("has a byte outside [A-Za-z0-9._-]")
			}
		}
	}
	// The tree is closed under Parent, and Parent/Base split the name.
	if name != root {
		p, b := wire.Parent(name), wire.Base(name)
		if p+"/"+b != name {
			t.Fatalf("Parent %q + Base %q != %q", p, b, name)
		}
		if err := wire.ValidateName(cell, p); err != nil {
			t.Fatalf("%q is valid but its parent %q is not: %v", name, p, err)
		}
		if err := wire.ValidCellName(b); err != nil {
			t.Fatalf("%q is valid but its base %q is not a valid component: %v", name, b, err)
		}
	}
}

// fzReferenceValid is the DESIGN.md naming rule written independently:
// /ls/<cell>[/component...], components 1-255 bytes of [A-Za-z0-9._-],
// not "." or "..", at most 1024 bytes in all.
func fzReferenceValid(cell, name string) bool {
	if len(name) > 1024 {
		return false
	}
	parts := strings.Split(name, "/")
	if len(parts) < 3 || parts[0] != "" || parts[1] != "ls" || parts[2] != cell {
		return false
	}
	for _, c := range parts[2:] {
		if c == "" || c == "." || c == ".." || len(c) > 255 {
			return false
		}
		for _, r := range c {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", r) {
				return false
			}
		}
	}
	return true
}

func FuzzPath(f *testing.F) {
	for _, n := range []string{"/ls/c", "/ls/c/a", "/ls/c/a/b.c_d-e", "/ls/c/" + strings.Repeat("x", 255)} {
		f.Add("c", n)
	}
	f.Fuzz(func(t *testing.T, cell, name string) {
		var err error
		alloc := fuzzbound.Alloc(func() { err = wire.ValidateName(cell, name) })
		if limit := fuzzbound.Limit(len(cell) + len(name)); alloc > limit {
			t.Fatalf("ValidateName of %d bytes allocated %d, limit %d", len(name), alloc, limit)
		}
		cellErr := wire.ValidCellName(cell)
		if cellErr != nil {
			fzWantCode(t, "ValidCellName", cellErr, wire.CodeInvalidName)
		}
		if err != nil {
			fzWantCode(t, "ValidateName", err, wire.CodeInvalidName)
			if len(err.Error()) > 4*wire.MaxNameLen+200 {
				t.Fatalf("rejection message of %d bytes for a %d-byte name", len(err.Error()), len(name))
			}
		}
		if cellErr != nil {
			return // ValidateName's contract assumes a valid cell name
		}
		if want := fzReferenceValid(cell, name); (err == nil) != want {
			t.Fatalf("ValidateName(%q, %.80q) = %v, reference rule says valid=%v", cell, name, err, want)
		}
		if err == nil {
			fzCheckAcceptedName(t, cell, name)
		}
	})
}
