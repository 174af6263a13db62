package fsm

// Indexes returns the Raft index of the last applied entry and the
// command index of the last applied command (at least the Raft index;
// past it once batches have run). A follower read checks its freshness
// proof against the first and answers the second, the index generations
// are drawn from, so a caller can compare it with the generations it saw.
func (v View) Indexes() (applied, command uint64) {
	return v.f.applied, max(v.f.lastIndex, v.f.applied)
}
