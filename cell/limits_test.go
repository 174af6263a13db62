package cell_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
	"lockcell/master"
	"lockcell/wire"
)

// A session may have at most MaxCallsPerSession calls in flight on its
// connection; the excess is answered "too many" and everyone else, the
// session included, keeps being served.
func TestCallsPerSessionAreCapped(t *testing.T) {
	const max = 4
	c := fixtures.NewCell(t, 1, fixtures.Options{ConnLimits: cell.ConnLimits{MaxCallsPerSession: max}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, waiter := c.Client(t), c.Client(t)
	h, err := holder.Open(ctx, c.Name("capped"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Acquire(ctx, client.Exclusive); err != nil {
		t.Fatal(err)
	}
	// max+2 blocking Acquires of one session park on its connection (with
	// its KeepAlive): at least two of them must be refused.
	const tries = max + 2
	var wg sync.WaitGroup
	errs := make(chan error, tries)
	actx, acancel := context.WithCancel(ctx)
	var handles []*client.Handle
	for range tries {
		wh, err := waiter.Open(ctx, c.Name("capped"), client.Read|client.Write, client.WithoutCache())
		if err != nil {
			t.Fatal(err)
		}
		defer wh.Close()
		handles = append(handles, wh)
	}
	for i, wh := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := wh.Acquire(actx, client.Exclusive)
			if err != nil && !errors.Is(err, client.ErrTooMany) && actx.Err() == nil {
				err = fmt.Errorf("acquire %d: %w", i, err)
			}
			errs <- err
		}()
	}
	refused := 0
	for refused < 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, client.ErrTooMany) {
				t.Fatalf("an acquire over the cap ended with %v, want too many", err)
			}
			refused++
		case <-ctx.Done():
			t.Fatal("no acquire was refused: the per-session cap does not hold")
		}
	}
	// The capped session's other calls and another session still work.
	if _, err := admin.New(waiter).Sessions(ctx); err != nil && !errors.Is(err, client.ErrTooMany) {
		t.Fatalf("the capped session: %v", err)
	}
	if _, _, err := h.GetContentsAndStat(ctx); err != nil {
		t.Fatalf("another session: %v", err)
	}
	acancel()
	wg.Wait()
}

