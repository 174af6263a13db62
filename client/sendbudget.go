package client

import (
	"context"
	"sync"

	"lockcell/wire"
)

// maxBytesInFlight bounds the request bytes one connection has sent and
// not yet had answered. A replica charges every request byte it holds to
// its connection's memory budget (4 MiB by default) until the call is
// dispatched, and closes a connection that stays over it without
// progress, which it cannot tell apart from an attack; so a client with
// many large writes in flight (more than 7 of 256 KiB) waits here, at
// half the replica's budget, instead of being cut. Half, not all: the
// estimate per request is rough, and bytes a replica has not yet
// released after answering still count there for a moment.
const maxBytesInFlight = 2 << 20

// smallRequest is the weight below which a call does not wait on the
// budget: KeepAlives, releases and most calls carry a few hundred bytes,
// must never queue behind large writes (a KeepAlive that waited could
// cost the session), and are too small to add up to a replica's budget.
const smallRequest = 16 << 10

// sendBudget is a weighted semaphore over request bytes.
type sendBudget struct {
	mu    sync.Mutex
	avail int64
	freed chan struct{} // closed and replaced whenever bytes are released
}

func newSendBudget(n int64) *sendBudget {
	return &sendBudget{avail: n, freed: make(chan struct{})}
}

// acquire waits until n bytes are free, or ctx ends.
func (b *sendBudget) acquire(ctx context.Context, n int64) error {
	for {
		b.mu.Lock()
		if b.avail >= n {
			b.avail -= n
			b.mu.Unlock()
			return nil
		}
		ch := b.freed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *sendBudget) release(n int64) {
	b.mu.Lock()
	b.avail += n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// requestWeight is an upper estimate of a request's encoded size: the
// bytes it carries (contents, names) plus room for its fixed fields.
func requestWeight(req any) int64 {
	const fixed = 512
	switch r := req.(type) {
	case *wire.SetContentsRequest:
		return fixed + int64(len(r.Contents)+len(r.Sequencer))
	case *wire.OpenRequest:
		return fixed + int64(len(r.Contents)+len(r.Path))
	case *wire.CheckSequencerRequest:
		return fixed + int64(len(r.Sequencer))
	case *wire.HandleRequest:
		return fixed + int64(len(r.Sequencer))
	}
	return fixed
}
