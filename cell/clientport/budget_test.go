package clientport

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"lockcell/frame"
)

// muxFrame is one yamux frame: header and payload (data frames only).
func muxFrame(typ byte, flags uint16, id uint32, payload []byte, length uint32) []byte {
	h := make([]byte, frame.HeaderSize, frame.HeaderSize+len(payload))
	h[1] = typ
	binary.BigEndian.PutUint16(h[2:4], flags)
	binary.BigEndian.PutUint32(h[4:8], id)
	binary.BigEndian.PutUint32(h[8:12], length)
	return append(h, payload...)
}

func testBudgets(conn, ip, process int64) *budgets {
	return newBudgets(Limits{MaxConnBuffer: conn, MaxIPBuffer: ip, MaxBuffer: process, BufferStall: 50 * time.Millisecond}, false,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// feed hands b to the parser in pieces of every size from 1 to 13 bytes,
// so frame headers and payloads are split at every offset.
func feed(t *testing.T, c *connBudget, p *muxParser, b []byte) error {
	t.Helper()
	for step := 1; len(b) > 0; step = step%13 + 1 {
		k := min(step, len(b))
		if err := c.received(p, b[:k]); err != nil {
			return err
		}
		b = b[k:]
	}
	return nil
}

func wantHeld(t *testing.T, b *budgets, c *connBudget, want int64) {
	t.Helper()
	ip := b.ips[c.ipName]
	if got := c.in.used.Load(); got != want {
		t.Fatalf("connection holds %d request bytes, want %d", got, want)
	}
	if ip != nil && ip.in.used.Load() != want || b.in.used.Load() != want {
		t.Fatalf("ip holds %d, process %d, want %d", ip.in.used.Load(), b.in.used.Load(), want)
	}
}

// Bytes are charged to their streams as they arrive, whatever the read
// boundaries; control frames cost nothing; a stream's bytes go in the two
// steps the accounting promises, and never twice.
func TestBudgetChargesAndReleasesByStream(t *testing.T) {
	b := testBudgets(1<<20, 2<<20, 4<<20)
	c := b.conn("192.0.2.1", "p")
	var p muxParser
	data := make([]byte, 1000)
	var in []byte
	in = append(in, muxFrame(frame.TypeWindowUpdate, frame.FlagSYN, 1, nil, 0)...)
	in = append(in, muxFrame(frame.TypeData, 0, 1, data[:700], 700)...)
	in = append(in, muxFrame(2 /* ping */, frame.FlagSYN, 0, nil, 99)...)
	in = append(in, muxFrame(frame.TypeData, frame.FlagSYN, 3, data[:300], 300)...)
	in = append(in, muxFrame(frame.TypeData, 0, 1, data[:100], 100)...) // after its request: trailing bytes
	in = append(in, muxFrame(frame.TypeData, 0, 9, data[:50], 50)...)   // a stream yamux does not know
	if err := feed(t, c, &p, in); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, b, c, 1100)
	s1, s3 := c.accepted(1), c.accepted(3)
	if s1.id != 1 || s3.id != 3 || s1.gone || s3.gone {
		t.Fatalf("accepted records %+v %+v", s1, s3)
	}
	// Stream 1's handler read 700 bytes and dispatched: they go; the 100
	// bytes it never read stay until the client closes the stream.
	c.consumed(s1, 700)
	wantHeld(t, b, c, 400)
	c.finished(s1, 0)
	wantHeld(t, b, c, 400)
	if err := feed(t, c, &p, muxFrame(frame.TypeWindowUpdate, frame.FlagFIN, 1, nil, 0)); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, b, c, 300)
	// Releasing more than a stream holds releases what it holds; a
	// forgotten stream releases nothing.
	c.consumed(s1, 1000)
	c.finished(s3, 5000)
	wantHeld(t, b, c, 0)
	// Streams open out of order (a client's streams race to send their
	// SYNs). The client resets stream 11 while its handler still holds
	// it, and opens id 11 again: the new stream is counted apart, and the
	// old handler's releases do not touch it.
	for _, f := range [][]byte{muxFrame(frame.TypeData, frame.FlagSYN, 11, data[:10], 10), muxFrame(frame.TypeData, frame.FlagSYN, 9, data[:20], 20),
		muxFrame(frame.TypeWindowUpdate, frame.FlagRST, 11, nil, 0), muxFrame(frame.TypeData, frame.FlagSYN, 11, data[:40], 40)} {
		if err := feed(t, c, &p, f); err != nil {
			t.Fatal(err)
		}
	}
	wantHeld(t, b, c, 70)
	s11, s9, s11b := c.accepted(11), c.accepted(9), c.accepted(11)
	if s11 == s11b || s9.id != 9 || s11b.id != 11 {
		t.Fatalf("accepted records %+v %+v %+v", s11, s9, s11b)
	}
	c.finished(s11, 10)
	c.finished(s11, 10)
	wantHeld(t, b, c, 60)
	c.consumed(s9, 20)
	c.consumed(s11b, 40)
	wantHeld(t, b, c, 0)
	c.finished(s9, 0)
	c.finished(s11b, 0)
	if len(c.streams) != 3 { // 3, 9, 11: our side done, the client's not
		t.Fatalf("%d streams tracked, want 3", len(c.streams))
	}
	// A reset yamux sends (backlog overflow, close timeout) drops the
	// stream with its bytes, even mid-payload.
	var out muxParser
	if err := feed(t, c, &p, muxFrame(frame.TypeData, frame.FlagSYN, 7, data[:500], 800)); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, b, c, 500)
	c.sent(&out, muxFrame(frame.TypeData, 0, 7, data[:20], 20)) // our reply: no effect
	c.sent(&out, muxFrame(frame.TypeWindowUpdate, frame.FlagRST, 7, nil, 0))
	wantHeld(t, b, c, 0)
	if err := feed(t, c, &p, data[:300]); err != nil { // the rest of its payload
		t.Fatal(err)
	}
	wantHeld(t, b, c, 0)
	// An id the client has not closed cannot be opened again.
	err := feed(t, c, &p, muxFrame(frame.TypeWindowUpdate, frame.FlagSYN, 9, nil, 0))
	if !errors.Is(err, errStreamReused) {
		t.Fatalf("a stream id opened twice: %v", err)
	}
	c.end()
	if b.in.used.Load() != 0 || len(b.ips) != 0 {
		t.Fatalf("after the connection ended: %d bytes, %d addresses", b.in.used.Load(), len(b.ips))
	}
}

