package master

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/fsm"
	"lockcell/wire"
)

// The master's own cost per call, without Raft or the network: Dispatch
// over a real state machine that applies each command at once. The cell's
// end-to-end figures are cell/bench_test.go's.

type benchConsensus struct {
	mu    sync.Mutex
	fsm   *fsm.FSM
	index uint64
}

func (c *benchConsensus) Apply(_ context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	b, err := cmd.Encode()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.index++
	return c.fsm.ApplyEntry(c.index, b).(*fsm.Result), nil
}

func (c *benchConsensus) VerifyLeader(context.Context) error { return nil }
func (c *benchConsensus) IsLeader() bool                     { return true }

// benchMaster starts a master with one session holding one open file of
// 100 bytes, and returns a dispatcher for that session's calls.
func benchMaster(b *testing.B) (func(method wire.Method, seq uint64, req any) error, uint64) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sm := fsm.NewFSM("c", log)
	s := New(Config{Cell: "c", Logger: log}, &benchConsensus{fsm: sm}, sm)
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	_, epoch := s.Serving()
	caller := Caller{Principal: AnonymousPrincipal}
	var session uint64
	var last any
	// The body is encoded once per request value: encoding it is the
	// client's cost, not the master's, and the benchmarks send the same
	// request each time.
	var lastReq any
	var body []byte
	h := &wire.Header{}
	call := func(method wire.Method, seq uint64, req any) error {
		if req != lastReq {
			var err error
			if body, err = msgpack.Marshal(req); err != nil {
				return err
			}
			lastReq = req
		}
		*h = wire.Header{Method: method, Session: session, Epoch: epoch, Seq: seq}
		if seq > 1 {
			h.Ack = seq - 1 // keeps the de-duplication table small
		}
		var err error
		last, _, err = s.Dispatch(context.Background(), caller, h, body)
		return err
	}
	if err := call(wire.MethodCreateSession, 0, &wire.CreateSessionRequest{}); err != nil {
		b.Fatal(err)
	}
	session = last.(*wire.CreateSessionResponse).Session
	if err := call(wire.MethodOpen, 1, &wire.OpenRequest{Path: "/ls/c/f", Flags: wire.OpenRead | wire.OpenWrite | wire.OpenCreate,
		Contents: make([]byte, 100)}); err != nil {
		b.Fatal(err)
	}
	return call, last.(*wire.OpenResponse).Handle
}

// BenchmarkDispatchRead: an uncached GetContentsAndStat of 100 bytes.
func BenchmarkDispatchRead(b *testing.B) {
	call, handle := benchMaster(b)
	req := &wire.HandleRequest{Handle: handle}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := call(wire.MethodGetContentsAndStat, 0, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDispatchWrite: a 100-byte SetContents.
func BenchmarkDispatchWrite(b *testing.B) {
	call, handle := benchMaster(b)
	req := &wire.SetContentsRequest{Handle: handle, Contents: make([]byte, 100)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := call(wire.MethodSetContents, uint64(i)+2, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDispatchKeepAlive: a prompt KeepAlive (answered at once, as a
// client in jeopardy sends it), through DispatchKeepAlive as the cell
// serves every KeepAlive.
func BenchmarkDispatchKeepAlive(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sm := fsm.NewFSM("c", log)
	s := New(Config{Cell: "c", Logger: log}, &benchConsensus{fsm: sm}, sm)
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	_, epoch := s.Serving()
	caller := Caller{Principal: AnonymousPrincipal}
	body, err := msgpack.Marshal(&wire.CreateSessionRequest{})
	if err != nil {
		b.Fatal(err)
	}
	resp, _, err := s.Dispatch(context.Background(), caller, &wire.Header{Method: wire.MethodCreateSession, Epoch: epoch}, body)
	if err != nil {
		b.Fatal(err)
	}
	h := &wire.Header{Method: wire.MethodKeepAlive, Session: resp.(*wire.CreateSessionResponse).Session, Epoch: epoch}
	if body, err = msgpack.Marshal(&wire.KeepAliveRequest{Prompt: true}); err != nil {
		b.Fatal(err)
	}
	var failed error
	done := func(_ any, _ uint64, err error) {
		if err != nil {
			failed = err
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if cancel := s.DispatchKeepAlive(caller, h, body, done); cancel != nil {
			b.Fatal("a prompt KeepAlive was parked")
		}
		if failed != nil {
			b.Fatal(failed)
		}
	}
}
