package master

import (
	"time"

	"lockcell/replica"
)

// State is the replicated state as the master uses it. Every read goes
// through Read (or ReadWith): one call, one read lock, one applied index, so what a
// handler checks and what it answers agree. *replica.FSM is one; tests
// may give the master an FSM they feed without Raft.
// Its read lock is the last in the lock order (lockorder.go).
type State interface {
	// Read runs fn with a view of the state under one read lock.
	Read(fn func(replica.View) error) error
	// ReadWith runs fn(view, arg) under one read lock: Read without a
	// closure, for the calls on every request's path (see
	// replica.FSM.ReadWith).
	ReadWith(arg any, fn func(v replica.View, arg any) error) error
	// Backup copies the state into a backup file (one read lock).
	Backup(term uint64, now time.Time) (*replica.Backup, error)
	// SetObserver installs the function told of every applied change.
	SetObserver(o replica.Observer)
}

// read runs fn on a view of the replicated state under one lock.
func (s *parts) read(fn func(v replica.View)) {
	_ = s.state.Read(func(v replica.View) error { fn(v); return nil })
}
