package master

import (
	"bytes"
	"testing"

	"lockcell/fsm"
	"lockcell/wire"
)

// The state machine's refusal of an old incarnation's request and the
// master's own begin alike, with what clients look for.
func TestSessionMovedMessage(t *testing.T) {
	if fsm.SessionMovedMsg != wire.SessionMovedMsg {
		t.Fatalf("replica says %q, wire %q", fsm.SessionMovedMsg, wire.SessionMovedMsg)
	}
	if err := toWire(movedErr(7)); !wire.IsSessionMoved(err) || wire.CodeOf(err) != wire.CodeSessionExpired {
		t.Fatalf("master's moved error %v", err)
	}
	re := &fsm.Error{Kind: fsm.KindSessionExpired, Msg: fsm.SessionMovedMsg + ": session 7 was resumed"}
	if err := toWire(re); !wire.IsSessionMoved(err) {
		t.Fatalf("the state machine's refusal, on the wire: %v", err)
	}
}

// A resume secret binds the session, the principal and the cell, under
// the cell key; without a key there is none.
func TestResumeSecret(t *testing.T) {
	key := bytes.Repeat([]byte{9}, 32)
	s := ResumeSecret(key, "c", 5, "alice")
	if len(s) != wire.ResumeSecretSize {
		t.Fatalf("secret of %d bytes", len(s))
	}
	if !bytes.Equal(s, ResumeSecret(key, "c", 5, "alice")) {
		t.Fatal("not deterministic: another master would not accept it")
	}
	for what, other := range map[string][]byte{
		"session": ResumeSecret(key, "c", 6, "alice"), "principal": ResumeSecret(key, "c", 5, "bob"),
		"cell": ResumeSecret(key, "d", 5, "alice"), "key": ResumeSecret(bytes.Repeat([]byte{8}, 32), "c", 5, "alice"),
		"split": ResumeSecret(key, "ca", 5, "lice"),
	} {
		if bytes.Equal(s, other) {
			t.Errorf("another %s gives the same secret", what)
		}
	}
	if ResumeSecret(nil, "c", 5, "alice") != nil {
		t.Fatal("a secret without a cell key")
	}
}