// A principal may hold at most SessionsPerPrincipal live sessions.
func TestSessionsPerPrincipalAreCapped(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{SessionLimits: master.Limits{SessionsPerPrincipal: 3}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var live []*client.Client
	for range 3 {
		live = append(live, c.Client(t))
	}
	_, err := client.Dial(ctx, c.ClientConfig())
	if !errors.Is(err, client.ErrTooMany) {
		t.Fatalf("a fourth session of one principal: %v, want too many", err)
	}
	// Closing one frees a place.
	live[0].Close()
	cl, err := client.Dial(ctx, c.ClientConfig())
	if err != nil {
		t.Fatalf("after closing a session: %v", err)
	}
	cl.Close()
}

// budgetSampler records, until stopped, the most heap in use and the most
// request and reply bytes the server counted, sampling every 20 ms: the
// bound must hold while an abuse runs, not only after.
type budgetSampler struct {
	base     uint64
	stop     chan struct{}
	done     chan struct{}
	heapPeak uint64
	reqPeak  int64
	repPeak  int64
}

func sampleBudget(srv *cell.Server) *budgetSampler {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := &budgetSampler{base: ms.HeapInuse, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			s.heapPeak = max(s.heapPeak, ms.HeapInuse)
			st := srv.ConnStats()
			s.reqPeak, s.repPeak = max(s.reqPeak, st.RequestBytes), max(s.repPeak, st.ReplyBytes)
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// growth stops the sampler and returns the peak heap growth.
func (s *budgetSampler) growth() int64 {
	close(s.stop)
	<-s.done
	return int64(s.heapPeak) - int64(s.base)
}

// stallFrames opens n streams on sess, each sending a frame header that
// claims the largest frame and then size bytes of it, and never the rest.
// Opens and writes that fail (the server cut the connection) are ignored.
// It returns a wait for the writers, which end when the session does.
func stallFrames(sess *yamux.Session, n, size int) (wait func()) {
	buf := make([]byte, 4+size)
	binary.BigEndian.PutUint32(buf, wire.MaxFrameSize)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := sess.OpenStream()
			if err != nil {
				return
			}
			st.Write(buf)
		}()
	}
	return wg.Wait
}

// closedWithin reports whether sess is closed (by the server) within d.
func closedWithin(sess *yamux.Session, d time.Duration) bool {
	select {
	case <-sess.CloseChan():
		return true
	case <-time.After(d):
		return false
	}
}

// waitReleased waits until the server holds no request or reply bytes
// (call it once every client is closed: a parked Acquire holds its
// request): the accounting does not drift.
func waitReleased(t *testing.T, srv *cell.Server) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := srv.ConnStats()
		if st.RequestBytes == 0 && st.ReplyBytes == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server still counts %d request and %d reply bytes", st.RequestBytes, st.ReplyBytes)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Hundreds of streams on one connection, each holding an almost-full
// frame it never finishes: the connection's bytes stop at its budget
// while the abuse runs, the connection is cut, and another client is
// served meanwhile.
func TestConnBufferBoundsStalledFrames(t *testing.T) {
	const budget = 8 << 20
	// The lease is long because this test is about the memory budget:
	// copying 100 MiB through yamux under -race, beside other test
	// processes on two cores, can starve the one-replica master for
	// longer than a 2 s lease's slack, and the honest session then
	// expires for want of CPU, not because of the abuse. The honest
	// client's calls during and after the abuse are still checked.
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: 12 * time.Second,
		ConnLimits: cell.ConnLimits{MaxConnBuffer: budget, MaxIPBuffer: 4 * budget, MaxBuffer: 8 * budget}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t)
	h, err := cl.Open(ctx, c.Name("honest"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	sampler := sampleBudget(srv)
	sess := hostileMux(t, srv.ClientAddr())
	// 400 streams of 250 KiB: 100 MiB held without a budget.
	wait := stallFrames(sess, 400, 250<<10)
	defer wait()
	for i := range 5 {
		want := []byte(fmt.Sprintf("write %d during the abuse", i))
		if err := h.SetContents(ctx, want); err != nil {
			t.Fatalf("another connection during the abuse: %v", err)
		}
		if got, _, err := h.GetContentsAndStat(ctx); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("another connection during the abuse: %q %v", got, err)
		}
	}
	cut := closedWithin(sess, 20*time.Second)
	growth := sampler.growth()
	t.Logf("peak heap growth %d MiB, peak request bytes %d KiB (budget %d KiB)", growth>>20, sampler.reqPeak>>10, budget>>10)
	if !cut {
		t.Fatal("400 stalled frames: the server kept the connection for 20 s")
	}
	// A counted byte costs up to about five in the heap: yamux grows a
	// stream's buffer past the frame, and the frame reader doubles its
	// own, leaving garbage.
	if growth > 96<<20 {
		t.Errorf("the heap grew by %d MiB during the abuse; the connection's budget is %d MiB", growth>>20, budget>>20)
	}
	if sampler.reqPeak > budget+256<<10 {
		t.Errorf("the server held %d KiB of requests; the budget is %d KiB", sampler.reqPeak>>10, budget>>10)
	}
	if st := srv.ConnStats(); st.OverBudgetConn == 0 {
		t.Errorf("the cut connection is not counted: %+v", st)
	}
	if _, _, err := h.GetContentsAndStat(ctx); err != nil {
		t.Fatalf("after the abuse: %v", err)
	}
	cl.Close()
	waitReleased(t, srv)
}

// Connections from one address, each under its own budget, together meet
// the address's budget: it binds, and they are cut.
func TestIPBufferBindsAcrossConnections(t *testing.T) {
	const connBudget, ipBudget = 8 << 20, 12 << 20
	c := fixtures.NewCell(t, 1, fixtures.Options{ConnLimits: cell.ConnLimits{MaxConnBuffer: connBudget, MaxIPBuffer: ipBudget, MaxBuffer: 32 * ipBudget}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	sampler := sampleBudget(srv)
	const conns = 10
	var sessions []*yamux.Session
	for range conns {
		sess := hostileMux(t, srv.ClientAddr())
		sessions = append(sessions, sess)
		// 30 streams of 250 KiB: 7.3 MiB, under the connection's budget;
		// 73 MiB for the address.
		defer stallFrames(sess, 30, 250<<10)()
	}
	// The address's budget binds: its connections stop being read, hold
	// their partial frames, and are cut.
	deadline := time.Now().Add(20 * time.Second)
	for srv.ConnStats().OverBudgetIP == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cut := 0
	for _, sess := range sessions {
		if closedWithin(sess, 5*time.Second) {
			cut++
		}
	}
	growth := sampler.growth()
	t.Logf("%d of %d connections cut; peak heap growth %d MiB, peak request bytes %d KiB (address budget %d KiB)",
		cut, conns, growth>>20, sampler.reqPeak>>10, ipBudget>>10)
	if srv.ConnStats().OverBudgetIP == 0 || cut == 0 {
		t.Errorf("%d connections cut, none over the address's budget: %+v", cut, srv.ConnStats())
	}
	// One read of at most 32 KiB per connection may pass the cap.
	if sampler.reqPeak > ipBudget+conns*32<<10 {
		t.Errorf("the server held %d KiB of requests from one address; its budget is %d KiB", sampler.reqPeak>>10, ipBudget>>10)
	}
	// As above, a counted byte costs up to about five in the heap, and
	// each connection's frame in progress a little more.
	if growth > 192<<20 {
		t.Errorf("the heap grew by %d MiB; the address's budget is %d MiB", growth>>20, ipBudget>>20)
	}
	for _, sess := range sessions {
		sess.Close()
	}
	waitReleased(t, srv)
}

// stallingConn stops delivering what the server sends once stalled is
// set: a client that never reads its replies.
type stallingConn struct {
	net.Conn
	stalled *atomic.Bool
	release <-chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func (c *stallingConn) Read(p []byte) (int, error) {
	if c.stalled.Load() {
		select {
		case <-c.release:
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	return c.Conn.Read(p)
}

func (c *stallingConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// A client that asks for large replies and never reads them cannot make
// the server hold more than its reply budget: the replies wait for room
// before they are encoded, and the connection is cut.
func TestRepliesToANonReaderAreBounded(t *testing.T) {
	const budget = 4 << 20
	c := fixtures.NewCell(t, 1, fixtures.Options{ConnLimits: cell.ConnLimits{MaxConnBuffer: budget, MaxIPBuffer: 4 * budget,
		MaxBuffer: 16 * budget, MaxCallsPerSession: 1024}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	ctx := ctxT(t, 2*time.Minute)
	w := c.Client(t)
	big := bytes.Repeat([]byte("r"), wire.MaxContents)
	if _, err := w.Open(ctx, c.Name("big"), client.Read|client.Write|client.Create, client.WithContents(big)); err != nil {
		t.Fatal(err)
	}
	var stalled atomic.Bool
	release := make(chan struct{})
	var releaseOnce sync.Once
	unstall := func() { releaseOnce.Do(func() { stalled.Store(false); close(release) }) }
	defer unstall()
	cfg := c.ClientConfig()
	cfg.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &stallingConn{Conn: conn, stalled: &stalled, release: release, closed: make(chan struct{})}, nil
	}
	rd := c.ClientWith(t, cfg)
	h, err := rd.Open(ctx, c.Name("big"), client.Read, client.WithoutCache())
	if err != nil {
		t.Fatal(err)
	}
	sampler := sampleBudget(srv)
	stalled.Store(true)
	// 256 reads of 256 KiB (the client opens at most 256 streams the
	// server has not acknowledged): 64 MiB of replies, none read.
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.GetContentsAndStat(cctx)
		}()
	}
	defer wg.Wait()
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	for srv.ConnStats().OverBudgetConn == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	growth := sampler.growth()
	t.Logf("peak heap growth %d MiB, peak reply bytes %d KiB (budget %d KiB)", growth>>20, sampler.repPeak>>10, budget>>10)
	if srv.ConnStats().OverBudgetConn == 0 {
		t.Errorf("the non-reading connection was not cut: %+v", srv.ConnStats())
	}
	if sampler.repPeak > budget+2*wire.MaxFrameSize {
		t.Errorf("the server held %d KiB of replies; the budget is %d KiB", sampler.repPeak>>10, budget>>10)
	}
	if growth > 40<<20 {
		t.Errorf("the heap grew by %d MiB while replies went unread; the budget is %d MiB", growth>>20, budget>>20)
	}
	cancel()
	unstall()
	wg.Wait()
	rd.Close()
	w.Close()
	waitReleased(t, srv)
}

// An honest client writing many largest files at once on one connection,
// within its budget, is never cut, and nothing stays counted after.
func TestHonestConcurrentLargeWritesAreNotCut(t *testing.T) {
	// A lease long enough for 12 MiB of fsync'd writes on a busy machine.
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: 12 * time.Second})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	ctx := ctxT(t, 3*time.Minute)
	cl := c.Client(t)
	// 48 writes of 256 KiB at once: 12 MiB, three times the 4 MiB
	// connection budget (the client library keeps 2 MiB in flight).
	const writers = 48
	handles := make([]*client.Handle, writers)
	for i := range handles {
		h, err := cl.Open(ctx, c.Name(fmt.Sprintf("w%d", i)), client.Read|client.Write|client.Create)
		if err != nil {
			t.Fatal(err)
		}
		handles[i] = h
	}
	data := bytes.Repeat([]byte("w"), wire.MaxContents)
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for _, h := range handles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- h.SetContents(ctx, data)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v (%+v)", round, err, srv.ConnStats())
			}
		}
	}
	st := srv.ConnStats()
	if st.OverBudgetConn+st.OverBudgetIP+st.OverBudgetProcess != 0 {
		t.Fatalf("an honest connection was cut: %+v", st)
	}
	t.Logf("peak request bytes %d KiB", st.RequestBytesPeak>>10)
	cl.Close()
	waitReleased(t, srv)
}

// A client with more large writes in flight than a replica's connection
// budget, while a cut-off cacher holds every one of them for up to its
// lease, is not cut: the client library keeps its request bytes in flight
// below the budget (client.maxBytesInFlight), so the replica never stalls
// over it without progress.
func TestLargeWritesHeldByACacherAreNotCut(t *testing.T) {
	const lease = 2 * time.Second
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: lease})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	ctx := ctxT(t, 3*time.Minute)
	cl := c.Client(t)
	// 96 writes of 256 KiB: 24 MiB, six times the 4 MiB connection budget.
	const writers = 96
	handles := make([]*client.Handle, writers)
	for i := range handles {
		h, err := cl.Open(ctx, c.Name(fmt.Sprintf("w%d", i)), client.Read|client.Write|client.Create)
		if err != nil {
			t.Fatal(err)
		}
		handles[i] = h
	}
	// A second client caches every file, then is cut off: each write waits
	// for its lease to run out.
	cut := fixtures.NewCutter()
	cfg := c.ClientConfig()
	cfg.Dialer, cfg.GracePeriod = cut.Dial, time.Second
	cacher := c.ClientWith(t, cfg)
	for i := range writers {
		h, err := cacher.Open(ctx, c.Name(fmt.Sprintf("w%d", i)), client.Read)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.GetContentsAndStat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cut.Cut()
	data := bytes.Repeat([]byte("w"), wire.MaxContents)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for _, h := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- h.SetContents(ctx, data)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("write: %v (%+v)", err, srv.ConnStats())
		}
	}
	st := srv.ConnStats()
	if st.OverBudgetConn+st.OverBudgetIP+st.OverBudgetProcess != 0 {
		t.Fatalf("an honest connection was cut: %+v", st)
	}
	t.Logf("peak request bytes %d KiB", st.RequestBytesPeak>>10)
}