// A connection ending releases what it holds at every level, and late
// releases of its handlers change nothing.
func TestBudgetConnectionEndReleasesEverything(t *testing.T) {
	b := testBudgets(1<<20, 2<<20, 4<<20)
	c1, c2 := b.conn("192.0.2.1", "p"), b.conn("192.0.2.1", "p")
	var p1, p2 muxParser
	if err := feed(t, c1, &p1, muxFrame(frame.TypeData, frame.FlagSYN, 1, make([]byte, 600), 600)); err != nil {
		t.Fatal(err)
	}
	if err := feed(t, c2, &p2, muxFrame(frame.TypeData, frame.FlagSYN, 1, make([]byte, 400), 400)); err != nil {
		t.Fatal(err)
	}
	c1.chargeOut(50, 0)
	if got := b.ips["192.0.2.1"].in.used.Load(); got != 1000 {
		t.Fatalf("the address holds %d, want 1000", got)
	}
	r1 := c1.accepted(1)
	c1.end()
	c1.consumed(r1, 600)
	c1.finished(r1, 0)
	c1.chargeOut(-50, 0)
	if got := b.in.used.Load(); got != 400 || b.ips["192.0.2.1"].in.used.Load() != 400 || b.out.used.Load() != 0 {
		t.Fatalf("after one connection ended: process %d, address %d, replies %d; want 400, 400, 0",
			got, b.ips["192.0.2.1"].in.used.Load(), b.out.used.Load())
	}
	c2.end()
	if b.in.used.Load() != 0 || len(b.ips) != 0 {
		t.Fatalf("after both ended: %d bytes, %d addresses", b.in.used.Load(), len(b.ips))
	}
}

