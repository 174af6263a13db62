package fsm

// The payload of each command type: what applying it reads besides the
// envelope (Command). The msgpack tags are those of the version-1 flat
// command, so a field is spelled the same in both versions. Each type's
// field set is part of the log format: fields may be added (old entries
// decode them as zero), never renamed or reused.

// EpochArgs: a new master takes the next epoch; the entry is also its
// post-election barrier.
type EpochArgs struct{}

// CreateSessionArgs: a session is born, with the command's index as its id,
// the envelope's Principal and Client, and the identity its client
// declared: Host, PID and Program, each at most MaxIdentityLen bytes (a
// longer one is refused with KindBadRequest), all empty in entries
// written before they existed.
type CreateSessionArgs struct {
	Host    string `msgpack:"ho,omitempty"`
	PID     int64  `msgpack:"pi,omitempty"`
	Program string `msgpack:"pg,omitempty"`
}

// CloseSessionArgs: the envelope's Session ends, cleanly, by expiry or
// for idleness.
type CloseSessionArgs struct {
	// Expired: the session's lease ran out, so each lock it held stays
	// unavailable for its handle's lock-delay.
	Expired bool `msgpack:"x,omitempty"`
	// Idle: the master closes a session that made no call but KeepAlives
	// for its idle timeout. The close applies only if the session has no
	// open handle when the entry applies (else it is refused with
	// KindCanceled and changes nothing), so an idle close never takes a
	// lock, a wait or an ephemeral node: the master's view of idleness is
	// its memory, the state decides. Set, the command is of type
	// CmdIdleCloseSession, which older replicas do not know.
	Idle bool `msgpack:"id,omitempty"`
}

// OpenArgs: a handle is opened on Path, creating the node when the flags
// ask for it.
type OpenArgs struct {
	Path  string `msgpack:"p,omitempty"`
	Flags uint32 `msgpack:"f,omitempty"`
	// Contents are a created file's first contents.
	Contents  []byte `msgpack:"c,omitempty"`
	LockDelay int64  `msgpack:"ld,omitempty"` // nanoseconds
	EventMask uint32 `msgpack:"em,omitempty"`
	// Quota, when set, caps what a create may add to the namespace
	// (quota.go); without it the create is not capped.
	Quota *Quota `msgpack:"qu,omitempty"`
	// TTL (nanoseconds) makes a created file a TTL node (ttl.go); 0 for
	// none, and omitted then, so other Opens encode as before.
	TTL int64 `msgpack:"tl,omitempty"`
	// SemLimit makes a created file a counting semaphore of that many
	// permits (semaphore.go); 0 for none, and omitted then. Set, the
	// command is of type CmdOpenSemaphore.
	SemLimit uint32 `msgpack:"sl,omitempty"`
}

// CloseArgs: a handle of the envelope's session is closed.
type CloseArgs struct {
	Handle uint64 `msgpack:"h,omitempty"`
}

// SetContentsArgs: the contents of the handle's file are replaced, if its
// content generation is IfGen when HasIfGen is set.
type SetContentsArgs struct {
	Handle   uint64 `msgpack:"h,omitempty"`
	Contents []byte `msgpack:"c,omitempty"`
	IfGen    uint64 `msgpack:"ig,omitempty"`
	HasIfGen bool   `msgpack:"hi,omitempty"`
	// Quota, when set, caps how far the write may grow the cell's
	// contents (quota.go).
	Quota *Quota `msgpack:"qu,omitempty"`
	// Path is read only to name the file in a quota error's message
	// (results are replicated, so the message is state); the master
	// leaves it empty.
	Path string `msgpack:"p,omitempty"`
}

// DeleteArgs: the handle's node is deleted.
type DeleteArgs struct {
	Handle uint64 `msgpack:"h,omitempty"`
}

// AcquireArgs: the handle takes its node's lock in Mode, or, with Wait,
// queues for it.
type AcquireArgs struct {
	Handle uint64 `msgpack:"h,omitempty"`
	Mode   uint8  `msgpack:"m,omitempty"`
	Wait   bool   `msgpack:"w,omitempty"`
}

