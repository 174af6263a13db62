package proxy

import (
	"time"

	"lockcell/wire"
)

// The keeper's side of the read cache (readcache.go): which clients the
// cache may serve, and the leases held back from the clients it served
// until the cache has reported them to the master. Each method takes the
// keeper's lock; the cache calls them holding its own (the cache's lock
// comes first), and the keeper never calls the cache holding its lock.

// gateLocked decides whether a lease a batch brought for s (end, with the
// batch answer's CacheSeq) waits before it is relayed: it does when the
// cache served s something as cacheable and either has not taken in its
// cache session's events up to cacheSeq (one may be an invalidation of a
// name s holds, granted before the lease was) or has reported s with an
// invalidation the master has not yet accepted. Held back, the lease is
// kept in s.gatedEnd for cacheProgress, with the cache session the batch
// named (cache; 0 once two held back named different ones). k.mu is held.
func (k *keeper) gateLocked(s *kaSession, end time.Time, cacheSeq, cache uint64) bool {
	if k.rc == nil || s.cached == 0 || (cacheSeq <= k.rc.seen.Load() && s.reporting == 0) {
		return false
	}
	if s.gatedEnd.IsZero() {
		s.gatedFrom = cache
	} else if s.gatedFrom != cache {
		s.gatedFrom = 0
	}
	if end.After(s.gatedEnd) {
		s.gatedEnd = end
	}
	s.gatedSeq = max(s.gatedSeq, cacheSeq)
	k.gated[s] = struct{}{}
	return true
}

// cacheProgress relays the leases held back (gateLocked) that may go now:
// the cache has taken in its session's events up to each one's CacheSeq,
// and no report of the session waits for the master.
func (k *keeper) cacheProgress() {
	seen := k.rc.seen.Load()
	now := time.Now()
	var out []answer
	k.mu.Lock()
	for s := range k.gated {
		if s.gone != nil || k.sess[s.id] != s {
			delete(k.gated, s)
			continue
		}
		if s.cached > 0 && (s.reporting > 0 || s.gatedSeq > seen) {
			continue
		}
		delete(k.gated, s)
		end, seq, from := s.gatedEnd, s.gatedSeq, s.gatedFrom
		s.gatedEnd, s.gatedSeq, s.gatedFrom = time.Time{}, 0, 0
		if !end.After(s.leaseEnd) {
			continue
		}
		s.leaseEnd, s.leaseSeq = end, seq
		s.fromCache = from != 0 && from == k.rc.sessionID.Load()
		if c := s.parked; c != nil && (len(s.events) > 0 || !s.told) && k.tellableLocked(s, now) {
			out = append(out, k.replyLocked(c, now))
		} else if c != nil {
			k.rearmLocked(c, now)
		}
	}
	k.mu.Unlock()
	deliver(out)
}

// serveCheck reports whether the client of session id (of principal, at
// incarnation) may be answered from the cache now: its session is one
// the proxy keeps, with a lease it may tell. cacheable, asked for by
// wantCache, says whether the answer may let the client cache it: its
// last lease came from a batch naming the current cache session (which
// the master then keeps alive past it), granted when every invalidation
// queued for the cache session before it had been taken in here (so
// any later one waits that lease out), it has acknowledged every event,
// and no report of it is outstanding. With count, a cacheable answer is
// counted (kaSession.cached) before it is given.
func (k *keeper) serveCheck(id, incarnation uint64, principal string, wantCache, count bool, now time.Time) (live, cacheable bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.sess[id]
	if s == nil || s.gone != nil || s.principal != principal || s.incarnation != incarnation || !k.tellableLocked(s, now) {
		return false, false
	}
	if wantCache && s.told && s.covered && s.fromCache && s.toldSeq <= k.rc.seen.Load() &&
		s.clientAck >= s.delivered && len(s.events) == 0 && s.reporting == 0 {
		if count {
			s.cached++
		}
		return true, true
	}
	return true, false
}

// reporting notes that ids are in a report of an invalidation to the
// master (their leases wait until it is accepted).
func (k *keeper) reporting(ids []uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		if s := k.sess[id]; s != nil {
			s.reporting++
		}
	}
}

// reported notes that the master accepted a report naming ids: each
// holds one name fewer from the cache, and its held lease may go.
func (k *keeper) reported(ids []uint64) {
	k.mu.Lock()
	for _, id := range ids {
		if s := k.sess[id]; s != nil {
			s.reporting = max(s.reporting-1, 0)
			s.cached = max(s.cached-1, 0)
		}
	}
	k.mu.Unlock()
	k.cacheProgress()
}

// dropServed forgets what the cache served every session: its cache
// session changed or a new master began (whose fail-over event every
// client purges its cache on), so nothing it served is reported again.
func (k *keeper) dropServed() {
	k.mu.Lock()
	for _, s := range k.sess {
		s.cached, s.reporting = 0, 0
		s.fromCache, s.covered = false, false
	}
	k.mu.Unlock()
	k.cacheProgress()
}

// keeps reports whether the proxy keeps session id's KeepAlives now.
func (k *keeper) keeps(id uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.sess[id]
	return s != nil && s.gone == nil
}

// isCacheSessionGone reports whether err refused a batch for its ended
// cache session.
func isCacheSessionGone(err error) bool {
	return wire.CodeOf(err) == wire.CodeSessionExpired
}