// A connection at its cap waits, proceeds when its bytes are released,
// and is refused once it frees nothing for BufferStall; one that holds
// nothing of its own waits for others.
func TestBudgetAwait(t *testing.T) {
	b := testBudgets(1000, 1500, 1<<20)
	c1, c2 := b.conn("192.0.2.1", "p"), b.conn("192.0.2.1", "p")
	defer c1.end()
	defer c2.end()
	var p1 muxParser
	if err := c1.received(&p1, muxFrame(frame.TypeData, frame.FlagSYN, 1, make([]byte, 1000), 1000)); err != nil {
		t.Fatal(err)
	}
	// Its handler read yamux's buffer empty, so the 1000 bytes are all
	// the connection holds.
	s1 := c1.accepted(1)
	c1.read(s1, 1000)
	if c1.fullIn() != levelConn || c2.fullIn() != levelNone {
		t.Fatalf("levels %v %v, want connection, none", c1.fullIn(), c2.fullIn())
	}
	released := make(chan error, 1)
	go func() { released <- c1.await(c1.fullIn, &c1.in.used, "requests", time.Time{}) }()
	c1.consumed(s1, 10)
	if err := <-released; err != nil {
		t.Fatalf("after a release: %v", err)
	}
	var p2 muxParser
	if err := c2.received(&p2, muxFrame(frame.TypeData, frame.FlagSYN, 1, make([]byte, 600), 600)); err != nil {
		t.Fatal(err)
	}
	c2.read(c2.accepted(1), 600)
	if c2.fullIn() != levelIP {
		t.Fatalf("level %v, want ip", c2.fullIn())
	}
	if err := c2.await(c2.fullIn, &c2.in.used, "requests", time.Time{}); !errors.Is(err, errOverBudget) {
		t.Fatalf("a stalled connection over its address's budget: %v", err)
	}
	if b.over[levelIP].Load() != 1 {
		t.Fatalf("ip refusals %d, want 1", b.over[levelIP].Load())
	}
	// c3 holds nothing: it waits, and ends when its connection does.
	c3 := b.conn("192.0.2.1", "p")
	done := make(chan error, 1)
	go func() { done <- c3.await(c3.fullIn, &c3.in.used, "requests", time.Time{}) }()
	select {
	case err := <-done:
		t.Fatalf("a connection holding nothing was refused: %v", err)
	case <-time.After(4 * b.limits.BufferStall):
	}
	c3.end()
	if err := <-done; err == nil {
		t.Fatal("await returned nil after its connection ended")
	}
}

// BenchmarkBudgetReceived is the request budget's cost on the read path:
// parsing and charging the frames of honest calls (a 100-byte request and
// a 256 KiB one per iteration) read 4 KiB at a time, as yamux reads.
func BenchmarkBudgetReceived(b *testing.B) {
	bud := testBudgets(1<<40, 1<<40, 1<<40)
	c := bud.conn("192.0.2.1", "p")
	var p, out muxParser
	var calls [][]byte
	for _, n := range []int{100, 256 << 10} {
		var in []byte
		in = append(in, muxFrame(frame.TypeWindowUpdate, frame.FlagSYN, 0, nil, 0)...)
		in = append(in, muxFrame(frame.TypeData, 0, 0, make([]byte, n), uint32(n))...)
		in = append(in, muxFrame(frame.TypeWindowUpdate, frame.FlagFIN, 0, nil, 0)...)
		calls = append(calls, in)
	}
	reply := muxFrame(frame.TypeData, 0, 0, nil, 0)
	var id uint32
	b.SetBytes(int64(len(calls[0]) + len(calls[1])))
	b.ReportAllocs()
	for b.Loop() {
		for _, in := range calls {
			id += 2
			n := len(in) - 3*frame.HeaderSize
			for _, off := range []int{4, frame.HeaderSize + 4, 2*frame.HeaderSize + n + 4} {
				binary.BigEndian.PutUint32(in[off:], id)
			}
			for rest := in; len(rest) > 0; {
				k := min(len(rest), 4096)
				if err := c.received(&p, rest[:k]); err != nil {
					b.Fatal(err)
				}
				rest = rest[k:]
			}
			sb := c.accepted(id)
			c.sent(&out, reply)
			c.finished(sb, int64(n))
		}
	}
	if c.in.used.Load() != 0 {
		b.Fatalf("%d bytes left counted", c.in.used.Load())
	}
}

