package master

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/fsm"
	"lockcell/wire"
)

// A master over a real state machine fed without Raft: localConsensus
// applies each command to the FSM at once, in order, as a one-replica
// cell whose every write commits. It exercises admission, the method
// table and the reads through the view; the replicated parts are proven
// on real cells in package cell.
type localConsensus struct {
	mu    sync.Mutex
	fsm   *fsm.FSM
	index uint64
}

func (l *localConsensus) Apply(_ context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	b, err := cmd.Encode()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	return l.fsm.ApplyEntry(l.index, b).(*fsm.Result), nil
}

func (l *localConsensus) VerifyLeader(context.Context) error { return nil }
func (l *localConsensus) IsLeader() bool                     { return true }

type testMaster struct {
	*Server
	clock *fakeClock
	epoch uint64
}

func newTestMaster(t *testing.T) *testMaster {
	sm := fsm.NewFSM("c", slog.New(slog.NewTextHandler(io.Discard, nil)))
	return newTestMasterOn(t, &localConsensus{fsm: sm}, sm)
}

// newTestMasterOn starts a master on fsm with cons as its consensus (a
// localConsensus over fsm, or one that wraps it).
func newTestMasterOn(t *testing.T, cons Consensus, fsm *fsm.FSM) *testMaster {
	clock := newFakeClock()
	s := New(Config{Cell: "c", LeaseTTL: testLease, Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		cons, fsm)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	_, epoch := s.Serving()
	return &testMaster{Server: s, clock: clock, epoch: epoch}
}

// call dispatches one call as the anonymous admin, with the master's
// epoch and the given session and request id.
func (m *testMaster) call(session, seq uint64, method wire.Method, req any) (any, error) {
	var body []byte
	if req != nil {
		var err error
		if body, err = msgpack.Marshal(req); err != nil {
			panic(err)
		}
	}
	h := &wire.Header{Method: method, Session: session, Epoch: m.epoch, Seq: seq}
	resp, _, err := m.Dispatch(context.Background(), Caller{Principal: AnonymousPrincipal}, h, body)
	return resp, err
}

func codeOf(err error) wire.Code {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return wire.CodeOK
}

// sessionWithFile creates a session and, through it, /ls/c/f holding
// "one", opened for reading and writing.
func (m *testMaster) sessionWithFile(t *testing.T) (sess, handle uint64) {
	t.Helper()
	resp, err := m.call(0, 0, wire.MethodCreateSession, &wire.CreateSessionRequest{ClientName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	sess = resp.(*wire.CreateSessionResponse).Session
	resp, err = m.call(sess, 1, wire.MethodOpen, &wire.OpenRequest{Path: "/ls/c/f",
		Flags: wire.OpenRead | wire.OpenWrite | wire.OpenCreate, Contents: []byte("one")})
	if err != nil {
		t.Fatal(err)
	}
	return sess, resp.(*wire.OpenResponse).Handle
}

func TestDispatchServesThroughTheMethodTable(t *testing.T) {
	m := newTestMaster(t)
	sess, handle := m.sessionWithFile(t)
	if _, err := m.call(sess, 2, wire.MethodSetContents, &wire.SetContentsRequest{Handle: handle, Contents: []byte("two")}); err != nil {
		t.Fatal(err)
	}
	// A session caches only once a KeepAlive of its own reached the
	// master, as an honest client's first one does at once.
	resp, err := m.call(sess, 0, wire.MethodGetContentsAndStat, &wire.HandleRequest{Handle: handle, Cache: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.(*wire.ContentsResponse); got.Cacheable {
		t.Fatal("a session never heard on a KeepAlive was answered cacheable")
	}
	if _, err := m.call(sess, 0, wire.MethodKeepAlive, &wire.KeepAliveRequest{Prompt: true}); err != nil {
		t.Fatal(err)
	}
	resp, err = m.call(sess, 0, wire.MethodGetContentsAndStat, &wire.HandleRequest{Handle: handle, Cache: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.(*wire.ContentsResponse); string(got.Contents) != "two" || !got.Cacheable {
		t.Fatalf("read %q cacheable=%v; want \"two\", cacheable", got.Contents, got.Cacheable)
	}
	// The cached read registered the session: the next write of the name
	// waits for its acknowledgement, which the KeepAlive gives.
	done := make(chan error, 1)
	go func() {
		_, err := m.call(sess, 3, wire.MethodSetContents, &wire.SetContentsRequest{Handle: handle, Contents: []byte("three")})
		done <- err
	}()
	resp, err = m.call(sess, 0, wire.MethodKeepAlive, &wire.KeepAliveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	evs := resp.(*wire.KeepAliveResponse).Events
	if len(evs) == 0 || evs[len(evs)-1].Kind != wire.EventInvalidate || evs[len(evs)-1].Path != "/ls/c/f" {
		t.Fatalf("KeepAlive carried %+v; want an invalidation of /ls/c/f", evs)
	}
	ack := evs[len(evs)-1].Seq
	go m.call(sess, 0, wire.MethodKeepAlive, &wire.KeepAliveRequest{AckEvent: ack}) // parks; Stop ends it
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write still waits after its invalidation was acknowledged")
	}
	if st := m.InvalidationStats(); st.Sent != 1 || st.Acked != 1 || st.Late != 0 {
		t.Errorf("invalidation stats %+v; want one sent and acknowledged", st)
	}

	// Admission, as the table says.
	for _, tc := range []struct {
		name   string
		h      wire.Header
		body   []byte
		caller string
		want   wire.Code
	}{
		{"unknown method", wire.Header{Method: 99, Epoch: m.epoch}, nil, AnonymousPrincipal, wire.CodeBadRequest},
		{"CellStatus is the cell's", wire.Header{Method: wire.MethodCellStatus}, nil, AnonymousPrincipal, wire.CodeBadRequest},
		{"wrong epoch", wire.Header{Method: wire.MethodGetStat, Session: sess, Epoch: m.epoch + 1}, nil, AnonymousPrincipal, wire.CodeBadEpoch},
		{"malformed body", wire.Header{Method: wire.MethodGetStat, Session: sess, Epoch: m.epoch}, []byte{0xc1}, AnonymousPrincipal, wire.CodeBadRequest},
		{"another principal's session", wire.Header{Method: wire.MethodGetStat, Session: sess, Epoch: m.epoch}, nil, "mallory", wire.CodePermission},
		{"write without a request id", wire.Header{Method: wire.MethodSetContents, Session: sess, Epoch: m.epoch},
			mustMarshal(&wire.SetContentsRequest{Handle: handle}), AnonymousPrincipal, wire.CodeBadRequest},
		{"membership on a replica without it", wire.Header{Method: wire.MethodReplicaList, Epoch: 0}, nil, AnonymousPrincipal, wire.CodeInternal},
		{"membership by another than the admin", wire.Header{Method: wire.MethodReplicaList}, nil, "mallory", wire.CodePermission},
	} {
		_, _, err := m.Dispatch(context.Background(), Caller{Principal: tc.caller}, &tc.h, tc.body)
		if got := codeOf(err); got != tc.want {
			t.Errorf("%s: %v (code %v); want code %v", tc.name, err, got, tc.want)
		}
	}
}

func mustMarshal(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestKeepAliveAdmitsOnlyLiveSessions: a KeepAlive through
// DispatchKeepAlive for a session without a lease here is admitted only if
// the state holds it: one never created is UnknownSession, one closed
// SessionExpired, and a live one is answered (and leased).
func TestKeepAliveAdmitsOnlyLiveSessions(t *testing.T) {
	m := newTestMaster(t)
	keepAlive := func(session uint64) (any, error) {
		var resp any
		var err error
		answered := false
		h := &wire.Header{Method: wire.MethodKeepAlive, Session: session, Epoch: m.epoch}
		cancel := m.DispatchKeepAlive(Caller{Principal: AnonymousPrincipal}, h,
			mustMarshal(&wire.KeepAliveRequest{Prompt: true}), func(r any, _ uint64, e error) {
				resp, err, answered = r, e, true
			})
		if cancel != nil || !answered {
			t.Fatalf("a prompt KeepAlive of session %d was parked", session)
		}
		return resp, err
	}
	if _, err := keepAlive(1 << 40); codeOf(err) != wire.CodeUnknownSession {
		t.Fatalf("a session never created: %v; want UnknownSession", err)
	}
	sess, _ := m.sessionWithFile(t)
	if resp, err := keepAlive(sess); err != nil || resp.(*wire.KeepAliveResponse).LeaseMillis <= 0 {
		t.Fatalf("a live session: %v %+v", err, resp)
	}
	if _, err := m.call(sess, 0, wire.MethodCloseSession, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := keepAlive(sess); codeOf(err) != wire.CodeSessionExpired {
		t.Fatalf("a closed session: %v; want SessionExpired", err)
	}
}

// TestDecodedRequestsAreFreshEachCall: the requests decoded is pooled
// into start zeroed (a field the next body leaves out is not the last
// call's), and what a handler kept of one (its byte slices) is never
// written by the next decode.
func TestDecodedRequestsAreFreshEachCall(t *testing.T) {
	var kept []wire.OpenRequest
	serve := decoded(func(_ context.Context, _ *call, req *wire.OpenRequest) (*wire.Empty, error) {
		kept = append(kept, *req)
		return &wire.Empty{}, nil
	})
	for _, req := range []*wire.OpenRequest{
		{Path: "/ls/c/a", Contents: []byte("xxxx"), Cache: true, EventMask: 1},
		{Path: "/ls/c/b", Contents: []byte("yyyy")},
		{Path: "/ls/c/c"},
	} {
		if _, err := serve(context.Background(), nil, mustMarshal(req)); err != nil {
			t.Fatal(err)
		}
	}
	if string(kept[0].Contents) != "xxxx" || !kept[0].Cache || kept[0].EventMask != 1 {
		t.Fatalf("the first request changed after later calls: %+v", kept[0])
	}
	if string(kept[1].Contents) != "yyyy" || kept[1].Cache || kept[1].EventMask != 0 {
		t.Fatalf("the second request carries the first's fields: %+v", kept[1])
	}
	if kept[2].Contents != nil || kept[2].Cache || kept[2].Path != "/ls/c/c" {
		t.Fatalf("the third request carries earlier fields: %+v", kept[2])
	}
}

// TestRefusedRationedReadsAreAnswered: a rationed read refused by its
// handler (here: a handle never opened) is answered its error, and its
// caller's ration charged the call alone: each endpoint returns a nil
// reply of its own type, which the ration must not read.
func TestRefusedRationedReadsAreAnswered(t *testing.T) {
	m := newTestMaster(t)
	alice := Caller{Principal: "alice"}
	dispatch := func(method wire.Method, session uint64, req any) (any, error) {
		var body []byte
		if req != nil {
			body = mustMarshal(req)
		}
		resp, _, err := m.Dispatch(context.Background(), alice, &wire.Header{Method: method, Session: session, Epoch: m.epoch}, body)
		return resp, err
	}
	resp, err := dispatch(wire.MethodCreateSession, 0, &wire.CreateSessionRequest{ClientName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	sess := resp.(*wire.CreateSessionResponse).Session
	for _, method := range []wire.Method{wire.MethodGetContentsAndStat, wire.MethodGetStat, wire.MethodReadDir} {
		if _, err := dispatch(method, sess, &wire.HandleRequest{Handle: 999}); codeOf(err) != wire.CodeHandleInvalid {
			t.Errorf("%s of a handle never opened: %v; want HandleInvalid", method, err)
		}
	}
}
