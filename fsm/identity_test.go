package fsm

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// identityState is a lock held by one declared identity, waited for by
// another, and a second lock under the lock-delay of a third's expiry.
type identityState struct {
	h                     *fsmtH
	holder, waiter, gone  uint64
	granted, queued, died int64
}

func newIdentityState(t *testing.T) identityState {
	h := newFSMT(t)
	st := identityState{h: h}
	mk := func(host string, pid int64, prog string) uint64 {
		r := h.raw(Command{Client: "test", Principal: "p-" + host, Payload: &CreateSessionArgs{Host: host, PID: pid, Program: prog}})
		if r.Err != nil {
			t.Fatalf("create session %s: %v", host, r.Err)
		}
		return r.Session
	}
	st.holder, st.waiter, st.gone = mk("alpha", 101, "batch"), mk("beta", 202, "cron"), mk("gamma", 303, "web")
	hh := h.mustOpen(st.holder, "l", fsmtRWC)
	hw := h.mustOpen(st.waiter, "l", fsmtRW)
	h.now += int64(time.Second)
	st.granted = h.now
	if r, _ := h.acquire(st.holder, hh, LockExclusive, false); !r.Granted {
		t.Fatalf("holder: %+v", r)
	}
	h.now += int64(time.Second)
	st.queued = h.now
	if r, _ := h.acquire(st.waiter, hw, LockExclusive, true); !r.Queued {
		t.Fatalf("waiter: %+v", r)
	}
	hg := h.openDelay(st.gone, "d", fsmtRWC, time.Minute)
	if r, _ := h.acquire(st.gone, hg, LockExclusive, false); !r.Granted {
		t.Fatalf("gone: %+v", r)
	}
	h.now += int64(time.Second)
	st.died = h.now
	wantOK(t, "expire gamma", h.raw(Command{Session: st.gone, Payload: &CloseSessionArgs{Expired: true}}))
	return st
}

// check asserts what reads of f report of the state: who holds and waits
// with their identities and times, and what started the lock-delay.
func (st identityState) check(t *testing.T, f *FSM, what string) {
	t.Helper()
	_ = f.Read(func(v View) error {
		hs := v.LockHolders(fsmtPath("l"), 10)
		want := []LockHolderView{{Session: st.holder, Principal: "p-alpha", Identity: Identity{"alpha", 101, "batch"}, Since: st.granted}}
		if !reflect.DeepEqual(hs, want) {
			t.Errorf("%s: holders %+v, want %+v", what, hs, want)
		}
		ws := v.LockWaiters(fsmtPath("l"), 10)
		wantW := []LockWaiterView{{Session: st.waiter, Principal: "p-beta", Identity: Identity{"beta", 202, "cron"}, Mode: LockExclusive, Since: st.queued}}
		if !reflect.DeepEqual(ws, wantW) {
			t.Errorf("%s: waiters %+v, want %+v", what, ws, wantW)
		}
		by, until := v.LockDelayBy(fsmtPath("d"))
		if by == nil || by.Session != st.gone || by.Principal != "p-gamma" || by.Host != "gamma" || by.PID != 303 ||
			by.Program != "web" || by.Time != st.died || until != st.died+int64(time.Minute) {
			t.Errorf("%s: lock-delay by %+v until %d, want session %d (gamma) at %d until %d", what, by, until, st.gone, st.died, st.died+int64(time.Minute))
		}
		if by, _ := v.LockDelayBy(fsmtPath("l")); by != nil {
			t.Errorf("%s: a lock never delayed names a cause %+v", what, by)
		}
		return nil
	})
}

