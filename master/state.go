package master

import (
	"lockcell/replica"
)

// The master reads the replicated state through the state machine itself
// (*replica.FSM, parts.state): every read is one FSM.Read, one read lock,
// one applied index, so what a handler checks and what it answers agree.
// Called on the concrete FSM, whose Read lets its function go, a handler's
// closure and what it captures stay on the handler's stack: reads cost no
// allocation without pooled arguments (the allocation avoidance lives in
// the state machine's read API, not in each handler). Tests give the
// master an FSM they feed without Raft. Its read lock is the last in the
// lock order (lockorder.go).

// read runs fn on a view of the replicated state under one lock.
func (s *parts) read(fn func(v replica.View)) {
	_ = s.state.Read(func(v replica.View) error { fn(v); return nil })
}
