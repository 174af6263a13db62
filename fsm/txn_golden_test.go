package fsm

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"testing"
)

// A snapshot of version 6 written once and committed
// (testdata/snapshot-v6.bin, with -write-txn-golden): a state whose
// de-duplication table holds a transaction's outcome. And the bytes of one
// transaction entry (command type 22). The files, not the code that wrote
// them, are the record: any change to how either encodes fails here.
const (
	txnSnapshotV6 = "testdata/snapshot-v6.bin"
	// txnEntryV2 is txnGoldenCommand().Encode().
	txnEntryV2 = "029286a174cc16a2746dd317979cfe362a0000a173cf0000000000000002a171cf0000000000000009a161cf0000000000000008a27072a17083a16b9483a174cc03a170a72f6c732f632f78a167cf000000000000000482a174cc02a170a72f6c732f632f6483a174cc04a170a72f6c732f632f6ca16dcc0184a174cc05a170a72f6c732f632f6ca167cf0000000000000006a16dcc01a16f9482a174cc02a170a72f6c732f632f6483a174cc01a170a92f6c732f632f642f79a163c4017983a174cc03a170a72f6c732f632f78a163c4013282a174cc04a170aa2f6c732f632f676f6e65a2717581a16ed30000000000000064"
)

var writeTxnGolden = flag.Bool("write-txn-golden", false, "write "+txnSnapshotV6+" and log the golden transaction entry (TestWriteTxnGolden)")

func txnGoldenCommand() Command {
	return Command{Time: fsmtBase, Session: 2, Seq: 9, Ack: 8, Principal: "p", Payload: &TxnArgs{
		Checks: []TxnCheck{{Kind: TxnCheckGeneration, Path: "/ls/c/x", Gen: 4}, {Kind: TxnCheckMissing, Path: "/ls/c/d"},
			{Kind: TxnCheckHeld, Path: "/ls/c/l", Mode: LockExclusive}, {Kind: TxnCheckSequencer, Path: "/ls/c/l", Mode: LockExclusive, Gen: 6}},
		Ops: []TxnOp{{Kind: TxnOpCreateDir, Path: "/ls/c/d"}, {Kind: TxnOpCreate, Path: "/ls/c/d/y", Contents: []byte("y")},
			{Kind: TxnOpSet, Path: "/ls/c/x", Contents: []byte("2")}, {Kind: TxnOpDelete, Path: "/ls/c/gone"}},
		Quota: &Quota{Nodes: 100}}}
}

// txnGoldenState builds the state txnSnapshotV6 holds.
func txnGoldenState(t *testing.T) *fsmtH {
	h := newFSMT(t)
	s := h.session()
	h.mustOpen(s, "x", fsmtRWC)
	h.mustOpen(s, "gone", fsmtRWC)
	wantOK(t, "a transaction", h.txn(s, []TxnCheck{{Kind: TxnCheckExists, Path: fsmtPath("x")}},
		txnPath(TxnOpSet, "x", "1"), txnPath(TxnOpDelete, "gone", ""), txnPath(TxnOpCreate, "new", "n")))
	wantKind(t, "a failed one", h.txn(s, []TxnCheck{{Kind: TxnCheckGeneration, Path: fsmtPath("x"), Gen: 1}}, txnPath(TxnOpDelete, "x", "")), KindGenerationMismatch)
	return h
}

func TestWriteTxnGolden(t *testing.T) {
	if !*writeTxnGolden {
		t.Skip("writes the golden version-6 snapshot only with -write-txn-golden")
	}
	if err := os.WriteFile(txnSnapshotV6, txnGoldenState(t).snapshot(), 0o644); err != nil {
		t.Fatal(err)
	}
	c := txnGoldenCommand()
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("txnEntryV2 = %q", hex.EncodeToString(b))
}

// The committed version-6 snapshot restores with the failed transaction's
// outcome in the de-duplication table and re-snapshots to its bytes, which are what
// today's code makes of the same commands; the committed entry decodes to
// the command it was written from and re-encodes to its bytes.
func TestTxnGoldenSnapshotAndEntry(t *testing.T) {
	f := restoreGolden(t, txnSnapshotV6, 6, txnGoldenState(t).snapshot())
	// The second acknowledged the first: the failed one's outcome is
	// the one kept.
	var outcomes int
	for _, s := range f.sessions {
		for _, r := range s.Results {
			if r.Txn != nil && r.Txn.Check == 1 && r.Err != nil && r.Err.Kind == KindGenerationMismatch {
				outcomes++
			}
		}
	}
	if outcomes != 1 {
		t.Fatalf("%d failed transaction outcomes restored, want 1", outcomes)
	}

	_, b := goldenEntry(t, txnEntryV2, CmdTxn)
	if b[0] != commandVersion {
		t.Fatalf("the golden entry is of command version %d", b[0])
	}
	want := txnGoldenCommand()
	again, err := want.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, b) {
		t.Fatal("a transaction encodes to other bytes than the golden entry: the command type 22 format changed")
	}
}
