package master

import (
	"context"
	"sync"
	"time"

	"lockcell/fsm"
	"lockcell/wire"
)

// TTL nodes (docs/spec.md#ttl-and-container-nodes): the master is the part
// that notices a TTL has passed, on its clock, and proposes the deletion;
// the state machine decides it from replicated state (fsm/ttl.go).
//
// The deadlines are not the master's own memory: every replica keeps the
// TTL nodes in a heap by MTime+TTL (fsm's ttlIndex, one entry per TTL
// node, so bounded by the node quotas), and ttlLoop asks it what is due.
// A new master thus deletes every node whose mtime+TTL has passed on its
// own clock, never later than one scan period after, and never never.

// ttlScanEvery is how often the master looks for due TTL nodes at most,
// and ttlScanBatch how many it expires per look: a TTL node is deleted
// within about ttlScanEvery of its deadline (under MinTTL, so a TTL is
// never mostly scan delay), and a mass expiry is spread over scans
// rather than proposed at once.
//
// ttlInFlight is how many of a scan's expiries are proposed at once, so
// the log commits them in groups: proposed one after another, each
// waiting for its own commit, the expiries of a sustained churn of
// short-TTL files (about 120 a second from one principal at its write
// ration) fell behind on a loaded machine until files outlived their TTL
// by 10 s.
const (
	ttlScanEvery = 100 * time.Millisecond
	ttlScanBatch = 256
	ttlInFlight  = 32
)

// checkLifetime checks an Open's TTL and container flag before anything
// is proposed, and returns the TTL. The state machine checks them again
// (apply must not trust the master's checks of a replayed entry).
func checkLifetime(req *wire.OpenRequest) (time.Duration, error) {
	hasTTL := req.Flags&wire.OpenTTL != 0
	container := req.Flags&wire.OpenContainer != 0
	if hasTTL != (req.TTLMillis != 0) {
		return 0, wire.Errorf(wire.CodeBadRequest, "%s: the TTL flag and a TTL go together", req.Path)
	}
	if !hasTTL && !container {
		return 0, nil
	}
	if req.Flags&wire.OpenCreate == 0 {
		return 0, wire.Errorf(wire.CodeBadRequest, "%s: a TTL or container open needs the create flag", req.Path)
	}
	if req.Flags&wire.OpenEphemeral != 0 {
		return 0, wire.Errorf(wire.CodeBadRequest, "%s: an ephemeral node takes no TTL and is no container", req.Path)
	}
	if container && req.Flags&wire.OpenDirectory == 0 {
		return 0, wire.Errorf(wire.CodeBadRequest, "%s: only a directory can be a container", req.Path)
	}
	if !hasTTL {
		return 0, nil
	}
	if req.Flags&wire.OpenDirectory != 0 {
		return 0, wire.Errorf(wire.CodeBadRequest, "%s: only a file takes a TTL", req.Path)
	}
	if req.TTLMillis < wire.MinTTL.Milliseconds() || req.TTLMillis > wire.MaxTTL.Milliseconds() {
		return 0, wire.Errorf(wire.CodeBadRequest, "%s: TTL %dms is outside %v to %v", req.Path, req.TTLMillis, wire.MinTTL, wire.MaxTTL)
	}
	return time.Duration(req.TTLMillis) * time.Millisecond, nil
}

// ttlLoop proposes the deletion of each TTL node whose deadline has
// passed on the master's clock, for as long as this term of service
// lasts. Each proposal names the instance and generation read here, so
// a write applied in between wins; a refused or failed proposal is
// simply read again from the state on the next scan.
func (s *Server) ttlLoop(stop <-chan struct{}) {
	defer s.wg.Done()
	for {
		tick, stopTick := after(s.cfg.Clock, ttlScanEvery)
		select {
		case <-stop:
			stopTick()
			return
		case <-tick:
		}
		now := s.now()
		var due []fsm.TTLExpiry
		s.read(func(v fsm.View) { due, _ = v.DueTTLs(now, ttlScanBatch) })
		// Each expiry names its own node, instance and generation, so
		// they apply in any order; the scan's goroutines end before the
		// next scan (or the loop) starts.
		slots := make(chan struct{}, ttlInFlight)
		var wg sync.WaitGroup
	scan:
		for _, d := range due {
			select {
			case slots <- struct{}{}:
			case <-stop:
				break scan
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				s.expireTTL(stop, d)
			}()
		}
		wg.Wait()
		select {
		case <-stop:
			return
		default:
		}
	}
}

// expireTTL proposes the deletion of the TTL node d names, as found due.
func (s *Server) expireTTL(stop <-chan struct{}, d fsm.TTLExpiry) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := s.w.applyInvalidating(ctx, stop, &fsm.Command{Time: s.now(),
		Payload: &fsm.ExpireTTLArgs{Path: d.Path, Instance: d.Instance, Gen: d.Gen}})
	switch {
	case err != nil:
		s.log.Warn("TTL expiry not applied; will retry", "path", d.Path, "err", err)
	case res.Err != nil:
		s.log.Debug("TTL expiry refused", "path", d.Path, "err", res.Err)
	default:
		// Debug: a churn of short-TTL files makes hundreds a second, and
		// the audit trail records each (expire_ttl).
		s.log.Debug("TTL node expired", "path", d.Path)
	}
}
