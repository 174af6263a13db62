package client_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"lockcell/client"
	"lockcell/sequencer"
)

// A semaphore holder's sequencer shows its mode as permit through every
// accessor (Mode, String, a log line), so a reader can tell it from a
// lock's.
func TestSequencerAccessorsPermit(t *testing.T) {
	seq := client.Sequencer(sequencer.Sign([]byte("k"), sequencer.Sequencer{Cell: "t", Path: "/ls/t/pool", Mode: sequencer.Permit, Generation: 42}))
	if seq.Mode() != client.Permit || seq.Mode().String() != "permit" || seq.Generation() != 42 || seq.Path() != "/ls/t/pool" {
		t.Fatalf("accessors: mode %v generation %d path %s", seq.Mode(), seq.Generation(), seq.Path())
	}
	if got := seq.String(); got != "/ls/t/pool permit generation 42 (cell t)" {
		t.Fatalf("String = %q", got)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("holding", "seq", seq)
	if !strings.Contains(logged.String(), "seq.mode=permit") {
		t.Fatalf("logged %q, want seq.mode=permit", logged.String())
	}
}