// The declared identity, the acquisition and queueing times and the
// lock-delay's cause are replicated state: a snapshot carries them, and a
// replica that replays the same entries holds the same.
func TestLockIntrospectionSurvivesSnapshotAndReplay(t *testing.T) {
	st := newIdentityState(t)
	st.check(t, st.h.f, "live")

	f2, err := fsmtRestore(t, fsmtCell, st.h.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	st.check(t, f2, "restored")
	_, a, _ := st.h.f.StateHash()
	_, b, _ := f2.StateHash()
	if a != b {
		t.Fatal("the restored state hashes differently")
	}

	// Replay: the same entries into a fresh FSM give the same state.
	st2 := newIdentityState(t)
	_, c, _ := st2.h.f.StateHash()
	if a != c {
		t.Fatal("replaying the same entries gave another state")
	}

	// The next holder's time is the time of the entry that handed it the
	// lock, not of its wait.
	h := st.h
	h.now += int64(time.Second)
	handedAt := h.now
	wantOK(t, "holder leaves", h.raw(Command{Session: st.holder, Payload: &CloseSessionArgs{}}))
	_ = h.f.Read(func(v View) error {
		hs := v.LockHolders(fsmtPath("l"), 10)
		if len(hs) != 1 || hs[0].Session != st.waiter || hs[0].Since != handedAt || hs[0].Host != "beta" {
			t.Errorf("after the hand-off: holders %+v, want beta since %d", hs, handedAt)
		}
		if by, _ := v.LockDelayBy(fsmtPath("l")); by != nil {
			t.Errorf("a clean close imposed a lock-delay cause %+v", by)
		}
		return nil
	})
}

// A snapshot of the previous version (2), written before sessions
// declared an identity and holders, waiters and lock-delays recorded
// their times and causes, restores: the new fields read as empty, and the
// state works on.
func TestVersion2SnapshotRestoresWithIntrospectionEmpty(t *testing.T) {
	st := newIdentityState(t)
	img := fsmtImage(t, st.h.snapshot())
	img.Version = 2
	for _, s := range img.Sessions {
		s.Host, s.PID, s.Program = "", 0, ""
	}
	for _, n := range img.Nodes {
		n.LockDelayBy = nil
		for i := range n.Holders {
			n.Holders[i].Since = 0
		}
		for i := range n.Waiters {
			n.Waiters[i].Since = 0
		}
	}
	b, err := msgpack.Marshal(&img)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"ho", "pi", "pg", "lb"} {
		if strings.Contains(string(b), "\xa2"+key) {
			t.Fatalf("the version-2 image still carries key %q", key)
		}
	}
	f, err := fsmtRestore(t, fsmtCell, b)
	if err != nil {
		t.Fatalf("restore of a version-2 snapshot: %v", err)
	}
	_ = f.Read(func(v View) error {
		hs := v.LockHolders(fsmtPath("l"), 10)
		if len(hs) != 1 || hs[0].Session != st.holder || hs[0].Principal != "p-alpha" || hs[0].Identity != (Identity{}) || hs[0].Since != 0 {
			t.Errorf("holders %+v, want alpha's session with no identity or time", hs)
		}
		ws := v.LockWaiters(fsmtPath("l"), 10)
		if len(ws) != 1 || ws[0].Session != st.waiter || ws[0].Identity != (Identity{}) || ws[0].Since != 0 {
			t.Errorf("waiters %+v, want beta's session with no identity or time", ws)
		}
		if by, until := v.LockDelayBy(fsmtPath("d")); by != nil || until != 0 {
			t.Errorf("lock-delay cause %+v until %d, want none", by, until)
		}
		return nil
	})
	// It works on: the holder leaves and the waiter gets the lock, timed.
	h := st.h.clone(f)
	h.now += int64(time.Second)
	wantOK(t, "holder leaves", h.raw(Command{Session: st.holder, Payload: &CloseSessionArgs{}}))
	_ = f.Read(func(v View) error {
		if hs := v.LockHolders(fsmtPath("l"), 10); len(hs) != 1 || hs[0].Session != st.waiter || hs[0].Since != h.now {
			t.Errorf("after the hand-off: %+v", hs)
		}
		return nil
	})
	// And what it snapshots next is the current version (version 3 while
	// no session was resumed: imageVersion).
	if img := fsmtImage(t, fsmtSnapshotBytes(t, f)); img.Version != snapshotV3 {
		t.Errorf("re-snapshotted as version %d", img.Version)
	}
}

// A declared identity a Stat could not show as it is fails CreateSession
// with KindBadRequest and creates no session.
func TestCreateSessionRefusesBadIdentity(t *testing.T) {
	h := newFSMT(t)
	for name, id := range map[string]CreateSessionArgs{
		"long host":      {Host: strings.Repeat("h", MaxIdentityLen+1)},
		"long program":   {Program: strings.Repeat("p", MaxIdentityLen+1)},
		"newline":        {Host: "a\nb"},
		"escape":         {Program: "x\x1b[2J"},
		"not utf-8":      {Host: "\xff"},
		"negative pid":   {PID: -5},
		"C1 control":     {Program: "a\u0085b"},
		"delete control": {Host: "a\x7f"},
	} {
		r := h.raw(Command{Client: "test", Payload: &id})
		wantKind(t, name, r, KindBadRequest)
		if h.f.sessions[h.idx] != nil {
			t.Errorf("%s: a session was created", name)
		}
	}
	ok := CreateSessionArgs{Host: strings.Repeat("h", MaxIdentityLen), PID: 1 << 40, Program: "héllo wörld"}
	if r := h.raw(Command{Client: "test", Payload: &ok}); r.Err != nil {
		t.Fatalf("an identity at the limit: %v", r.Err)
	}
}
