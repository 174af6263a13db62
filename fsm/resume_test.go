package fsm

import (
	"strings"
	"testing"
)

// A resume gives the session a new incarnation, a new generation to the
// locks it holds (and only those), withdraws its queued waits, names the
// first request id the new process may use, and from then on refuses the
// old incarnation's requests without keeping their results; the
// incarnation is in the snapshot (version 4, only once a session was
// resumed) and survives a restore; the master's own commands (expiry)
// still apply.
func TestResumeSessionApply(t *testing.T) {
	h := newFSMT(t)
	s := h.session() // principal "p"
	other := h.session()
	as := func(inc uint64, c Command) *Result { // session s's next request as its client sends it
		h.seq[s]++
		c.Session, c.Seq, c.Ack, c.Principal, c.Admin, c.Incarnation = s, h.seq[s], h.seq[s]-1, "p", true, inc
		return h.raw(c)
	}
	open := func(inc uint64, rel string) uint64 {
		r := as(inc, Command{Payload: &OpenArgs{Path: fsmtPath(rel), Flags: fsmtRWC}})
		if r.Err != nil {
			t.Fatalf("open %s: %v", rel, r.Err)
		}
		return r.Handle
	}
	held := open(0, "held")
	if r := as(0, Command{Payload: &AcquireArgs{Handle: held, Mode: LockExclusive}}); !r.Granted {
		t.Fatalf("acquire: %+v", r)
	}
	queued := open(0, "queued")
	ho := h.mustOpen(other, "queued", fsmtRWC)
	if r, _ := h.acquire(other, ho, LockExclusive, false); !r.Granted {
		t.Fatalf("other's acquire: %+v", r)
	}
	if r := as(0, Command{Payload: &AcquireArgs{Handle: queued, Mode: LockExclusive, Wait: true}}); !r.Queued {
		t.Fatalf("queued acquire: %+v", r)
	}
	untouched := h.node("queued").LockGen
	if img := fsmtImage(t, h.snapshot()); img.Version != snapshotV3 {
		t.Fatalf("snapshot before any resume is version %d", img.Version)
	}

	if r := h.raw(Command{Session: s, Principal: "q", Payload: &ResumeSessionArgs{}}); r.Err == nil || r.Err.Kind != KindPermission {
		t.Fatalf("another principal's resume: %+v", r)
	}
	lastSeq := h.seq[s]
	r := h.raw(Command{Session: s, Principal: "p", Payload: &ResumeSessionArgs{}})
	inc := h.idx
	if r.Err != nil || r.Incarnation != inc || r.NextSeq != lastSeq+1 || r.Session != s {
		t.Fatalf("resume: %+v, want incarnation %d next seq %d", r, inc, lastSeq+1)
	}
	if len(h.changesOf(ChangeSessionResumed)) != 1 || len(h.changesOf(ChangeWaitEnded)) != 1 {
		t.Fatalf("changes %+v", h.changes)
	}
	if n := h.node("held"); n.LockGen != inc || len(n.Holders) != 1 || n.Holders[0].Handle != held {
		t.Fatalf("held lock after the resume: gen %d holders %+v, want gen %d", n.LockGen, n.Holders, inc)
	}
	if n := h.node("queued"); len(n.Waiters) != 0 || n.LockGen != untouched {
		t.Fatalf("queued lock after the resume: waiters %+v gen %d", n.Waiters, n.LockGen)
	}
	var hs []ResumedHandle
	h.f.Read(func(v View) error { hs, _ = v.SessionOpenHandles(s, 10); return nil })
	if len(hs) != 2 || hs[0].Handle.ID != held || hs[0].LockMode != LockExclusive || hs[0].LockGen != inc || hs[1].LockMode != LockFree {
		t.Fatalf("open handles %+v", hs)
	}

	// The old process's request: refused, typed, and not remembered, so
	// the new process may use its request id.
	stale := as(0, Command{Payload: &SetContentsArgs{Handle: held, Contents: []byte("old")}})
	if stale.Err == nil || stale.Err.Kind != KindSessionExpired || !strings.HasPrefix(stale.Err.Msg, SessionMovedMsg) {
		t.Fatalf("old incarnation's write: %+v", stale)
	}
	h.seq[s]-- // the new process sends the same request id
	if r := as(inc, Command{Payload: &SetContentsArgs{Handle: held, Contents: []byte("new")}}); r.Err != nil {
		t.Fatalf("new incarnation's write with the refused id: %+v", r.Err)
	}
	if c := string(h.node("held").Contents); c != "new" {
		t.Fatalf("contents %q", c)
	}
	if r := h.raw(Command{Session: s, Principal: "p", Payload: &CloseSessionArgs{}}); r.Err == nil || r.Err.Kind != KindSessionExpired {
		t.Fatalf("old incarnation's close: %+v", r)
	}

	// Snapshot and restore keep the incarnation.
	img := fsmtImage(t, h.snapshot())
	if img.Version != snapshotV4 {
		t.Fatalf("snapshot of a resumed session is version %d, want %d (no sequential name made)", img.Version, snapshotV4)
	}
	f, err := fsmtRestore(t, fsmtCell, h.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	f.Read(func(v View) error {
		if p, got, ok := v.SessionResumeInfo(s); !ok || p != "p" || got != inc {
			t.Errorf("restored session: %q %d %v, want incarnation %d", p, got, ok, inc)
		}
		return nil
	})

	// The master's expiry carries no principal and applies.
	if r := h.raw(Command{Session: s, Payload: &CloseSessionArgs{Expired: true}}); r.Err != nil {
		t.Fatalf("expiry of a resumed session: %+v", r.Err)
	}
	if r := h.raw(Command{Session: s, Principal: "p", Payload: &ResumeSessionArgs{}}); r.Err == nil || r.Err.Kind != KindSessionExpired {
		t.Fatalf("resume of an expired session: %+v", r)
	}
}
