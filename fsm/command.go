package fsm

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"

	"lockcell/codec"
)

// CmdType names a replicated command's type; every encoded command
// carries it, and its payload is that type's struct. Numbers are
// append-only: a log written by one version is replayed by the next.
type CmdType uint8

// The replicated commands.
const (
	CmdEpoch         CmdType = 1  // a new master takes the next epoch; also its post-election barrier
	CmdCreateSession CmdType = 2  // a session is born; its id is its command index (batch.go)
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
	CmdBreakLock     CmdType = 17 // the admin frees a lock from every holder (breaklock.go)
	CmdBatch         CmdType = 18 // commands applied in order, each as its own entry would be (batch.go)
	CmdNote          CmdType = 19 // the admin's mutation outside the state machine (a backup) enters the audit trail (audit.go)
	CmdResumeSession CmdType = 20 // a new process takes over a live session: a new incarnation (resume.go)
	// CmdOpenSequential is an Open with FlagSequential (sequential.go):
	// the same payload, OpenArgs, under a type of its own, so a replica
	// of a version without sequential names stops at it rather than
	// create the prefix itself and diverge.
	CmdOpenSequential CmdType = 21
	// CmdExpireTTL is the master's deletion of a TTL node whose TTL
	// passed without a write (ttl.go); it applies only if the node is
	// still the instance and content generation the master saw.
	CmdExpireTTL CmdType = 23
	// CmdOpenLifetime is an Open with a TTL or FlagContainer (ttl.go):
	// the same payload, OpenArgs, under a type of its own, so a replica
	// of a version without them stops at it rather than make a plain
	// node and diverge.
	CmdOpenLifetime CmdType = 24
	// CmdIdleCloseSession is the master's close of an idle session
	// (CloseSessionArgs.Idle, sessions.go): the same payload as
	// CloseSession under a type of its own, so a replica of a version
	// without idle closing stops at it rather than close a session that
	// has open handles (this version refuses that) and diverge.
	CmdIdleCloseSession CmdType = 25
	// CmdSetACLIfGen is a SetACL given the ACL generation it expects
	// (SetACLArgs.HasIfGen, acl.go): the same payload as SetACL under a
	// type of its own, so a replica of a version without the comparison
	// stops at it rather than replace the names unconditionally and
	// diverge. An unconditional SetACL keeps CmdSetACL and its bytes.
	CmdSetACLIfGen CmdType = 26
	// CmdOpenSemaphore is an Open that creates a counting semaphore
	// (OpenArgs.SemLimit, semaphore.go): the same payload under a type of
	// its own, so a replica of a version without semaphores stops at it
	// rather than make a plain lock and diverge.
	CmdOpenSemaphore CmdType = 27
	// CmdAcquireMulti takes the locks of several handles all at once or
	// queues for all of them in one place of each queue (semaphore.go).
	CmdAcquireMulti CmdType = 28
	// CmdReleaseMulti lets go of the locks of several handles in one
	// entry (semaphore.go).
	CmdReleaseMulti CmdType = 29
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
	case CmdBreakLock:
		return "BreakLock"
	case CmdBatch:
		return "Batch"
	case CmdNote:
		return "Note"
	case CmdResumeSession:
		return "ResumeSession"
	case CmdOpenSequential:
		return "OpenSequential"
	case CmdExpireTTL:
		return "ExpireTTL"
	case CmdOpenLifetime:
		return "OpenLifetime"
	case CmdIdleCloseSession:
		return "IdleCloseSession"
	case CmdSetACLIfGen:
		return "SetACLIfGen"
	case CmdTxn:
		return "Txn"
	case CmdOpenSemaphore:
		return "OpenSemaphore"
	case CmdAcquireMulti:
		return "AcquireMulti"
	case CmdReleaseMulti:
		return "ReleaseMulti"
	case CmdReadReplicaPut:
		return "ReadReplicaPut"
	}
	return fmt.Sprintf("CmdType(%d)", uint8(t))
}

// The first byte of every encoded command is its format version. A replica
// that meets a version it does not know stops rather than diverge.
//
// Version 1 (command_v1.go) is one flat msgpack map whose fields depend on
// the type; version 2, written since, is a two-element msgpack array: the
// envelope map (type, time, request id, caller, fence), then the payload
// map of that type's own struct. A version-1 entry's first byte is 0x01,
// so the two can never be mistaken for each other; both are decoded into
// the same Command and apply alike.
const (
	commandV1      byte = 1
	commandVersion byte = 2 // what Encode writes
)

