package master

import (
	"sync"
	"time"
)

// Denial lines in the audit stream are rationed per principal. The audit
// stream is on at the default log level, so without a ration a client that
// sends denied calls on purpose would make every replica that masters it
// write a line per call, as fast as it can send them, until the disk is
// full. Each principal may have auditDenialBurst denial lines at once and
// auditDenialsPerSecond a second after that; denials past the ration are
// counted, and the principal's next logged denial carries the count
// (not_logged_before) so that nothing is lost silently. ACL changes are
// always logged: they need write permission and go through Raft.
const (
	auditDenialsPerSecond = 10
	auditDenialBurst      = 200
	// auditPrincipals bounds the principals tracked; past it the idle
	// ones (full ration, nothing held back) are dropped.
	auditPrincipals = 10000
)

// auditRation is the per-principal ration of denial lines.
type auditRation struct {
	mu         sync.Mutex
	now        func() time.Time
	principals map[string]*auditBucket
	suppressed uint64 // denial lines not written, in all
}

type auditBucket struct {
	tokens float64
	last   time.Time
	held   uint64 // denials not logged since the last logged one
}

func newAuditRation(now func() time.Time) *auditRation {
	return &auditRation{now: now, principals: map[string]*auditBucket{}}
}

// admit reports whether a denial by principal may be logged now and, if
// so, how many of its denials were not logged before it.
func (r *auditRation) admit(principal string) (ok bool, heldBefore uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	b := r.principals[principal]
	if b == nil {
		if len(r.principals) >= auditPrincipals {
			r.dropIdleLocked(now)
		}
		b = &auditBucket{tokens: auditDenialBurst, last: now}
		r.principals[principal] = b
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(auditDenialBurst, b.tokens+d.Seconds()*auditDenialsPerSecond)
		b.last = now
	}
	if b.tokens < 1 {
		b.held++
		r.suppressed++
		return false, 0
	}
	b.tokens--
	heldBefore, b.held = b.held, 0
	return true, heldBefore
}

// dropIdleLocked forgets principals whose ration is full again and who
// have nothing held back; if none is idle, it forgets them all (a flood
// of distinct principals needs certificates from the cell's CA).
func (r *auditRation) dropIdleLocked(now time.Time) {
	for p, b := range r.principals {
		full := b.tokens+now.Sub(b.last).Seconds()*auditDenialsPerSecond >= auditDenialBurst
		if full && b.held == 0 {
			delete(r.principals, p)
		}
	}
	if len(r.principals) >= auditPrincipals {
		clear(r.principals)
	}
}

// Suppressed counts the denial lines not written because their principal
// was over its ration.
func (r *auditRation) Suppressed() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.suppressed
}
