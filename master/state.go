package master

import (
	"lockcell/fsm"
)

// The master reads the replicated state through the state machine itself
// (*fsm.FSM, parts.state): every read is one FSM.Read, one read lock,
// one applied index, so what a handler checks and what it answers agree.
// Called on the concrete FSM, whose Read lets its function go, a handler's
// closure and what it captures stay on the handler's stack: reads cost no
// allocation without pooled arguments (the allocation avoidance lives in
// the state machine's read API, not in each handler). Tests give the
// master an FSM they feed without Raft. Its read lock is the last in the
// lock order (lockorder.go).

// read runs fn on a view of the replicated state under one lock.
func (s *parts) read(fn func(v fsm.View)) {
	_ = s.state.Read(func(v fsm.View) error { fn(v); return nil })
}