// ReleaseArgs: the handle lets go of its node's lock.
type ReleaseArgs struct {
	Handle uint64 `msgpack:"h,omitempty"`
}

// CancelWaitArgs: the handle's blocking acquire of request id WaitSeq is
// withdrawn (or its late grant undone).
type CancelWaitArgs struct {
	Handle  uint64 `msgpack:"h,omitempty"`
	WaitSeq uint64 `msgpack:"ws,omitempty"`
}

// GrantArgs: the hand-off of Path's lock, whose lock-delay has passed, is
// re-run.
type GrantArgs struct {
	Path string `msgpack:"p,omitempty"`
}

// CellKeyArgs: the cell's secret sequencer key, stored by the first
// master (the first key of at least 16 bytes wins).
type CellKeyArgs struct {
	Key []byte `msgpack:"c,omitempty"`
}

// SetACLArgs: the three ACL file names of the handle's node are replaced,
// if its ACL generation is IfGen when HasIfGen is set (as SetContentsArgs
// compares the content generation). With HasIfGen the command is of
// type CmdSetACLIfGen, which older replicas do not know; without, it is
// a CmdSetACL encoded as before the fields existed.
type SetACLArgs struct {
	Handle   uint64    `msgpack:"h,omitempty"`
	ACL      *ACLNames `msgpack:"acl,omitempty"`
	IfGen    uint64    `msgpack:"ig,omitempty"`
	HasIfGen bool      `msgpack:"hi,omitempty"`
}

// MembersSeedArgs: the member table and configured size are set, if they
// were never set before.
type MembersSeedArgs struct {
	Members        []MemberAddrs `msgpack:"mb,omitempty"`
	ConfiguredSize int           `msgpack:"cs,omitempty"`
}

// MemberPutArgs: members' addresses are recorded (added or replaced).
type MemberPutArgs struct {
	Members []MemberAddrs `msgpack:"mb,omitempty"`
}

// MemberRemoveArgs: members (by ID) leave the member table.
type MemberRemoveArgs struct {
	Members []MemberAddrs `msgpack:"mb,omitempty"`
}

// CmdType implementations tie each payload to its type.

// CmdType returns CmdEpoch.
func (*EpochArgs) CmdType() CmdType { return CmdEpoch }

// CmdType returns CmdCreateSession.
func (*CreateSessionArgs) CmdType() CmdType { return CmdCreateSession }

// CmdType returns CmdIdleCloseSession for the master's idle close,
// CmdCloseSession for any other.
func (p *CloseSessionArgs) CmdType() CmdType {
	if p.Idle {
		return CmdIdleCloseSession
	}
	return CmdCloseSession
}

// CmdType returns CmdOpenSemaphore for an open that creates a
// semaphore, CmdOpenLifetime for an open that asks for a TTL or a
// container, CmdOpenSequential for another sequential open, CmdOpen for
// any other.
func (p *OpenArgs) CmdType() CmdType {
	if p.SemLimit != 0 {
		return CmdOpenSemaphore
	}
	if p.TTL != 0 || p.Flags&FlagContainer != 0 {
		return CmdOpenLifetime
	}
	if p.Flags&FlagSequential != 0 {
		return CmdOpenSequential
	}
	return CmdOpen
}

// CmdType returns CmdClose.
func (*CloseArgs) CmdType() CmdType { return CmdClose }

// CmdType returns CmdSetContents.
func (*SetContentsArgs) CmdType() CmdType { return CmdSetContents }

// CmdType returns CmdDelete.
func (*DeleteArgs) CmdType() CmdType { return CmdDelete }

// CmdType returns CmdAcquire.
func (*AcquireArgs) CmdType() CmdType { return CmdAcquire }

// CmdType returns CmdRelease.
func (*ReleaseArgs) CmdType() CmdType { return CmdRelease }

// CmdType returns CmdCancelWait.
func (*CancelWaitArgs) CmdType() CmdType { return CmdCancelWait }

// CmdType returns CmdGrant.
func (*GrantArgs) CmdType() CmdType { return CmdGrant }