// The rate bucket lets a second's worth through at once, then holds the
// address to its rate: a read that overdraws it waits the debt out, and
// idle time refills it no further than one second's worth.
func TestRateBucketHoldsAnAddressToItsRate(t *testing.T) {
	r := rateBucket{rate: 1000}
	t0 := time.Unix(1000, 0)
	if d := r.wait(t0); d != 0 {
		t.Fatalf("a fresh bucket makes the first read wait %v", d)
	}
	r.take(t0, 1500) // a read may overdraw by what it read
	if d := r.wait(t0); d < 500*time.Millisecond || d > 502*time.Millisecond {
		t.Fatalf("500 bytes over at 1000 B/s: wait %v, want about 501ms", d)
	}
	at := t0.Add(501 * time.Millisecond)
	if d := r.wait(at); d != 0 {
		t.Fatalf("after the debt is paid: wait %v", d)
	}
	r.take(at, 1)
	if d := r.wait(at.Add(time.Hour)); d != 0 {
		t.Fatalf("after an idle hour: wait %v", d)
	}
	r.take(at.Add(time.Hour), 2000)
	if d := r.wait(at.Add(time.Hour)); d < time.Second {
		t.Fatalf("an idle hour saved more than a second's worth: wait %v after 2000 bytes", d)
	}
}

// wantExtra checks the memory around the bytes the connection, its
// address and the process count.
func wantExtra(t *testing.T, b *budgets, c *connBudget, want int64) {
	t.Helper()
	if got := c.in.extra.Load(); got != want {
		t.Fatalf("connection counts %d bytes around its request bytes, want %d", got, want)
	}
	if ip := b.ips[c.ipName]; ip != nil && ip.in.extra.Load() != want || b.in.extra.Load() != want {
		t.Fatalf("ip counts %d, process %d, want %d", b.ips[c.ipName].in.extra.Load(), b.in.extra.Load(), want)
	}
}

