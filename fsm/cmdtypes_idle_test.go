package fsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// The bytes of one idle close (command type 25) and one SetACL given a
// generation (type 26), written once and committed, as the sequential
// open's entry is: the strings, not the code that made them, are the
// record, so a change to how either encodes fails here rather than in a
// rolling upgrade. TestGoldenIdleAndACLEntries -v logs what today's code
// writes.
const (
	// idleCloseEntryV2 is Command{Time: fsmtBase, Session: 9, Payload:
	// &CloseSessionArgs{Idle: true}}.Encode().
	idleCloseEntryV2 = "029283a174cc19a2746dd317979cfe362a0000a173cf000000000000000981a26964c3"
	// setACLIfGenEntryV2 is Command{Time: fsmtBase, Session: 2, Seq: 7,
	// Ack: 6, Principal: "p", Payload: &SetACLArgs{Handle: 3, ACL:
	// &ACLNames{Read: "r", Write: "w", ChangeACL: "c"}, IfGen: 12,
	// HasIfGen: true}}.Encode().
	setACLIfGenEntryV2 = "029286a174cc1aa2746dd317979cfe362a0000a173cf0000000000000002a171cf0000000000000007a161cf0000000000000006a27072a17084a168cf0000000000000003a361636c83a172a172a177a177a163a163a26967cf000000000000000ca26869c3"
)

func goldenIdleAndACLCommands() (idle, cas, plain Command) {
	idle = Command{Time: fsmtBase, Session: 9, Payload: &CloseSessionArgs{Idle: true}}
	cas = Command{Time: fsmtBase, Session: 2, Seq: 7, Ack: 6, Principal: "p",
		Payload: &SetACLArgs{Handle: 3, ACL: &ACLNames{Read: "r", Write: "w", ChangeACL: "c"}, IfGen: 12, HasIfGen: true}}
	plain = Command{Time: fsmtBase, Session: 2, Seq: 7, Ack: 6, Principal: "p",
		Payload: &SetACLArgs{Handle: 3, ACL: &ACLNames{Read: "r", Write: "w", ChangeACL: "c"}}}
	return
}

// TestGoldenIdleAndACLEntries: the idle close is command type 25 and the
// conditional SetACL type 26, so a replica of a version without them
// stops at the entry (an unknown type) instead of applying it
// unconditionally; their committed bytes decode and re-encode to
// themselves; an unconditional SetACL and a client's or expiry's
// CloseSession keep their old types.
func TestGoldenIdleAndACLEntries(t *testing.T) {
	idle, cas, plain := goldenIdleAndACLCommands()
	for _, g := range []struct {
		c    Command
		hex  string
		want CmdType
	}{{idle, idleCloseEntryV2, CmdIdleCloseSession}, {cas, setACLIfGenEntryV2, CmdSetACLIfGen}} {
		b, err := g.c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s entry: %s", g.want, hex.EncodeToString(b))
		if g.c.Type != g.want {
			t.Fatalf("encodes as type %s, want %s", g.c.Type, g.want)
		}
		d, golden := goldenEntry(t, g.hex, g.want)
		if !bytes.Equal(b, golden) {
			t.Errorf("%s encodes to %x today, the committed entry is %x", g.want, b, golden)
		}
		switch p := d.Payload.(type) {
		case *CloseSessionArgs:
			if !p.Idle || p.Expired || d.Session != 9 {
				t.Fatalf("idle close decoded as %+v %+v", d, p)
			}
		case *SetACLArgs:
			if !p.HasIfGen || p.IfGen != 12 || p.Handle != 3 || *p.ACL != (ACLNames{Read: "r", Write: "w", ChangeACL: "c"}) {
				t.Fatalf("conditional SetACL decoded as %+v %+v", d, p)
			}
		}
	}
	if _, err := plain.Encode(); err != nil || plain.Type != CmdSetACL {
		t.Fatalf("an unconditional SetACL encodes as %s (%v)", plain.Type, err)
	}
	for _, p := range []*CloseSessionArgs{{}, {Expired: true}} {
		c := Command{Session: 9, Payload: p}
		if _, err := c.Encode(); err != nil || c.Type != CmdCloseSession {
			t.Fatalf("%+v encodes as %s (%v)", p, c.Type, err)
		}
	}

	// An entry whose type and payload disagree is malformed: applying it
	// would depend on which of the two a replica believed.
	mismatch := func(typ CmdType, payload map[string]any) []byte {
		b, err := msgpack.Marshal([]any{map[string]any{"t": typ}, payload})
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{commandVersion}, b...)
	}
	for name, b := range map[string][]byte{
		"CloseSession with Idle":       mismatch(CmdCloseSession, map[string]any{"id": true}),
		"IdleCloseSession without it":  mismatch(CmdIdleCloseSession, map[string]any{}),
		"SetACL with HasIfGen":         mismatch(CmdSetACL, map[string]any{"h": 3, "ig": 4, "hi": true}),
		"SetACLIfGen without HasIfGen": mismatch(CmdSetACLIfGen, map[string]any{"h": 3, "ig": 4}),
	} {
		if _, err := DecodeCommand(b); !errors.Is(err, ErrMalformedCommand) {
			t.Errorf("%s: %v, want ErrMalformedCommand", name, err)
		}
	}
}
