package fsm

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Version 1 of the command encoding: one flat msgpack map for every type,
// whose fields matter depending on Type. Entries of this version are in
// logs and backups written before version 2, so they decode for good, into
// the same Command a version-2 entry gives; nothing writes them any more.

// commandV1Fields is a version-1 command as it was encoded. Apply read, by
// type, besides the envelope fields (Time, request id, Principal, Admin,
// Client, Fence):
//
//	Epoch, CreateSession        nothing
//	CloseSession                Expired
//	Open                        Path, Flags, Contents, LockDelay, EventMask, Quota
//	Close, Delete, Release      Handle
//	SetContents                 Handle, Contents, IfGen, HasIfGen, Quota (Path: only in a quota error)
//	Acquire                     Handle, Mode, Wait
//	CancelWait                  Handle, WaitSeq
//	Grant                       Path
//	CellKey                     Contents
//	SetACL                      Handle, ACL
//	MembersSeed                 Members, ConfiguredSize
//	MemberPut, MemberRemove     Members
//
// Other fields a version-1 entry carries were never read, and are dropped.
type commandV1Fields struct {
	Type           CmdType       `msgpack:"t"`
	Time           int64         `msgpack:"tm"`
	Session        uint64        `msgpack:"s,omitempty"`
	Seq            uint64        `msgpack:"q,omitempty"`
	Ack            uint64        `msgpack:"a,omitempty"`
	Path           string        `msgpack:"p,omitempty"`
	Handle         uint64        `msgpack:"h,omitempty"`
	Flags          uint32        `msgpack:"f,omitempty"`
	Contents       []byte        `msgpack:"c,omitempty"`
	IfGen          uint64        `msgpack:"ig,omitempty"`
	HasIfGen       bool          `msgpack:"hi,omitempty"`
	Mode           uint8         `msgpack:"m,omitempty"`
	Wait           bool          `msgpack:"w,omitempty"`
	WaitSeq        uint64        `msgpack:"ws,omitempty"`
	LockDelay      int64         `msgpack:"ld,omitempty"`
	EventMask      uint32        `msgpack:"em,omitempty"`
	Expired        bool          `msgpack:"x,omitempty"`
	Principal      string        `msgpack:"pr,omitempty"`
	Admin          bool          `msgpack:"ad,omitempty"`
	Client         string        `msgpack:"cl,omitempty"`
	ACL            *ACLNames     `msgpack:"acl,omitempty"`
	Fence          *Fence        `msgpack:"fc,omitempty"`
	Quota          *Quota        `msgpack:"qu,omitempty"`
	Members        []MemberAddrs `msgpack:"mb,omitempty"`
	ConfiguredSize int           `msgpack:"cs,omitempty"`
}

// decodeV1 decodes a version-1 command (b without its version byte, already
// bound-checked).
func decodeV1(b []byte) (*Command, error) {
	var v commandV1Fields
	if err := msgpack.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: decode: %w", ErrMalformedCommand, err)
	}
	p := v.payload()
	if p == nil {
		return nil, fmt.Errorf("%w: unknown command type %d", ErrMalformedCommand, v.Type)
	}
	if t := p.CmdType(); t != v.Type {
		// A version-1 Open with FlagSequential: no master ever wrote
		// one (sequential opens came after version 1, with a type of
		// their own).
		return nil, fmt.Errorf("%w: a %s entry with a %s payload", ErrMalformedCommand, v.Type, t)
	}
	return &Command{Type: v.Type, Time: v.Time, Session: v.Session, Seq: v.Seq, Ack: v.Ack,
		Principal: v.Principal, Admin: v.Admin, Client: v.Client, Fence: v.Fence, Payload: p}, nil
}

// payload takes from v what its type's apply read; nil for an unknown type.
func (v *commandV1Fields) payload() Payload {
	switch v.Type {
	case CmdEpoch:
		return &EpochArgs{}
	case CmdCreateSession:
		return &CreateSessionArgs{}
	case CmdCloseSession:
		return &CloseSessionArgs{Expired: v.Expired}
	case CmdOpen:
		return &OpenArgs{Path: v.Path, Flags: v.Flags, Contents: v.Contents, LockDelay: v.LockDelay,
			EventMask: v.EventMask, Quota: v.Quota}
	case CmdClose:
		return &CloseArgs{Handle: v.Handle}
	case CmdSetContents:
		return &SetContentsArgs{Handle: v.Handle, Contents: v.Contents, IfGen: v.IfGen, HasIfGen: v.HasIfGen,
			Quota: v.Quota, Path: v.Path}
	case CmdDelete:
		return &DeleteArgs{Handle: v.Handle}
	case CmdAcquire:
		return &AcquireArgs{Handle: v.Handle, Mode: v.Mode, Wait: v.Wait}
	case CmdRelease:
		return &ReleaseArgs{Handle: v.Handle}
	case CmdCancelWait:
		return &CancelWaitArgs{Handle: v.Handle, WaitSeq: v.WaitSeq}
	case CmdGrant:
		return &GrantArgs{Path: v.Path}
	case CmdCellKey:
		return &CellKeyArgs{Key: v.Contents}
	case CmdSetACL:
		return &SetACLArgs{Handle: v.Handle, ACL: v.ACL}
	case CmdMembersSeed:
		return &MembersSeedArgs{Members: v.Members, ConfiguredSize: v.ConfiguredSize}
	case CmdMemberPut:
		return &MemberPutArgs{Members: v.Members}
	case CmdMemberRemove:
		return &MemberRemoveArgs{Members: v.Members}
	}
	return nil
}