// The budget counts what holding request bytes costs, not only the bytes:
// yamux's receive buffer at the capacity bytes.Buffer gives it (the frame's
// size from its header on, doubled at its end), until the handler reads it
// empty; and the room the handler reads into before bytes fill it. The
// levels are full when bytes and that memory reach their caps, and all of
// it goes with the stream or the connection.
func TestBudgetChargesWhatHoldingBytesCosts(t *testing.T) {
	b := testBudgets(3000, 1<<20, 1<<20)
	c := b.conn("192.0.2.1", "p")
	var p muxParser
	data := make([]byte, 1000)
	buf := func(l int64) int64 { return 2*l + yamuxReadSlack } // after one frame of l bytes

	// A frame's header makes yamux allocate its size; its end doubles it.
	if err := feed(t, c, &p, muxFrame(frame.TypeData, frame.FlagSYN, 1, data[:500], 800)); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, b, c, 500)
	wantExtra(t, b, c, 300)
	if err := feed(t, c, &p, data[:300]); err != nil {
		t.Fatal(err)
	}
	wantExtra(t, b, c, buf(800)-800)
	// A second frame that fits the buffer leaves it as it is.
	if err := feed(t, c, &p, muxFrame(frame.TypeData, 0, 1, data[:100], 100)); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, b, c, 900)
	wantExtra(t, b, c, buf(800)-900)
	if got := c.fullIn(); got != levelNone {
		t.Fatalf("level %v with %d held of 3000", got, c.in.held())
	}
	// The handler reads into a 1000-byte frame buffer: the room is
	// counted until bytes fill it; the buffer stays while it holds bytes.
	s1 := c.accepted(1)
	c.reading(s1, 1000)
	wantExtra(t, b, c, buf(800)-900+1000)
	if got := c.fullIn(); got != levelConn {
		t.Fatalf("level %v with %d bytes and %d around them, want connection", got, c.in.used.Load(), c.in.extra.Load())
	}
	c.read(s1, 600)
	wantExtra(t, b, c, buf(800)-300+400)
	// Read empty: yamux's buffer is gone (the handler shrinks it), the
	// bytes are in the frame buffer.
	c.read(s1, 300)
	wantHeld(t, b, c, 900)
	wantExtra(t, b, c, 100)
	if got := c.fullIn(); got != levelNone {
		t.Fatalf("level %v after the buffer was read empty", got)
	}
	// The call is dispatched: the bytes and the room go.
	c.consumed(s1, 900)
	wantHeld(t, b, c, 0)
	wantExtra(t, b, c, 0)

	// A refused stream's buffer is counted until the stream is dropped.
	if err := feed(t, c, &p, muxFrame(frame.TypeData, frame.FlagSYN, 3, data[:200], 200)); err != nil {
		t.Fatal(err)
	}
	s3 := c.accepted(3)
	wantExtra(t, b, c, buf(200)-200)
	c.finished(s3, 0)
	wantExtra(t, b, c, buf(200)-200)
	if err := feed(t, c, &p, muxFrame(frame.TypeWindowUpdate, frame.FlagFIN, 3, nil, 0)); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, b, c, 0)
	wantExtra(t, b, c, 0)

	// The end of the connection releases it all, at every level.
	if err := feed(t, c, &p, muxFrame(frame.TypeData, frame.FlagSYN, 5, data[:1000], 1000)); err != nil {
		t.Fatal(err)
	}
	c.reading(c.accepted(5), 1000)
	c.chargeOut(300, 200)
	if got := c.out.held(); got != 500 {
		t.Fatalf("reply held %d, want 500", got)
	}
	if got, want := b.inHeldPeak.Load(), int64(1000+buf(1000)); got != want {
		t.Fatalf("peak held %d, want %d", got, want)
	}
	c.end()
	if b.in.held() != 0 || b.out.held() != 0 || len(b.ips) != 0 {
		t.Fatalf("after the connection ended: requests %d, replies %d, %d addresses", b.in.held(), b.out.held(), len(b.ips))
	}
}

// holdBytes makes stream id of c hold exactly n request bytes: received,
// accepted and read out of yamux's buffer by its handler, not yet
// dispatched (no memory counted around them).
func holdBytes(t *testing.T, c *connBudget, p *muxParser, id uint32, n int) *streamBytes {
	t.Helper()
	if err := c.received(p, muxFrame(frame.TypeData, frame.FlagSYN, id, make([]byte, n), uint32(n))); err != nil {
		t.Fatal(err)
	}
	st := c.accepted(id)
	c.read(st, n)
	return st
}

// fullNow is c.fullIn with the holders counted afresh (the count is
// otherwise kept for budgetPoll).
func fullNow(c *connBudget) budgetLevel {
	c.b.shares.Store(nil)
	return c.fullIn()
}

