package fsm

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
)

// Committed entries of one write by alice, before and after the envelope
// gained Proxy (tag px). TestAuditProxyEntries -v logs what today's code
// writes.
const (
	// writeEntryNoProxy is Command{Time: fsmtBase, Session: 2, Seq: 5,
	// Ack: 4, Principal: "alice", Payload: &SetContentsArgs{Handle: 3,
	// Contents: []byte("v")}}.Encode(), as every version writes it: the
	// bytes of a direct call, and of every entry written before Proxy.
	writeEntryNoProxy = "029286a174cc06a2746dd317979cfe362a0000a173cf0000000000000002a171cf0000000000000005a161cf0000000000000004a27072a5616c69636582a168cf0000000000000003a163c40176"
	// writeEntryProxy is the same command with Proxy: "edge".
	writeEntryProxy = "029287a174cc06a2746dd317979cfe362a0000a173cf0000000000000002a171cf0000000000000005a161cf0000000000000004a27072a5616c696365a27078a46564676582a168cf0000000000000003a163c40176"
)

// TestAuditProxyEntries: an entry without a proxy (any entry written
// before the field) decodes with none and re-encodes to its own bytes; one
// with a proxy decodes with it; a decoder that does not know the key (an
// older replica mid-upgrade, here a key no version knows in its place)
// passes over it and reads the rest of the command alike; and both
// entries change the state and answer alike, differing only in the audit
// record's Proxy.
func TestAuditProxyEntries(t *testing.T) {
	plain := Command{Time: fsmtBase, Session: 2, Seq: 5, Ack: 4, Principal: "alice",
		Payload: &SetContentsArgs{Handle: 3, Contents: []byte("v")}}
	proxied := plain
	proxied.Proxy = "edge"
	for _, g := range []struct {
		c   Command
		hex string
	}{{plain, writeEntryNoProxy}, {proxied, writeEntryProxy}} {
		b, err := g.c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("proxy %q: %s", g.c.Proxy, hex.EncodeToString(b))
		d, golden := goldenEntry(t, g.hex, CmdSetContents)
		if !bytes.Equal(b, golden) {
			t.Errorf("proxy %q encodes to %x today, the committed entry is %x", g.c.Proxy, b, golden)
		}
		want := g.c
		want.Type = CmdSetContents
		if !reflect.DeepEqual(normCmd(d), normCmd(&want)) {
			t.Fatalf("the committed entry decodes to %+v, want %+v", d, want)
		}
	}

	// An older decoder meets "px" as this one meets "zz": the same
	// length, so only the key differs.
	withProxy, _ := hex.DecodeString(writeEntryProxy)
	unknown := bytes.Replace(withProxy, []byte("\xa2px"), []byte("\xa2zz"), 1)
	if bytes.Equal(unknown, withProxy) {
		t.Fatal("the proxied entry holds no px key")
	}
	d, err := DecodeCommand(unknown)
	if err != nil {
		t.Fatalf("an entry with an envelope key this version does not know: %v", err)
	}
	if want := plain; true {
		want.Type = CmdSetContents
		if !reflect.DeepEqual(normCmd(d), normCmd(&want)) {
			t.Fatalf("an unknown envelope key decoded to %+v, want %+v", d, want)
		}
	}

	// Applied, the two change the same state, answer alike and differ in
	// their audit records' Proxy alone.
	run := func(proxy string) (*Result, []byte, *recordingAuditor) {
		h := newFSMT(t)
		a := &recordingAuditor{}
		h.f.SetAuditor(a)
		s := h.raw(Command{Client: "c", Principal: "alice", Admin: true, Proxy: proxy, Payload: &CreateSessionArgs{Host: "h"}}).Session
		hd := h.do(s, Command{Principal: "alice", Admin: true, Proxy: proxy, Payload: &OpenArgs{Path: fsmtPath("f"), Flags: fsmtRWC}}).Handle
		r := h.do(s, Command{Principal: "alice", Admin: true, Proxy: proxy, Payload: &SetContentsArgs{Handle: hd, Contents: []byte("v")}})
		h.do(s, Command{Principal: "alice", Admin: true, Proxy: proxy, Payload: &AcquireArgs{Handle: hd, Mode: LockExclusive}})
		h.do(s, Command{Principal: "alice", Admin: true, Proxy: proxy, Payload: &ReleaseArgs{Handle: hd}})
		h.do(s, Command{Principal: "alice", Admin: true, Proxy: proxy, Payload: &DeleteArgs{Handle: hd}})
		h.raw(Command{Session: s, Principal: "alice", Admin: true, Proxy: proxy, Payload: &CloseSessionArgs{}})
		return r, fsmtSnapshotBytes(t, h.f), a
	}
	r1, s1, a1 := run("")
	r2, s2, a2 := run("edge")
	if !reflect.DeepEqual(r1, r2) || !bytes.Equal(s1, s2) {
		t.Fatalf("a proxied write changed the state or the answer: %+v / %+v", r1, r2)
	}
	if got, want := a2.ops(), "create_session::ok create:/f:ok write:/f:ok acquire:/f:ok release:/f:ok delete:/f:ok close_session::ok"; got != want {
		t.Fatalf("records\n%s\nwant\n%s", got, want)
	}
	if len(a1.recs) != len(a2.recs) {
		t.Fatalf("%d records direct, %d proxied", len(a1.recs), len(a2.recs))
	}
	for i := range a2.recs {
		direct, proxied := a1.recs[i], a2.recs[i]
		if direct.Proxy != "" || proxied.Proxy != "edge" || proxied.Principal != "alice" {
			t.Fatalf("record %d: direct %+v, proxied %+v: want the proxy only in the proxied one, alice in both", i, direct, proxied)
		}
		proxied.Proxy = ""
		if direct != proxied {
			t.Fatalf("record %d differs beyond its proxy:\n%+v\n%+v", i, direct, proxied)
		}
	}
}

// TestCommittedLogAuditsNoProxy: the committed log, written before the
// envelope had a proxy, replays to audit records of its callers that name
// no proxy.
func TestCommittedLogAuditsNoProxy(t *testing.T) {
	f := NewFSM(fsmtCell, fsmtLogger())
	a := &recordingAuditor{}
	f.SetAuditor(a)
	for _, e := range readCommittedLog(t, committedLogV2) {
		f.ApplyEntry(e.Index, e.Data)
	}
	callers := 0
	for _, r := range a.recs {
		if r.Proxy != "" {
			t.Fatalf("record %+v names a proxy", r)
		}
		if r.Principal != "" && !strings.HasPrefix(r.Op, "expire") {
			callers++
		}
	}
	if callers == 0 {
		t.Fatalf("only %d of %d records name a caller", callers, len(a.recs))
	}
}
