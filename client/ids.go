package client

import "sync"

// requestIDs numbers a session's mutating calls. A call keeps its id for
// every try, so the cell applies it at most once; each call carries the
// highest id at or below which every call has completed, so the cell may
// forget the de-duplication entries of those. Its lock is a leaf: no other
// lock is taken while it is held.
type requestIDs struct {
	mu       sync.Mutex
	last     uint64
	inflight map[uint64]struct{}
}

// begin allocates the next request id; end must follow when the call is
// over, whatever its outcome.
func (r *requestIDs) begin() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight == nil {
		r.inflight = map[uint64]struct{}{}
	}
	r.last++
	r.inflight[r.last] = struct{}{}
	return r.last
}

// end marks the call with id q complete.
func (r *requestIDs) end(q uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inflight, q)
}

// ack is the highest request id at or below which every call has
// completed.
func (r *requestIDs) ack() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ack := r.last
	for q := range r.inflight {
		ack = min(ack, q-1)
	}
	return ack
}
