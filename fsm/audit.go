package fsm

import (
	"fmt"
	"strconv"
	"strings"

	"lockcell/audit"
)

// The audit trail is derived from the log (package audit): as the state
// machine applies a command that changes the cell, or is refused the
// change, it hands the Auditor one record, numbered by the command index
// and stamped with the command's time, so every replica writes the same
// records in the same order. A retried request that de-duplication
// answers from its first result was already recorded and is not again.

// Auditor receives the audit records of applied commands. *audit.Trail is
// one. Append and Gap are called with the state machine's lock held, so
// they must only buffer (the trail writes on its own, soon after); Sync
// before a snapshot.
type Auditor interface {
	Append(*audit.Record)
	Gap(through uint64)
	Sync() error
}

// SetAuditor installs the auditor of applied commands (nil removes it).
// Install it before the replica starts applying, or the trail misses
// what was applied before (it says so with a gap record after the next
// snapshot restore, not otherwise).
func (f *FSM) SetAuditor(a Auditor) {
	f.mu.Lock()
	f.auditor = a
	f.mu.Unlock()
}

// auditSubject is what a record says of the command's subject, taken
// before the command applies: a Delete removes the handle that names
// the node, a CloseSession the session that declared the identity.
type auditSubject struct {
	op   string // "" when the command is not audited
	name string
	sess *Session
}

// auditSubjectOf is the subject of c, or the zero subject when c changes
// nothing an operator audits (reads of handles, closing handles,
// withdrawing a wait, the cell key).
func (f *FSM) auditSubjectOf(c *Command) auditSubject {
	var s auditSubject
	handleName := func(h uint64) string {
		if hd := f.handles[h]; hd != nil {
			return hd.Path
		}
		return ""
	}
	switch p := c.Payload.(type) {
	case *EpochArgs:
		s.op = "epoch"
	case *CreateSessionArgs:
		s.op = "create_session"
	case *CloseSessionArgs:
		s.op = "close_session"
		switch {
		case p.Expired:
			s.op = "expire_session"
		case p.Idle:
			s.op = "idle_close_session"
		}
	case *OpenArgs:
		if p.Flags&FlagCreate == 0 {
			return s
		}
		s.op, s.name = "create", p.Path
	case *SetContentsArgs:
		s.op, s.name = "write", handleName(p.Handle)
	case *DeleteArgs:
		s.op, s.name = "delete", handleName(p.Handle)
	case *AcquireArgs:
		s.op, s.name = "acquire", handleName(p.Handle)
	case *ReleaseArgs:
		s.op, s.name = "release", handleName(p.Handle)
	case *GrantArgs:
		s.op, s.name = "grant", p.Path
	case *SetACLArgs:
		s.op, s.name = "set_acl", handleName(p.Handle)
	case *MembersSeedArgs:
		s.op = "member_seed"
	case *MemberPutArgs:
		s.op = "member_put"
	case *MemberRemoveArgs:
		s.op = "member_remove"
	case *ReadReplicaPutArgs:
		s.op = "read_replica_put"
	case *BreakLockArgs:
		s.op, s.name = "break_lock", p.Path
	case *ResumeSessionArgs:
		s.op = "resume_session"
	case *ExpireTTLArgs:
		s.op, s.name = "expire_ttl", p.Path
	case *AcquireMultiArgs:
		// One record for the group, under its first handle's name.
		s.op = "acquire_multi"
		if len(p.Handles) > 0 {
			s.name = handleName(p.Handles[0])
		}
	case *ReleaseMultiArgs:
		s.op = "release_multi"
		if len(p.Handles) > 0 {
			s.name = handleName(p.Handles[0])
		}
	case *TxnArgs:
		// One record for the whole transaction, under its first
		// operation's name (or its first check's, if it has none).
		s.op = "txn"
		if len(p.Ops) > 0 {
			s.name = p.Ops[0].Path
		} else if len(p.Checks) > 0 {
			s.name = p.Checks[0].Path
		}
	case *NoteArgs:
		s.op, s.name = p.Op, p.Name
		if p.Op == "" || p.Op == audit.OpGap || len(p.Op) > maxNoteLen || len(p.Name) > maxNoteLen {
			s.op, s.name = "note", "" // refused: its record must stay small
		}
	default:
		return s
	}
	if c.Session != 0 {
		s.sess = f.sessions[c.Session]
	}
	return s
}

// auditApplied hands the auditor the record of c, applied at index with
// result r (f.mu held).
func (f *FSM) auditApplied(index uint64, c *Command, s auditSubject, r *Result) {
	if s.op == "" {
		return
	}
	rec := &f.auditRecord // the trail encodes it before Append returns
	*rec = audit.Record{Index: index, Time: audit.TimeOf(c.Time), Op: s.op, Principal: c.Principal, Admin: c.Admin,
		Proxy: c.Proxy, Session: c.Session, Name: s.name, Result: "ok"}
	if id := s.sess; id != nil {
		rec.Client, rec.Host, rec.PID, rec.Program = id.Client, id.Host, id.PID, id.Program
		if rec.Principal == "" {
			rec.Principal = id.Principal // an expiry is the master's command about the session's principal
		}
	}
	if r.Err != nil {
		rec.Result, rec.Error = r.Err.Kind.Name(), r.Err.Msg
	}
	if r.Name != "" {
		rec.Name = r.Name // a sequential create: the name it made, not its prefix
	}
	rec.Detail = auditDetail(c, r)
	if p, ok := c.Payload.(*CreateSessionArgs); ok && r.Err == nil {
		// Only an accepted identity: a refused one may be oversized.
		rec.Session = r.Session
		rec.Client, rec.Host, rec.PID, rec.Program = c.Client, p.Host, p.PID, p.Program
	}
	f.auditor.Append(rec)
}