// A reply too large for a frame is answered with a typed error, never a
// silent close: a session holding locks whose names add up to more than a
// frame lists the sessions.
func TestReplyTooLargeIsATypedError(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{})
	c.WaitForMaster(30 * time.Second)
	ctx := ctxT(t, 3*time.Minute)
	cl := c.Client(t)
	dir := c.Name("")
	for _, part := range []string{"a", "b", "c"} {
		dir += "/" + strings.Repeat(part, wire.MaxComponentLen)
		if _, err := cl.Open(ctx, dir, client.Read|client.Write|client.Create|client.Directory); err != nil {
			t.Fatal(err)
		}
	}
	// Lock names of about 1 KiB: 1700 of them exceed a frame.
	const locks, workers = 1700, 16
	next := atomic.Int64{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= locks; i = next.Add(1) {
				leaf := fmt.Sprintf("%06d", i)
				name := dir + "/" + leaf + strings.Repeat("x", wire.MaxNameLen-len(dir)-1-len(leaf))
				h, err := cl.Open(ctx, name, client.Read|client.Write|client.Create)
				if err == nil {
					var ok bool
					ok, err = h.TryAcquire(ctx, client.Exclusive)
					if err == nil && !ok {
						err = fmt.Errorf("%s: not acquired", name)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := admin.New(cl).Sessions(sctx)
	if !errors.Is(err, client.ErrTooLarge) {
		t.Fatalf("listing sessions whose reply exceeds a frame: %v, want %v", err, client.ErrTooLarge)
	}
	// The cell keeps serving the same client.
	if _, err := cl.Open(ctx, dir, client.Read); err != nil {
		t.Fatalf("after the refused listing: %v", err)
	}
}

// One address that writes faster than MaxIPRate is slowed to it, not cut
// off: every write lands, the burst of a second's worth comes at once,
// and the wait shows in the port's counters.
func TestIPRateSlowsAnAddressWithoutCuttingIt(t *testing.T) {
	const rate = 512 << 10
	c := fixtures.NewCell(t, 1, fixtures.Options{ConnLimits: cell.ConnLimits{MaxIPRate: rate}})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t)
	h, err := cl.Open(ctx, c.Name("rated"), client.Read|client.Write|client.Create)
	if err != nil {
		t.Fatal(err)
	}
	// 12 writes of 200 KiB: 2.3 MiB, of which the burst covers 0.5 MiB
	// and the last read may overdraw by up to 32 KiB (a read waits for the
	// debt of the one before), so the rest takes at least 3.6 s.
	const writes, size = 12, 200 << 10
	start := time.Now()
	for i := range writes {
		want := bytes.Repeat([]byte{byte('a' + i)}, size)
		if err := h.SetContents(ctx, want); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	took := time.Since(start)
	floor := time.Duration(float64(writes*size-rate-32<<10) / rate * float64(time.Second))
	st := srv.ConnStats()
	t.Logf("%d KiB in %v (floor %v at %d KiB/s); reads waited %v in all", writes*size>>10, took.Round(time.Millisecond), floor.Round(time.Millisecond), rate>>10, st.RateWait.Round(time.Millisecond))
	if took < floor {
		t.Fatalf("%d bytes from one address in %v: faster than %d B/s allows (at least %v)", writes*size, took, rate, floor)
	}
	if st.RateWait == 0 || st.OverBudgetConn+st.OverBudgetIP+st.OverBudgetProcess != 0 {
		t.Fatalf("the rate is not what slowed the writes: %+v", st)
	}
	got, _, err := h.GetContentsAndStat(ctx)
	if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte('a' + writes - 1)}, size)) {
		t.Fatalf("after the slowed writes: %d bytes, %v", len(got), err)
	}
}
