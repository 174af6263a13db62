package fsm

import (
	"cmp"
	"fmt"
	"slices"
)

// MemberAddrs is one entry of the replicated member table: a replica's Raft id
// with the address clients reach it at and the address the other members
// reach its Raft port at. Raft's own configuration holds ids and Raft
// addresses only; the table is how every replica (and so every client that
// asks any replica) learns where a member added after bootstrap serves
// clients.
type MemberAddrs struct {
	ID         string `msgpack:"i"`
	ClientAddr string `msgpack:"c"`
	RaftAddr   string `msgpack:"r"`
}

// minMemberBytes is the encoding of a zero MemberAddrs (checkSnapshotShape
// charges each element of a snapshot's member array at least this).
const minMemberBytes = 10 // i, c, r

// memberTable is the FSM's member table and the cell's configured size:
// the voter count it was bootstrapped with, which the master's refusal
// rules protect (no change may leave fewer voters than a majority of it).
// It lives under the FSM's lock.
type memberTable struct {
	size int
	byID map[string]MemberAddrs
	// readers are the members with the read-replica role
	// (readreplica.go).
	readers map[string]bool
}

// applyMembers applies the member-table commands. They never fail: a seed
// of a table that is not empty is a no-op (the first seed ever applied
// wins, as with the cell key), so replaying one is harmless.
func (f *FSM) applyMembers(p Payload) *Result {
	t := &f.members
	switch p := p.(type) {
	case *MembersSeedArgs:
		if len(t.byID) > 0 || t.size > 0 {
			return &Result{}
		}
		t.size = max(p.ConfiguredSize, 0)
		for _, m := range p.Members {
			if m.ID != "" {
				t.put(m)
			}
		}
	case *MemberPutArgs:
		for _, m := range p.Members {
			if m.ID != "" {
				t.put(m)
			}
		}
	case *MemberRemoveArgs:
		for _, m := range p.Members {
			delete(t.byID, m.ID)
			delete(t.readers, m.ID)
		}
	case *ReadReplicaPutArgs:
		t.putReadReplicas(p)
	}
	return &Result{}
}

func (t *memberTable) put(m MemberAddrs) {
	if t.byID == nil {
		t.byID = map[string]MemberAddrs{}
	}
	t.byID[m.ID] = m
}

func (t *memberTable) has(id string) bool {
	_, ok := t.byID[id]
	return ok
}

// sorted returns the members in id order (a fresh slice).
func (t *memberTable) sorted() []MemberAddrs {
	out := make([]MemberAddrs, 0, len(t.byID))
	for _, m := range t.byID {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b MemberAddrs) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// image writes the table into a snapshot image; both fields are omitted
// when the table was never seeded, so snapshots of such a state keep the
// bytes they had before the table existed.
func (t *memberTable) image(img *snapshotImage) {
	img.MemberSize = t.size
	if len(t.byID) > 0 {
		img.Members = t.sorted()
	}
	img.ReadReplicas = t.readerIDs()
}

// restore fills the table from a snapshot image, refusing what apply could
// never have written: an empty or repeated id, or a negative size.
func (t *memberTable) restore(img *snapshotImage) error {
	if img.MemberSize < 0 {
		return fmt.Errorf("%w: configured size %d", ErrMalformedSnapshot, img.MemberSize)
	}
	*t = memberTable{size: img.MemberSize}
	for _, m := range img.Members {
		switch {
		case m.ID == "":
			return fmt.Errorf("%w: member with no id", ErrMalformedSnapshot)
		case t.has(m.ID):
			return fmt.Errorf("%w: member %q appears twice", ErrMalformedSnapshot, m.ID)
		}
		t.put(m)
	}
	return t.restoreReaders(img.ReadReplicas)
}

// MemberTable is View.MemberTable under a read lock of its own.
func (f *FSM) MemberTable() (members []MemberAddrs, configuredSize int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return View{f}.MemberTable()
}