// MaxCommandSize bounds an encoded command before it is proposed: contents
// are at most 256 KiB, and a command is never allowed to grow a Raft entry
// past what every replica and snapshot can carry.
const MaxCommandSize = 512 * 1024

// Command is one replicated state change: an envelope that every command
// has, and a Payload, the type's own struct, holding only what that type
// reads. Everything apply needs, including the proposing master's
// wall-clock time, travels inside the command, so apply is deterministic.
//
// Results, error messages included, are replicated state (the
// de-duplication table is in every snapshot), so what apply reads and
// writes for each type is part of the log format.
//
// A batch of commands in one entry (CmdBatch, batch.go) is a command too:
// its payload holds the other commands' encodings, each with its own
// envelope.
type Command struct {
	// Type is Payload's command type. Encode fills it in (a literal needs
	// only Payload) and refuses a Type that disagrees with Payload;
	// DecodeCommand always sets it.
	Type CmdType
	// Time is the proposing master's wall clock, Unix nanoseconds.
	Time int64
	// Session, Seq and Ack form the request id: Seq is unique per
	// session; Ack says every Seq at or below it has completed. Commands
	// with no Seq (the master's own) are not de-duplicated. Session
	// alone names the session a CloseSession ends.
	Session uint64
	Seq     uint64
	Ack     uint64
	// Principal is the authenticated caller of a client request (every
	// client request carries one; the master's own commands none); Admin
	// says it is the cell's admin.
	Principal string
	Admin     bool
	// Proxy is the principal of the trusted proxy a client request came
	// through (Principal is then the proxy's client's), for the audit
	// trail alone: apply never reads it otherwise, so an entry carrying
	// it changes the state exactly as the same entry without it.
	Proxy string
	// Client is the client's name, recorded by CreateSession.
	Client string
	// Fence, when set, makes the command apply only if the lock it names
	// is still held at that generation in that mode (SetSequencer).
	Fence *Fence
	// Incarnation is the incarnation of Session the client request speaks
	// for (0 until the session is first resumed): a client request (one
	// with a Principal) of an incarnation that is not the session's
	// current one is refused, so nothing the process that held the
	// session before a ResumeSession sent applies after it (resume.go).
	Incarnation uint64
	// Payload is what the command does: one of the *Args types.
	Payload Payload
}

// Payload is the part of a Command its type owns. Only this package's
// *Args types implement it, one per CmdType.
type Payload interface {
	// CmdType is the command type the payload belongs to.
	CmdType() CmdType
	payload()
}

// Fence is a sequencer's claim, checked atomically with a command.
type Fence struct {
	Path       string `msgpack:"p"`
	Mode       uint8  `msgpack:"m"`
	Generation uint64 `msgpack:"g"`
}

// envelope is the first element of a version-2 command. Its tags are
// version 1's, so a field means the same in both.
type envelope struct {
	Type      CmdType `msgpack:"t"`
	Time      int64   `msgpack:"tm,omitempty"`
	Session   uint64  `msgpack:"s,omitempty"`
	Seq       uint64  `msgpack:"q,omitempty"`
	Ack       uint64  `msgpack:"a,omitempty"`
	Principal string  `msgpack:"pr,omitempty"`
	Admin     bool    `msgpack:"ad,omitempty"`
	Client    string  `msgpack:"cl,omitempty"`
	Fence     *Fence  `msgpack:"fc,omitempty"`
	// Incarnation is omitted while 0: entries of sessions never resumed
	// encode as they did before it existed.
	Incarnation uint64 `msgpack:"in,omitempty"`
	// Proxy is omitted while empty: entries of direct calls encode as
	// they did before it existed, and a replica of a version without it
	// decodes an entry that has it (msgpack passes over a map key the
	// struct lacks) to the same state, only without the proxy in its
	// audit record.
	Proxy string `msgpack:"px,omitempty"`
}

// typeOf checks that c's Type agrees with its Payload and returns it.
func (c *Command) typeOf() (CmdType, error) {
	if c.Payload == nil {
		return 0, fmt.Errorf("%w: %s command has no payload", ErrMalformedCommand, c.Type)
	}
	t := c.Payload.CmdType()
	if c.Type != 0 && c.Type != t {
		return 0, fmt.Errorf("%w: Type %s with a %s payload", ErrMalformedCommand, c.Type, t)
	}
	return t, nil
}

var (
	_ msgpack.CustomEncoder = (*Command)(nil)
	_ msgpack.CustomDecoder = (*Command)(nil)
)