// auditDetail says in a few words what c did beyond its name.
func auditDetail(c *Command, r *Result) string {
	switch p := c.Payload.(type) {
	case *EpochArgs:
		if r.Err == nil {
			return "master epoch " + strconv.FormatUint(r.Epoch, 10)
		}
	case *OpenArgs:
		switch {
		case r.Err != nil:
		case r.Created:
			return "created"
		default:
			return "existed"
		}
	case *SetContentsArgs:
		d := fmt.Sprintf("%d bytes", len(p.Contents))
		if p.HasIfGen {
			d += fmt.Sprintf(", if generation %d", p.IfGen)
		}
		if r.Err == nil {
			d += fmt.Sprintf(", generation %d", r.Stat.ContentGen)
		}
		return d
	case *AcquireArgs:
		d := modeName(p.Mode)
		switch {
		case r.Granted:
			d += fmt.Sprintf(", granted, lock generation %d", r.LockGen)
		case r.Queued:
			d += ", queued"
		}
		return d
	case *SetACLArgs:
		if a := p.ACL; a != nil {
			d := fmt.Sprintf("read=%q write=%q change_acl=%q", a.Read, a.Write, a.ChangeACL)
			if p.HasIfGen {
				d += fmt.Sprintf(", if ACL generation %d", p.IfGen)
			}
			return d
		}
	case *MembersSeedArgs:
		return memberList(p.Members)
	case *MemberPutArgs:
		return memberList(p.Members)
	case *MemberRemoveArgs:
		return memberList(p.Members)
	case *ReadReplicaPutArgs:
		return memberList(p.Members)
	case *BreakLockArgs:
		d := fmt.Sprintf("%d holders freed", len(r.Broken))
		if p.Reason != "" {
			d += fmt.Sprintf(", reason %q", p.Reason)
		}
		return d
	case *NoteArgs:
		if len(p.Detail) <= maxNoteLen {
			return p.Detail
		}
	}
	return ""
}

func memberList(ms []MemberAddrs) string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return "members " + strings.Join(ids, ",")
}

// kindNames are the kinds' names in audit records: the wire's machine
// names of the codes the master maps them to.
var kindNames = map[Kind]string{
	KindNone: "ok", KindNotFound: "not_found", KindExists: "exists", KindNotDir: "not_dir", KindIsDir: "is_dir",
	KindNotEmpty: "not_empty", KindGenerationMismatch: "generation_mismatch", KindLockHeld: "lock_held",
	KindNotHeld: "not_held", KindHandleInvalid: "handle_invalid", KindSessionExpired: "session_expired",
	KindDuplicate: "duplicate", KindBadRequest: "bad_request", KindLockDelay: "lock_delay",
	KindPermission: "permission", KindCanceled: "canceled", KindStaleSequencer: "stale_sequencer",
	KindQuotaExceeded: "quota_exceeded",
}

// Name is the kind's machine name ("quota_exceeded"), as audit records
// give it.
func (k Kind) Name() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "kind_" + strconv.Itoa(int(k))
}

// NoteArgs: a mutation the cell makes outside the state machine (a
// backup taken) enters the audit trail; it changes no state. Op and Name
// are the record's, Detail says more.
type NoteArgs struct {
	Op     string `msgpack:"o,omitempty"`
	Name   string `msgpack:"n,omitempty"`
	Detail string `msgpack:"d,omitempty"`
}

// CmdType returns CmdNote.
func (*NoteArgs) CmdType() CmdType { return CmdNote }

func (*NoteArgs) payload() {}

// maxNoteLen bounds each field of a note, as the master writes them.
const maxNoteLen = 1024

// note applies a Note: nothing but its record, and a refusal of one that
// is not the admin's or is oversized (so the trail's lines stay small).
func (f *FSM) applyNote(c *Command, p *NoteArgs) *Result {
	if !c.Admin {
		return &Result{Err: errf(KindPermission, "only the cell's admin may add to the audit trail")}
	}
	if len(p.Op) > maxNoteLen || len(p.Name) > maxNoteLen || len(p.Detail) > maxNoteLen || p.Op == "" || p.Op == audit.OpGap {
		return &Result{Err: errf(KindBadRequest, "audit note: op must be 1 to %d bytes and not %q; name and detail at most %d", maxNoteLen, audit.OpGap, maxNoteLen)}
	}
	return &Result{}
}

// syncAudit makes the records of every entry applied so far durable. Raft
// calls Snapshot between entries, and the entries a snapshot covers are
// never replayed, so their records must be on disk before it is taken. A
// trail that cannot write does not stop the snapshot (the log would grow
// without end): it has stopped at its first error and says so to readers.
func (f *FSM) syncAudit() error {
	f.mu.RLock()
	a := f.auditor
	f.mu.RUnlock()
	if a == nil {
		return nil
	}
	if err := a.Sync(); err != nil {
		f.log.Error("the audit trail cannot write: it is incomplete from here on", "err", err)
	}
	return nil
}
