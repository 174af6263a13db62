package master

import (
	"context"
	"time"

	"lockcell/wire"
)

// heldBatch is a proxy's BatchKeepAlive held at the master (proxy.go):
// one record for all of its sessions, where a KeepAlive of a client's own
// is a parkedCall each. A proxy keeps every one of its sessions in a held
// batch for most of every lease, so at a hundred thousand sessions a
// parkedCall and an answer closure each were a fifth of the master's
// heap. Each session's lease points at the batch holding it
// (lease.batch); what ends one session's hold ends the batch's, and every
// session of it is answered together, as the wire method promises:
//
//   - an event queued for one of its sessions, or a session's end
//     (lease.wakeLocked);
//   - the stale signal (staleWatch) and the end of the term (stop): every
//     session is answered NotMaster (err);
//   - its own timer, the proxy leaving, the connection ending: the
//     handler's (proxyEndpoint.batchKeepAlive), which then ends it
//     (endBatch).
//
// slots, arrived, shared, stale and ctx are set when it is made and never
// change; err, and the closing of woken, are under sessions.mu. While it
// is held it is in sessions.held and its sessions' leases point at it.
type heldBatch struct {
	slots   []heldSlot
	arrived time.Time
	shared  keepAliveArgs   // what its sessions' KeepAlives share (epoch, event share)
	stale   <-chan struct{} // the stale signal it was held under
	ctx     context.Context // the term's: bounds the proof at its end
	woken   chan struct{}   // closed when something but its handler ends the hold
	err     error           // set before woken closes: every session's answer
}

// heldSlot is one session of a held batch: the entry it answers (the
// index the caller gave), its lease, and what of its KeepAlive its reply
// needs that the batch's others do not share (args). Kept small: a
// proxy's sessions are each in a held batch most of the time.
type heldSlot struct {
	entry       int
	l           *lease
	session     uint64
	incarnation uint64
	silent      time.Duration
}

// args is s's KeepAlive as it arrived, for its reply.
func (s *heldSlot) args(shared keepAliveArgs) keepAliveArgs {
	a := shared
	a.session, a.incarnation, a.silent = s.session, s.incarnation, s.silent
	return a
}

// wakeLocked ends b's hold early, with err (nil: answer as at its end).
// ss.mu is held.
func (b *heldBatch) wakeLocked(err error) {
	if isClosed(b.woken) {
		return
	}
	if err != nil {
		b.err = err
	}
	close(b.woken)
}

// batchEntryAnswer is a held batch's answer to one of its entries: the
// index its caller gave it, and the reply or the error.
type batchEntryAnswer struct {
	entry int
	resp  *wire.KeepAliveResponse
	err   error
}

// holdBatch admits the entries of a BatchKeepAlive (each arg batched,
// with the same epoch and event share),
// under one lock, each as its own KeepAlive arrives (arriveLocked: the
// lease extended, within its ceiling, and the acknowledgement recorded).
// It returns the entries refused on arrival, the batch holding the rest,
// and until when it may be held: zero when it is to be answered at once
// (one of its sessions has something to send, or its lease is too short
// to hold), else the earliest of its sessions' hold ends. A batch with
// no session left (every one refused) is nil. The caller waits on
// b.woken, its own timer and its call's end, then calls endBatch.
func (ss *sessions) holdBatch(args []keepAliveArgs, entries []int) (b *heldBatch, until time.Time, refused []batchEntryAnswer) {
	arrived := ss.clock.Now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.active || (len(args) > 0 && args[0].epoch != ss.epoch) {
		// The term the call was admitted in has ended.
		for i := range args {
			refused = append(refused, batchEntryAnswer{entry: entries[i], err: errStopped})
		}
		return nil, time.Time{}, refused
	}
	b = &heldBatch{arrived: arrived, ctx: ss.termCtx, woken: make(chan struct{}), slots: make([]heldSlot, 0, len(args))}
	if len(args) > 0 {
		b.shared = keepAliveArgs{epoch: args[0].epoch, eventBytes: args[0].eventBytes, batched: true, cacheSession: args[0].cacheSession}
	}
	now := false
	for i, a := range args {
		l, holdUntil, pending, err := ss.arriveLocked(a, arrived)
		if err != nil {
			refused = append(refused, batchEntryAnswer{entry: entries[i], err: err})
			continue
		}
		b.slots = append(b.slots, heldSlot{entry: entries[i], l: l, session: a.session, incarnation: a.incarnation, silent: a.silent})
		if pending || !holdUntil.After(arrived) {
			now = true
		}
		if until.IsZero() || holdUntil.Before(until) {
			until = holdUntil
		}
	}
	if len(b.slots) == 0 {
		return nil, time.Time{}, refused
	}
	if now {
		return b, time.Time{}, refused
	}
	b.stale = ss.auth.stale()
	if isClosed(b.stale) {
		// No proof for half a lease: NotMaster now, while the clients
		// still trust their leases (keepAliveAsync says why).
		b.err = errStopped
		return b, time.Time{}, refused
	}
	ss.held[b] = struct{}{}
	for _, s := range b.slots {
		if o := s.l.batch; o != nil && o != b {
			// The session is in an older batch still held (a proxy's
			// retry, or the session moved between proxies): that one
			// is answered now, this one holds it.
			o.wakeLocked(nil)
		}
		s.l.batch = b
	}
	select { // the stale watch looks at the signal this batch was held under
	case ss.kick <- struct{}{}:
	default:
	}
	return b, until, refused
}

// endBatch ends b's hold and answers each of its sessions: with cancel
// when not nil (the proxy left the call), with the error b was woken
// with (NotMaster: the stale signal, the term's end), or as a KeepAlive
// whose hold ended: leadership proven by one quorum round begun within a
// tenth of a lease (shared, as every KeepAlive's is), then each session's
// reply bounded by that round's start plus a lease (reply).
func (ss *sessions) endBatch(b *heldBatch, cancel error) []batchEntryAnswer {
	out := make([]batchEntryAnswer, len(b.slots))
	ss.mu.Lock()
	if _, held := ss.held[b]; held {
		delete(ss.held, b)
		for _, s := range b.slots {
			if s.l.batch == b {
				s.l.batch = nil
			}
		}
	}
	err := b.err
	if cancel != nil {
		err = cancel
	}
	if err == nil {
		ss.wg.Add(1) // as finish: the replies are made before the term's end is waited out
	}
	ss.mu.Unlock()
	if err == nil {
		var proven time.Time
		if proven, err = ss.proveForLease(b.ctx); err == nil {
			for i, s := range b.slots {
				out[i].entry = s.entry
				out[i].resp, out[i].err = ss.reply(s.l, s.args(b.shared), b.arrived, proven)
			}
		}
		ss.wg.Done()
	}
	if err != nil {
		for i, s := range b.slots {
			out[i] = batchEntryAnswer{entry: s.entry, err: err}
		}
	}
	return out
}

// wakeHeldLocked ends the hold of every held batch (those held under the
// stale signal sig, if sig is not nil) with err. ss.mu is held.
func (ss *sessions) wakeHeldLocked(sig <-chan struct{}, err error) {
	for b := range ss.held {
		if sig == nil || b.stale == sig {
			b.wakeLocked(err)
		}
	}
}

// heldCountLocked returns how many sessions' KeepAlives are held in
// batches.
// ss.mu is held.
func (ss *sessions) heldCountLocked() int {
	n := 0
	for b := range ss.held {
		n += len(b.slots)
	}
	return n
}