// Once the process budget is full, a connection whose address holds less
// than its fair share (the budget over the addresses holding bytes, its
// own counted in) is still read, into the reserve; one whose address holds
// its share is not; and none is read past the budget and its reserve.
func TestBudgetFairSharesReadSmallHoldersFromTheReserve(t *testing.T) {
	const mib = 1 << 20
	b := newBudgets(Limits{MaxConnBuffer: 3 * mib, MaxIPBuffer: 3 * mib, MaxBuffer: 4 * mib, BufferReserve: 2 * mib, BufferStall: 50 * time.Millisecond},
		false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a, bb, c := b.conn("192.0.2.1", "p"), b.conn("192.0.2.2", "p"), b.conn("192.0.2.3", "p")
	d, e := b.conn("192.0.2.4", "p"), b.conn("192.0.2.5", "p")
	defer func() {
		for _, x := range []*connBudget{a, bb, c, d, e} {
			x.end()
		}
	}()
	var pa, pb, pc, pd muxParser
	holdBytes(t, a, &pa, 1, 2*mib)
	holdBytes(t, bb, &pb, 1, 2*mib)
	// The process holds its 4 MiB, two addresses 2 MiB each: their share.
	if got := fullNow(a); got != levelProcess {
		t.Fatalf("an address holding its share of a full budget: level %v, want process", got)
	}
	// A third address holding nothing: its share is 4/3 MiB.
	if got := fullNow(c); got != levelNone {
		t.Fatalf("an address holding nothing beside a full budget: level %v, want none (the reserve)", got)
	}
	s := holdBytes(t, c, &pc, 1, mib)
	if got := fullNow(c); got != levelNone {
		t.Fatalf("1 MiB of a 4/3 MiB share: level %v, want none", got)
	}
	holdBytes(t, c, &pc, 3, mib/2)
	if got := fullNow(c); got != levelProcess {
		t.Fatalf("1.5 MiB of a 4/3 MiB share: level %v, want process", got)
	}
	// A fourth address (share 1 MiB) is read until the reserve is spent
	// (6.1 MiB held, 4 + 2 allowed); then no one is, a newcomer holding
	// nothing included.
	if got := fullNow(d); got != levelNone {
		t.Fatalf("a fourth address holding nothing: level %v, want none", got)
	}
	holdBytes(t, d, &pd, 1, 6*mib/10)
	if got := fullNow(e); got != levelProcess {
		t.Fatalf("past the budget and its reserve: level %v, want process", got)
	}
	if b.reserveReads.Load() != 3 {
		t.Fatalf("%d reads counted from the reserve, want 3", b.reserveReads.Load())
	}
	// Released bytes make room for everyone again.
	c.consumed(s, mib)
	if got := fullNow(e); got != levelNone {
		t.Fatalf("after a release, 5.1 MiB held: level %v, want none", got)
	}
	// The share has a floor: beside many holders an address may still
	// hold fairShareFloor (here a sixteenth of the budget).
	if !underShare(b.floor-1, 1000, 4*mib, b.floor) || underShare(b.floor, 1000, 4*mib, b.floor) {
		t.Fatalf("the floor of %d bytes does not hold", b.floor)
	}
}

// With principals told apart (TLS), a connection is read from the reserve
// only if its principal too holds less than its share: one principal's
// many addresses do not share the reserve among themselves.
func TestBudgetFairSharesCountPrincipals(t *testing.T) {
	const mib = 1 << 20
	b := newBudgets(Limits{MaxConnBuffer: 3 * mib, MaxIPBuffer: 3 * mib, MaxBuffer: 4 * mib, BufferReserve: mib, BufferStall: 50 * time.Millisecond},
		true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a1, a2 := b.conn("192.0.2.1", "mallory"), b.conn("192.0.2.2", "mallory")
	a3, v := b.conn("192.0.2.3", "mallory"), b.conn("192.0.2.9", "victim")
	defer func() {
		for _, x := range []*connBudget{a1, a2, a3, v} {
			x.end()
		}
	}()
	var p1, p2 muxParser
	holdBytes(t, a1, &p1, 1, 2*mib)
	holdBytes(t, a2, &p2, 1, 2*mib)
	if got := fullNow(a3); got != levelProcess {
		t.Fatalf("a new address of the principal holding the whole budget: level %v, want process", got)
	}
	if got := fullNow(v); got != levelNone {
		t.Fatalf("another principal holding nothing: level %v, want none (the reserve)", got)
	}
	// Without TLS the principal is everyone's: addresses alone count.
	b.byPrincipal = false
	if got := fullNow(a3); got != levelNone {
		t.Fatalf("a new address on a plain cell: level %v, want none", got)
	}
}

// The stream counts are exact under concurrency: many connections of one
// address and principal racing to open streams get exactly the cap, the
// refusals are counted at the level that refused, and every count and
// record is gone once the streams and connections are.
func TestBudgetStreamCountsAreExactUnderConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		perIP, perPrin, proc int
		want                 budgetLevel
	}{
		{"ip", 100, 1000, 1000, levelIP},
		{"principal", 1000, 100, 1000, levelPrincipal},
		{"process", 1000, 1000, 100, levelProcess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBudgets(Limits{MaxStreamsPerIP: tc.perIP, MaxStreamsPerPrincipal: tc.perPrin, MaxStreams: tc.proc},
				true, slog.New(slog.NewTextHandler(io.Discard, nil)))
			const conns, tries = 16, 50
			var cs []*connBudget
			for range conns {
				cs = append(cs, b.conn("192.0.2.1", "p"))
			}
			results := make(chan budgetLevel, conns*tries)
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range tries {
						results <- c.takeStream()
					}
				}()
			}
			wg.Wait()
			close(results)
			taken := 0
			for l := range results {
				switch l {
				case levelNone:
					taken++
				case tc.want:
				default:
					t.Fatalf("a stream refused at level %v, want %v", l, tc.want)
				}
			}
			if taken != 100 || b.streams.Load() != 100 || b.streamsPeak.Load() != 100 {
				t.Fatalf("%d streams taken, %d counted, peak %d; the cap is 100", taken, b.streams.Load(), b.streamsPeak.Load())
			}
			if got := b.refusedStreams[tc.want].Load(); got != conns*tries-100 {
				t.Fatalf("%d refusals counted at %v, want %d", got, tc.want, conns*tries-100)
			}
			// Connections end before their streams (a parked call
			// outlives its connection): the records stay while a
			// stream holds them, and go with the last.
			for _, c := range cs {
				c.end()
			}
			if len(b.ips) != 1 || len(b.principals) != 1 {
				t.Fatalf("records of an address and a principal with streams left: %d, %d", len(b.ips), len(b.principals))
			}
			per := taken / conns
			for i, c := range cs {
				n := per
				if i < taken%conns {
					n++
				}
				for range n {
					c.leaveStream()
				}
			}
			if b.streams.Load() != 0 || len(b.ips) != 0 || len(b.principals) != 0 {
				t.Fatalf("after every stream left: %d counted, %d address and %d principal records", b.streams.Load(), len(b.ips), len(b.principals))
			}
		})
	}
}

