package master

import (
	"context"
	"sync"
	"time"

	"lockcell/wire"
)

// Reads cost the master work that no Raft queue paces: a linearizable read
// takes a round of contact with a quorum, and a listing page builds and
// encodes up to half a MiB. A principal reading in a loop from many
// streams (huge listings, say) could take the master's CPU from everyone
// else, so each principal's reads are rationed: a token bucket per
// principal, filled at Limits.ReadBytesPerSecond, charged after each read
// with the bytes of its reply plus readCallCost for the call itself. A
// read that finds its principal's bucket in debt waits until it is paid
// off (or the caller gives up), so the cost is paced before the work is
// done again.
//
// Writes are rationed the same way, in a bucket of their own filled at
// Limits.WriteBytesPerSecond and charged with the request's bytes plus
// writeCallCost: every write becomes a Raft entry that each replica
// writes, syncs and keeps, and one Raft log serves every principal, so a
// principal proposing large writes as fast as it can (a transaction at
// its 256 KiB cap from many sessions, say) would otherwise take the log
// from everyone else; measured on a five-replica cell, 8 MiB/s of such
// transactions cut another principal's lock-and-write rate to a seventh.
//
// The admin is not rationed: it may do anything anyway, and without TLS
// every caller is the admin. Honest clients read mostly from their cache
// and write far below their ration, and never notice.

// readCallCost is what one rationed read costs beyond its reply's bytes.
const readCallCost = 2 << 10

// writeCallCost is what one rationed write costs beyond its request's
// bytes: a Raft entry's framing, its share of a sync and of the apply.
const writeCallCost = 256

// rations holds one token bucket per principal that called lately.
type rations struct {
	rate  float64 // bytes per second; also the bucket's size
	clock Clock
	mu    sync.Mutex
	bytes map[string]*rationBucket
}

type rationBucket struct {
	tokens float64
	at     time.Time
}

func newRations(rate int, clock Clock) *rations {
	return &rations{rate: float64(rate), clock: clock, bytes: map[string]*rationBucket{}}
}

// refillLocked brings b up to now, and reports its tokens.
func (r *rations) refillLocked(b *rationBucket, now time.Time) float64 {
	b.tokens = min(r.rate, b.tokens+now.Sub(b.at).Seconds()*r.rate)
	b.at = now
	return b.tokens
}

// wait returns once principal's bucket is out of debt, or ctx ends.
// What the call costs is charged after it (charge): a read's cost is its
// reply, known only once it is made.
func (r *rations) wait(ctx context.Context, principal string) error {
	return r.take(ctx, principal, 0)
}

// take returns once principal's bucket is out of debt, having charged it
// n bytes in the same step, or returns ctx's error having charged
// nothing. A write's cost is its request, known before it is served, and
// charging it as it is admitted is what keeps a principal's concurrent
// writes to its rate: were each charged only when served, every call
// waiting on the same debt would pass together the moment it was paid,
// so a principal on many streams could put a burst of its streams' worth
// of entries into the log at once (measured: four senders of 256 KiB
// transactions passed together, a MiB at a time, and another
// principal's lock round waited behind the whole burst). Admitted and
// charged one at a time, they pass one per debt paid.
func (r *rations) take(ctx context.Context, principal string, n int) error {
	for {
		r.mu.Lock()
		now := r.clock.Now()
		var debt float64
		if b := r.bytes[principal]; b != nil {
			debt = -r.refillLocked(b, now)
		}
		if debt <= 0 && n > 0 {
			r.chargeLocked(principal, n, now)
		}
		r.mu.Unlock()
		if debt <= 0 {
			return nil
		}
		paid, stop := after(r.clock, time.Duration(debt/r.rate*float64(time.Second)))
		select {
		case <-paid:
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
	}
}

// charge takes n bytes from principal's bucket, which may go into debt.
func (r *rations) charge(principal string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.chargeLocked(principal, n, r.clock.Now())
}

func (r *rations) chargeLocked(principal string, n int, now time.Time) {
	b := r.bytes[principal]
	if b == nil {
		if len(r.bytes) >= 4096 {
			// Forget principals whose buckets are full again: they owe
			// nothing, and a new bucket starts full.
			for p, old := range r.bytes {
				if r.refillLocked(old, now) >= r.rate {
					delete(r.bytes, p)
				}
			}
		}
		b = &rationBucket{tokens: r.rate, at: now}
		r.bytes[principal] = b
	}
	r.refillLocked(b, now)
	b.tokens -= float64(n)
}

// replyBytes estimates the encoded size of a rationed read's reply. A
// refused call's reply is a nil pointer of its type (the endpoints'
// methods return their own response types): it costs the call alone.
func replyBytes(resp any) int {
	n := readCallCost
	switch r := resp.(type) {
	case *wire.ReadDirResponse:
		if r == nil {
			break
		}
		for _, e := range r.Entries {
			n += len(e.Name) + 4
		}
	case *wire.ContentsResponse:
		if r != nil {
			n += len(r.Contents)
		}
	case *wire.WatchSubtreeResponse:
		if r == nil {
			break
		}
		for _, c := range r.Changes {
			n += len(c.Path) + 24
		}
	case *wire.ListSessionsResponse:
		if r == nil {
			break
		}
		for _, s := range r.Sessions {
			n += 64 + len(s.Client) + len(s.Principal) + len(s.Host) + len(s.Program)
			for _, l := range s.Locks {
				n += len(l) + 4
			}
		}
	}
	return n
}
