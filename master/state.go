package master

import (
	"time"

	"lockcell/fsm"
)

// State is the replicated state as the master uses it. Every read goes
// through Read (or ReadWith): one call, one read lock, one applied index, so what a
// handler checks and what it answers agree. *fsm.FSM is one; tests
// may give the master an FSM they feed without Raft.
//
// Lock order: the master's own locks (the invalidator's, Server.mu, the
// reservations', the sessions') may be held when calling Read; the state
// never calls back into the master while it holds its lock (its observer
// runs after the apply has unlocked).
type State interface {
	// Read runs fn with a view of the state under one read lock.
	Read(fn func(fsm.View) error) error
	// ReadWith runs fn(view, arg) under one read lock: Read without a
	// closure, for the calls on every request's path (see
	// fsm.FSM.ReadWith).
	ReadWith(arg any, fn func(v fsm.View, arg any) error) error
	// Backup copies the state into a backup file (one read lock).
	Backup(term uint64, now time.Time) (*fsm.Backup, error)
	// SetObserver installs the function told of every applied change.
	SetObserver(o fsm.Observer)
}

// read runs fn on a view of the replicated state under one lock.
func (s *parts) read(fn func(v fsm.View)) {
	_ = s.state.Read(func(v fsm.View) error { fn(v); return nil })
}