// An address that had a connection closed over a budget does not read
// into the reserve for cutMemory BufferStalls, though it holds nothing
// now: cut holders that redial are not newcomers.
func TestBudgetCutHoldersStayOutOfTheReserve(t *testing.T) {
	const mib = 1 << 20
	b := newBudgets(Limits{MaxConnBuffer: 3 * mib, MaxIPBuffer: 3 * mib, MaxBuffer: 4 * mib, BufferReserve: 2 * mib, BufferStall: 20 * time.Millisecond},
		false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a, bb := b.conn("192.0.2.1", "p"), b.conn("192.0.2.2", "p")
	defer a.end()
	defer bb.end()
	var pa, pb muxParser
	holdBytes(t, a, &pa, 1, 2*mib)
	holdBytes(t, bb, &pb, 1, 2*mib)
	// A third address holds 1 MiB it never frees: it waits at the process
	// level once over its share, and is cut.
	c := b.conn("192.0.2.3", "p")
	var pc muxParser
	holdBytes(t, c, &pc, 1, 3*mib/2)
	before := time.Now() // the cut comes after
	if err := c.await(c.fullIn, &c.in.used, "requests", time.Time{}); !errors.Is(err, errOverBudget) {
		t.Fatalf("a stalled holder over its share: %v", err)
	}
	c.end()
	// Redialled, it holds nothing, yet stays out of the reserve; another
	// address holding nothing does not.
	again, other := b.conn("192.0.2.3", "p"), b.conn("192.0.2.4", "p")
	defer again.end()
	defer other.end()
	if got := fullNow(again); got != levelProcess {
		t.Fatalf("a cut address, redialled: level %v, want process", got)
	}
	if got := fullNow(other); got != levelNone {
		t.Fatalf("an address never cut: level %v, want none", got)
	}
	// It is forgotten after cutMemory BufferStalls.
	deadline := time.Now().Add(10 * time.Second)
	for fullNow(again) != levelNone {
		if time.Now().After(deadline) {
			t.Fatalf("a cut address still kept out of the reserve after %v", 10*time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if held := time.Since(before); held < cutMemory*b.limits.BufferStall {
		t.Fatalf("a cut address was let back into the reserve after %v, before %v", held, cutMemory*b.limits.BufferStall)
	}
}
