package replica

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/cell/wire/bound"
)

// CmdType is the first field of every replicated command. Numbers are
// append-only: a log written by one version is replayed by the next.
type CmdType uint8

// The replicated commands.
const (
	CmdEpoch         CmdType = 1  // a new master takes the next epoch; also its post-election barrier
	CmdCreateSession CmdType = 2  // a session is born; its id is the entry's index
	CmdCloseSession  CmdType = 3  // a session ends, cleanly or by expiry (Expired)
	CmdOpen          CmdType = 4  // a handle is opened, creating the node when asked
	CmdClose         CmdType = 5  // a handle is closed
	CmdSetContents   CmdType = 6  // a file's contents are replaced
	CmdDelete        CmdType = 7  // a node is deleted
	CmdAcquire       CmdType = 8  // a lock is taken, or the handle queues for it
	CmdRelease       CmdType = 9  // a lock is released and handed to the next waiters
	CmdCancelWait    CmdType = 10 // a blocking acquire is withdrawn (or its late grant undone)
	CmdGrant         CmdType = 11 // re-run hand-off of a lock whose lock-delay has passed
	CmdCellKey       CmdType = 12 // the first master stores the cell's secret sequencer key
	CmdSetACL        CmdType = 13 // a node's three ACL file names are replaced
	CmdMembersSeed   CmdType = 14 // the member table and configured size are set, if never set before
	CmdMemberPut     CmdType = 15 // a member's addresses are recorded (added or replaced)
	CmdMemberRemove  CmdType = 16 // a member leaves the member table
)

func (t CmdType) String() string {
	switch t {
	case CmdEpoch:
		return "Epoch"
	case CmdCreateSession:
		return "CreateSession"
	case CmdCloseSession:
		return "CloseSession"
	case CmdOpen:
		return "Open"
	case CmdClose:
		return "Close"
	case CmdSetContents:
		return "SetContents"
	case CmdDelete:
		return "Delete"
	case CmdAcquire:
		return "Acquire"
	case CmdRelease:
		return "Release"
	case CmdCancelWait:
		return "CancelWait"
	case CmdGrant:
		return "Grant"
	case CmdCellKey:
		return "CellKey"
	case CmdSetACL:
		return "SetACL"
	case CmdMembersSeed:
		return "MembersSeed"
	case CmdMemberPut:
		return "MemberPut"
	case CmdMemberRemove:
		return "MemberRemove"
	}
	return fmt.Sprintf("CmdType(%d)", uint8(t))
}

// commandVersion is the first byte of every encoded command. A replica that
// meets a version it does not know stops rather than diverge.
const commandVersion byte = 1

// MaxCommandSize bounds an encoded command before it is proposed: contents
// are at most 256 KiB, and a command is never allowed to grow a Raft entry
// past what every replica and snapshot can carry.
const MaxCommandSize = 512 * 1024

// Command is one replicated state change. It is a single flat struct (not
// one type per command) so that decoding goes into one concrete type; which
// fields matter depends on Type. Everything apply needs, including the
// proposing master's wall-clock time, travels inside the command, so apply
// is deterministic.
//
// Every command may carry Time, the request id (Session, Seq, Ack), the
// caller (Principal, Admin) and a Fence. Besides those, apply reads:
//
//	Epoch                       nothing
//	CreateSession               Client
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
// Results, error messages included, are replicated state (the
// de-duplication table is in every snapshot), so what apply reads and
// writes for each type is part of the log format.
type Command struct {
	Type CmdType `msgpack:"t"`
	// Time is the proposing master's wall clock, Unix nanoseconds.
	Time int64 `msgpack:"tm"`
	// Session, Seq and Ack form the request id: Seq is unique per
	// session; Ack says every Seq at or below it has completed.
	Session uint64 `msgpack:"s,omitempty"`
	Seq     uint64 `msgpack:"q,omitempty"`
	Ack     uint64 `msgpack:"a,omitempty"`

	Path      string `msgpack:"p,omitempty"`
	Handle    uint64 `msgpack:"h,omitempty"`
	Flags     uint32 `msgpack:"f,omitempty"`
	Contents  []byte `msgpack:"c,omitempty"`
	IfGen     uint64 `msgpack:"ig,omitempty"`
	HasIfGen  bool   `msgpack:"hi,omitempty"`
	Mode      uint8  `msgpack:"m,omitempty"`
	Wait      bool   `msgpack:"w,omitempty"`
	WaitSeq   uint64 `msgpack:"ws,omitempty"`
	LockDelay int64  `msgpack:"ld,omitempty"` // nanoseconds
	EventMask uint32 `msgpack:"em,omitempty"`
	Expired   bool   `msgpack:"x,omitempty"`
	// Principal is the authenticated caller of a client request (every
	// client request carries one); Admin says it is the cell's admin.
	Principal string `msgpack:"pr,omitempty"`
	Admin     bool   `msgpack:"ad,omitempty"`
	Client    string `msgpack:"cl,omitempty"`
	// ACL is the new ACL names of a SetACL.
	ACL *ACLNames `msgpack:"acl,omitempty"`
	// Fence, when set, makes the command apply only if the lock it names
	// is still held at that generation in that mode (SetSequencer).
	Fence *Fence `msgpack:"fc,omitempty"`
	// Quota, when set, caps what an Open that creates or a SetContents
	// may add to the namespace (quota.go). Entries without it are not
	// capped.
	Quota *Quota `msgpack:"qu,omitempty"`
	// Members are the member-table entries of a MembersSeed, MemberPut or
	// MemberRemove (members.go); ConfiguredSize is a MembersSeed's voter
	// count.
	Members        []MemberAddrs `msgpack:"mb,omitempty"`
	ConfiguredSize int           `msgpack:"cs,omitempty"`
}

// Fence is a sequencer's claim, checked atomically with a command.
type Fence struct {
	Path       string `msgpack:"p"`
	Mode       uint8  `msgpack:"m"`
	Generation uint64 `msgpack:"g"`
}

// Encode returns the versioned bytes of c, or ErrTooLarge when they exceed
// MaxCommandSize.
func (c *Command) Encode() ([]byte, error) {
	b, err := msgpack.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("replica: encode %s: %w", c.Type, err)
	}
	if len(b)+1 > MaxCommandSize {
		return nil, fmt.Errorf("%w: %s command of %d bytes exceeds %d", ErrTooLarge, c.Type, len(b)+1, MaxCommandSize)
	}
	out := make([]byte, 0, len(b)+1)
	out = append(out, commandVersion)
	return append(out, b...), nil
}

// DecodeCommand parses bytes written by Encode into a concrete Command.
// Its errors wrap ErrMalformedCommand.
func DecodeCommand(b []byte) (*Command, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrMalformedCommand)
	}
	if b[0] != commandVersion {
		return nil, fmt.Errorf("%w: command version %d is not %d", ErrMalformedCommand, b[0], commandVersion)
	}
	if err := bound.Check(b[1:]); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedCommand, err)
	}
	var c Command
	if err := msgpack.Unmarshal(b[1:], &c); err != nil {
		return nil, fmt.Errorf("%w: decode: %w", ErrMalformedCommand, err)
	}
	return &c, nil
}
