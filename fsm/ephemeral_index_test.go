package fsm

import (
	"fmt"
	"maps"
	"math/rand"
	"testing"
)

// ephemeralsByScan is what the ephemeral-node index must hold: every
// ephemeral node by its owning session, found by walking the namespace.
func ephemeralsByScan(f *FSM) map[uint64]map[string]bool {
	out := map[uint64]map[string]bool{}
	for p, n := range f.nodes {
		if n.Ephemeral && n.Owner != 0 {
			if out[n.Owner] == nil {
				out[n.Owner] = map[string]bool{}
			}
			out[n.Owner][p] = true
		}
	}
	return out
}

func checkEphemeralIndex(t *testing.T, f *FSM, when string) {
	t.Helper()
	want := ephemeralsByScan(f)
	if !maps.EqualFunc(f.ephemerals, want, maps.Equal) {
		t.Fatalf("%s: the ephemeral index holds %v, the namespace %v", when, f.ephemerals, want)
	}
}

// The index of ephemeral nodes by owning session follows every create,
// delete, handle close and session end (expired or not), and a restored
// snapshot rebuilds it; a session's end removes every ephemeral file it
// made, and every ephemeral directory it made that is empty.
func TestEphemeralIndexFollowsTheNamespace(t *testing.T) {
	h := newFSMT(t)
	rng := rand.New(rand.NewSource(1))
	var sessions []uint64
	handles := map[uint64][]uint64{}
	for step := range 400 {
		when := fmt.Sprintf("step %d", step)
		switch op := rng.Intn(10); {
		case op < 2 || len(sessions) == 0:
			sessions = append(sessions, h.session())
		case op < 6:
			s := sessions[rng.Intn(len(sessions))]
			flags := uint32(fsmtRWC)
			if rng.Intn(3) > 0 {
				flags |= FlagEphemeral
			}
			rel := fmt.Sprintf("f%d", rng.Intn(12))
			if rng.Intn(3) == 0 {
				dir := fmt.Sprintf("d%d", rng.Intn(3))
				h.open(s, dir, fsmtRWC|FlagDirectory|(flags&FlagEphemeral))
				rel = dir + "/" + rel
			}
			if r := h.open(s, rel, flags); r.Err == nil {
				handles[s] = append(handles[s], r.Handle)
			}
		case op < 8:
			s := sessions[rng.Intn(len(sessions))]
			if hs := handles[s]; len(hs) > 0 {
				i := rng.Intn(len(hs))
				h.closeH(s, hs[i])
				handles[s] = append(hs[:i], hs[i+1:]...)
			}
		default:
			i := rng.Intn(len(sessions))
			s := sessions[i]
			owned := maps.Clone(h.f.ephemerals[s])
			wantOK(t, when+": session end", h.raw(Command{Session: s, Payload: &CloseSessionArgs{Expired: rng.Intn(2) == 0}}))
			for p := range owned {
				// An ephemeral directory goes once it is empty.
				if n := h.f.nodes[p]; n != nil && n.Owner == s && !(n.Dir && len(n.children) > 0) {
					t.Fatalf("%s: %s outlived the session %d that made it", when, p, s)
				}
			}
			sessions = append(sessions[:i], sessions[i+1:]...)
			delete(handles, s)
		}
		checkEphemeralIndex(t, h.f, when)
	}
	f2, err := fsmtRestore(t, fsmtCell, h.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	checkEphemeralIndex(t, f2, "restored")
	if len(f2.ephemerals) == 0 {
		t.Fatal("the sequence left no ephemeral node to restore: the test proves nothing of restore")
	}
}
