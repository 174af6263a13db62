package master

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"

	"lockcell/fsm"
	"lockcell/wire"
)

// Resuming a session (wire.MethodResumeSession): a new process of the
// session's principal, holding the session's secret, takes the session
// over within its lease, with its handles and locks.
//
// The secret is never stored: it is an HMAC of the session's id, the
// cell and the principal under a key derived from the cell's sequencer
// key, which every master shares through the replicated state. Any
// master can therefore hand it out (CreateSession) and check it
// (ResumeSession), also after a fail-over, and a backup or a snapshot
// holds no more than it held before. Binding the principal in means a
// stolen ticket is useless to another identity, and a wrong secret and
// another principal's ticket get the same answer, CodeUnknownSession,
// whether the session exists or not.

// resumeKeyLabel separates the resume key from the sequencer key it is
// derived from: a resume secret is never a valid sequencer tag, and the
// other way round.
const resumeKeyLabel = "lockcell session resume key v1"

// ResumeSecret returns the secret of session id of principal in cell,
// under the cell's sequencer key (wire.ResumeSecretSize bytes); nil when
// the cell has no key yet.
func ResumeSecret(cellKey []byte, cell string, id uint64, principal string) []byte {
	if len(cellKey) == 0 {
		return nil
	}
	k := hmac.New(sha256.New, cellKey)
	k.Write([]byte(resumeKeyLabel))
	m := hmac.New(sha256.New, k.Sum(nil))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], id)
	// Lengths first, so no two (cell, principal) pairs write the same
	// bytes.
	var n [8]byte
	binary.BigEndian.PutUint32(n[:4], uint32(len(cell)))
	binary.BigEndian.PutUint32(n[4:], uint32(len(principal)))
	m.Write(n[:])
	m.Write([]byte(cell))
	m.Write(b[:])
	m.Write([]byte(principal))
	return m.Sum(nil)
}

// sessionSecret is the secret of session id of the calling principal.
func (e *sessionEndpoint) sessionSecret(c *call, id uint64) []byte {
	var key []byte
	e.r.read(func(v fsm.View) { key = v.CellKey() })
	return ResumeSecret(key, e.cfg.Cell, id, c.caller.Principal)
}

// resumeSession checks the caller's secret, proposes the new incarnation
// and answers with a fresh lease and the session's open handles. The
// sessions part (observe) has by then closed the old process's lease and
// answered its parked KeepAlive with the session-moved error.
func (e *sessionEndpoint) resumeSession(ctx context.Context, c *call, req *wire.ResumeSessionRequest) (*wire.ResumeSessionResponse, error) {
	want := e.sessionSecret(c, req.Session)
	if req.Session == 0 || len(want) == 0 || !hmac.Equal(want, req.Secret) {
		err := wire.Errorf(wire.CodeUnknownSession, "no session %d with that secret for principal %q", req.Session, c.caller.Principal)
		e.auditResume(c, req.Session, err)
		return nil, err
	}
	// From here on the caller has proven it holds the secret: it may
	// learn that the session has ended.
	// The command's session, and the audit log's: on a copy of the
	// header, which the transport keeps counting the call under as it
	// arrived (session 0).
	h := *c.h
	h.Session = req.Session
	c.h = &h
	res, err := e.w.apply(ctx, c, commandOf(fsm.ResumeSessionArgs{}))
	if err != nil {
		e.auditResume(c, req.Session, err)
		return nil, err
	}
	e.sess.created(req.Session, c.caller.Conn)
	out := &wire.ResumeSessionResponse{Session: req.Session, Epoch: c.epoch, LeaseMillis: e.cfg.LeaseTTL.Milliseconds(),
		Incarnation: res.Incarnation, NextSeq: res.NextSeq}
	e.r.read(func(v fsm.View) {
		hs, more := v.SessionOpenHandles(req.Session, wire.MaxResumeHandles)
		out.Truncated = more
		for _, h := range hs {
			out.Handles = append(out.Handles, wire.ResumedHandle{Handle: h.Handle.ID, Path: h.Handle.Path,
				Instance: h.Handle.Instance, Flags: h.Handle.Flags, EventMask: h.Handle.EventMask,
				LockMode: h.LockMode, LockGen: h.LockGen})
		}
	})
	e.auditResume(c, req.Session, nil)
	return out, nil
}

// auditResume puts a resume, taken or refused, on the audit stream: a
// session changing hands is what an operator looks for after the fact
// (the replicated trail has the ones that applied, as resume_session).
func (e *sessionEndpoint) auditResume(c *call, session uint64, err error) {
	result := "ok"
	if err != nil {
		result = wire.CodeOf(toWire(err)).String()
		if ok, _ := e.auditRation.admit(c.caller.Principal); !ok {
			return
		}
	}
	e.cfg.Audit.Info("audit", "principal", c.caller.Principal, "op", wire.MethodResumeSession.String(),
		"session", session, "result", result)
}

// movedSince reports whether the call's session has been resumed since
// the incarnation its client named: the state says another is current.
// (It names the session rather than reading the call's header: a parked
// KeepAlive's header may have been reused by its stream.)
func (s *parts) movedSince(session, incarnation uint64) bool {
	moved := false
	s.read(func(v fsm.View) {
		_, current, ok := v.SessionResumeInfo(session)
		moved = ok && current != incarnation
	})
	return moved
}

// checkIncarnation refuses a call of a session's earlier incarnation:
// the process that held the session before another resumed it.
func checkIncarnation(h *wire.Header, current uint64) error {
	if h.Incarnation != current {
		return movedErr(h.Session)
	}
	return nil
}

// movedErr answers a call of a session's earlier incarnation.
func movedErr(session uint64) error {
	return wire.Errorf(wire.CodeSessionExpired, "%s: session %d was resumed by another process", wire.SessionMovedMsg, session)
}