// EncodeMsgpack writes c in the version-2 form (without the version
// byte): [envelope, payload].
func (c *Command) EncodeMsgpack(enc *msgpack.Encoder) error {
	t, err := c.typeOf()
	if err != nil {
		return err
	}
	if err := enc.EncodeArrayLen(2); err != nil {
		return err
	}
	if err := enc.Encode(&envelope{Type: t, Time: c.Time, Session: c.Session, Seq: c.Seq, Ack: c.Ack,
		Principal: c.Principal, Admin: c.Admin, Client: c.Client, Fence: c.Fence, Incarnation: c.Incarnation,
		Proxy: c.Proxy}); err != nil {
		return err
	}
	return enc.Encode(c.Payload)
}

// DecodeMsgpack reads what EncodeMsgpack wrote. A type this version does
// not know is an error: its payload cannot be read.
func (c *Command) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if n != 2 {
		return fmt.Errorf("command is an array of %d, not 2", n)
	}
	// A pooled envelope, zeroed before and after: decoding into a used
	// one would reuse its Fence, which an earlier command holds.
	e := envelopes.Get().(*envelope)
	defer func() {
		*e = envelope{}
		envelopes.Put(e)
	}()
	*e = envelope{}
	if err := dec.Decode(e); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	p := newPayload(e.Type)
	if p == nil {
		return fmt.Errorf("unknown command type %d", e.Type)
	}
	if err := dec.Decode(p); err != nil {
		return fmt.Errorf("%s payload: %w", e.Type, err)
	}
	if t := p.CmdType(); t != e.Type {
		// An Open whose flags say another type than its entry's: no
		// master writes one, and applying it would depend on which of
		// the two a replica believed.
		return fmt.Errorf("a %s entry with a %s payload", e.Type, t)
	}
	*c = Command{Type: e.Type, Time: e.Time, Session: e.Session, Seq: e.Seq, Ack: e.Ack,
		Principal: e.Principal, Admin: e.Admin, Client: e.Client, Fence: e.Fence, Incarnation: e.Incarnation,
		Proxy: e.Proxy, Payload: p}
	return nil
}

// Encode returns the versioned bytes of c (version 2), or ErrTooLarge
// when they exceed MaxCommandSize. It sets c.Type from c.Payload, and
// fails (ErrMalformedCommand) when c has no payload or a Type that
// disagrees with it.
func (c *Command) Encode() ([]byte, error) {
	t, err := c.typeOf()
	if err != nil {
		return nil, err
	}
	c.Type = t
	buf := cmdBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledCmdBuffer {
			buf.Reset()
			cmdBuffers.Put(buf)
		}
	}()
	buf.Reset()
	buf.WriteByte(commandVersion)
	enc := msgpack.GetEncoder()
	enc.Reset(buf)
	err = c.encodeByHand(enc, t) // what enc.Encode(c) writes (cmdenc.go)
	msgpack.PutEncoder(enc)
	if err != nil {
		return nil, fmt.Errorf("replica: encode %s: %w", c.Type, err)
	}
	if buf.Len() > MaxCommandSize {
		return nil, fmt.Errorf("%w: %s command of %d bytes exceeds %d", ErrTooLarge, c.Type, buf.Len(), MaxCommandSize)
	}
	// A copy at its exact size: the buffer goes back to the pool, and
	// the entry is kept by Raft.
	return bytes.Clone(buf.Bytes()), nil
}

// DecodeCommand parses bytes written by Encode, of either version, into a
// Command with its typed payload. Its errors wrap ErrMalformedCommand.
func DecodeCommand(b []byte) (*Command, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrMalformedCommand)
	}
	if b[0] != commandV1 && b[0] != commandVersion {
		return nil, fmt.Errorf("%w: command version %d is neither %d nor %d", ErrMalformedCommand, b[0], commandV1, commandVersion)
	}
	if err := codec.CheckBounds(b[1:]); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedCommand, err)
	}
	if b[0] == commandV1 {
		return decodeV1(b[1:])
	}
	// A pooled decoder: decoding an entry allocates no decoder or reader
	// (what msgpack.Unmarshal did besides the decoding). Nothing decoded
	// aliases the entry.
	c := new(Command)
	if err := codec.DecodeChecked(b[1:], c); err != nil {
		return nil, fmt.Errorf("%w: decode: %w", ErrMalformedCommand, err)
	}
	return c, nil
}

// envelopes are DecodeMsgpack's scratch: a local envelope would escape
// to the heap through the decoder.
var envelopes = sync.Pool{New: func() any { return new(envelope) }}