// CmdType returns CmdCellKey.
func (*CellKeyArgs) CmdType() CmdType { return CmdCellKey }

// CmdType returns CmdSetACLIfGen for a SetACL given a generation,
// CmdSetACL for any other.
func (p *SetACLArgs) CmdType() CmdType {
	if p.HasIfGen {
		return CmdSetACLIfGen
	}
	return CmdSetACL
}

// CmdType returns CmdMembersSeed.
func (*MembersSeedArgs) CmdType() CmdType { return CmdMembersSeed }

// CmdType returns CmdMemberPut.
func (*MemberPutArgs) CmdType() CmdType { return CmdMemberPut }

// CmdType returns CmdMemberRemove.
func (*MemberRemoveArgs) CmdType() CmdType { return CmdMemberRemove }

func (*EpochArgs) payload()         {}
func (*CreateSessionArgs) payload() {}
func (*CloseSessionArgs) payload()  {}
func (*OpenArgs) payload()          {}
func (*CloseArgs) payload()         {}
func (*SetContentsArgs) payload()   {}
func (*DeleteArgs) payload()        {}
func (*AcquireArgs) payload()       {}
func (*ReleaseArgs) payload()       {}
func (*CancelWaitArgs) payload()    {}
func (*GrantArgs) payload()         {}
func (*CellKeyArgs) payload()       {}
func (*SetACLArgs) payload()        {}
func (*MembersSeedArgs) payload()   {}
func (*MemberPutArgs) payload()     {}
func (*MemberRemoveArgs) payload()  {}

// newPayload returns an empty payload of type t to decode into; nil for
// a type this version does not know.
func newPayload(t CmdType) Payload {
	switch t {
	case CmdEpoch:
		return &EpochArgs{}
	case CmdCreateSession:
		return &CreateSessionArgs{}
	case CmdCloseSession, CmdIdleCloseSession:
		return &CloseSessionArgs{}
	case CmdOpen, CmdOpenSequential, CmdOpenLifetime, CmdOpenSemaphore:
		return &OpenArgs{}
	case CmdExpireTTL:
		return &ExpireTTLArgs{}
	case CmdClose:
		return &CloseArgs{}
	case CmdSetContents:
		return &SetContentsArgs{}
	case CmdDelete:
		return &DeleteArgs{}
	case CmdAcquire:
		return &AcquireArgs{}
	case CmdRelease:
		return &ReleaseArgs{}
	case CmdCancelWait:
		return &CancelWaitArgs{}
	case CmdGrant:
		return &GrantArgs{}
	case CmdCellKey:
		return &CellKeyArgs{}
	case CmdSetACL, CmdSetACLIfGen:
		return &SetACLArgs{}
	case CmdMembersSeed:
		return &MembersSeedArgs{}
	case CmdMemberPut:
		return &MemberPutArgs{}
	case CmdMemberRemove:
		return &MemberRemoveArgs{}
	case CmdBreakLock:
		return &BreakLockArgs{}
	case CmdBatch:
		return &BatchArgs{}
	case CmdNote:
		return &NoteArgs{}
	case CmdResumeSession:
		return &ResumeSessionArgs{}
	case CmdTxn:
		return &TxnArgs{}
	case CmdAcquireMulti:
		return &AcquireMultiArgs{}
	case CmdReleaseMulti:
		return &ReleaseMultiArgs{}
	case CmdReadReplicaPut:
		return &ReadReplicaPutArgs{}
	}
	return nil
}

// HandleOf returns the handle c's payload names, 0 for a type that names
// none.
func (c *Command) HandleOf() uint64 {
	switch p := c.Payload.(type) {
	case *CloseArgs:
		return p.Handle
	case *SetContentsArgs:
		return p.Handle
	case *DeleteArgs:
		return p.Handle
	case *AcquireArgs:
		return p.Handle
	case *ReleaseArgs:
		return p.Handle
	case *CancelWaitArgs:
		return p.Handle
	case *SetACLArgs:
		return p.Handle
	}
	return 0
}
