package replica

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A dialled Raft connection closed with its request unanswered (raft gave
// up on it) is reset, so nothing it had not delivered can arrive after the
// requests raft sends next; one closed after its answer ends cleanly.
func TestRedialConnAbortsUnansweredClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peerEnd := func(answer bool) error {
		t.Helper()
		dial := func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) }
		cur, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		srv, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		c := &redialConn{dial: dial, stale: time.Hour, cur: cur, last: time.Now()}
		if _, err := c.Write([]byte("request")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 7)
		if _, err := io.ReadFull(srv, buf); err != nil {
			t.Fatal(err)
		}
		if answer {
			srv.Write([]byte("answer"))
			if _, err := io.ReadFull(c, buf[:6]); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		srv.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = srv.Read(buf)
		return err
	}
	if err := peerEnd(false); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("closed unanswered: the peer reads %v, want a reset", err)
	}
	if err := peerEnd(true); !errors.Is(err, io.EOF) {
		t.Fatalf("closed after the answer: the peer reads %v, want EOF", err)
	}
}

// The commit watch makes a proof from a request only when an earlier
// commit-carrying request of the same term arrived before it (the proof's
// time is that one's arrival), only once the commit index reaches the
// leader's first entry of its term, and never from a heartbeat or a
// request of an older term.
func TestCommitWatchProofs(t *testing.T) {
	now := time.Unix(1000, 0)
	term := uint64(3)
	w := &commitWatch{now: func() time.Time { return now }, currentTerm: func() uint64 { return term }}
	all := func(uint64) bool { return true }
	ae := func(term, commit uint64, entries ...*raft.Log) *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{Term: term, LeaderCommitIndex: commit, Entries: entries}
	}
	w.observe(ae(3, 0)) // heartbeat
	if _, ok := w.best(all); ok {
		t.Fatal("a proof from a heartbeat")
	}
	w.observe(ae(3, 40, &raft.Log{Index: 41, Term: 3})) // first of the term: no earlier request
	if _, ok := w.best(all); ok {
		t.Fatal("a proof from the term's first request")
	}
	now = now.Add(10 * time.Millisecond)
	w.observe(ae(3, 40)) // commit short of the term's first entry (41)
	if _, ok := w.best(all); ok {
		t.Fatal("a proof before the leader committed an entry of its term")
	}
	t1 := now
	now = now.Add(10 * time.Millisecond)
	w.observe(ae(3, 41))
	p, ok := w.best(all)
	if !ok || p.commit != 41 || !p.at.Equal(t1) {
		t.Fatalf("proof %+v %v, want commit 41 at the previous arrival %v", p, ok, t1)
	}
	w.observe(ae(2, 99)) // a deposed leader's
	if p, _ := w.best(all); p.commit != 41 {
		t.Fatalf("an older term's request made proof %+v", p)
	}
	if _, ok := w.best(func(c uint64) bool { return c < 41 }); ok {
		t.Fatal("a proof whose commit index is not applied")
	}
}
