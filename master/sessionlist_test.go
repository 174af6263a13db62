package master

import (
	"strings"
	"testing"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// The most a ListSessions reply could be asked to hold, MaxListedSessions
// sessions that declared the longest hosts and programs the cell takes,
// is cut short and still fits a frame; a listing of ordinary size is left
// whole, identities and all.
func TestSessionInfosFitAFrame(t *testing.T) {
	long := strings.Repeat("x", wire.MaxIdentityLen)
	views := make([]fsm.SessionView, wire.MaxListedSessions)
	ids := make([]fsm.Identity, len(views))
	left := map[uint64]time.Duration{}
	for i := range views {
		views[i] = fsm.SessionView{ID: uint64(i+1) << 40, Client: "client-" + long[:64], Principal: "principal-" + long[:64],
			Created: 1 << 62, Handles: 1 << 20}
		ids[i] = fsm.Identity{Host: long, PID: 1 << 40, Program: long}
		left[views[i].ID] = time.Minute
	}
	infos := sessionInfos(views, ids, left, listSessionsBytes)
	if len(infos) == 0 || len(infos) == len(views) {
		t.Fatalf("listed %d of %d sessions with the longest identities", len(infos), len(views))
	}
	var buf strings.Builder
	if err := wire.WriteMessage(&buf, &wire.ListSessionsResponse{Sessions: infos, Total: uint64(len(views))}); err != nil {
		t.Fatalf("the cut listing does not encode in a frame: %v", err)
	}
	if n := buf.Len(); n > wire.MaxFrameSize {
		t.Fatalf("the cut listing is %d bytes, over the frame limit %d", n, wire.MaxFrameSize)
	}
	// Without the cut, the same sessions would not fit.
	var all strings.Builder
	if err := wire.WriteMessage(&all, &wire.ListSessionsResponse{Sessions: sessionInfos(views, ids, left, 1<<40)}); err == nil &&
		all.Len() <= wire.MaxFrameSize {
		t.Fatalf("all %d sessions encode in %d bytes: the test no longer shows the cut is needed", len(views), all.Len())
	}

	// Ordinary sessions: all of them, each with its identity.
	for i := range views {
		views[i].Client, views[i].Principal = "app", "alice"
		ids[i] = fsm.Identity{Host: "build-7", PID: 4242, Program: "nightly"}
	}
	infos = sessionInfos(views, ids, left, listSessionsBytes)
	if len(infos) != len(views) {
		t.Fatalf("listed %d of %d ordinary sessions", len(infos), len(views))
	}
	if s := infos[17]; s.ID != views[17].ID || s.Host != "build-7" || s.PID != 4242 || s.Program != "nightly" ||
		s.LeaseMillis != time.Minute.Milliseconds() {
		t.Fatalf("session 17 listed as %+v", s)
	}
}
