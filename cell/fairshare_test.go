package cell_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// Sixteen addresses each hold almost-full frames just under their own
// budget, together more than three times the process's, and redial as
// soon as they are cut (the budgets are a quarter of the defaults, so
// that the race detector keeps up with the attack). A client on another address that holds little (a session's
// KeepAlives and small writes) keeps being read and answered: every call
// within 2 s, its session alive on a 3 s lease, its connection never
// cut. The attackers are the ones held and closed, and the process never
// holds more than its budget and reserve (plus the one read per
// connection the budgets allow).
func TestRequestBudgetDoesNotStarveSmallHolders(t *testing.T) {
	if testing.Short() {
		t.Skip("sixteen addresses pushing 250 MiB of partial frames")
	}
	const (
		sources     = 16
		connsPerIP  = 2
		streams     = 7 // of 250 KiB: 1.7 MiB, with the frame buffers' room 1.8 MiB a connection
		callBound   = 2 * time.Second
		attackFor   = 8 * time.Second
		streamBytes = 250 << 10
	)
	d := cell.ConnLimits{MaxConnBuffer: 2 << 20, MaxIPBuffer: 4 << 20, MaxBuffer: 16 << 20, BufferReserve: 4 << 20}
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: 3 * time.Second, ConnLimits: d})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	if got := srv.ConnStats(); got.RequestHeld != 0 {
		t.Fatalf("the replica holds %d request bytes before the test", got.RequestHeld)
	}
	ctx := ctxT(t, 3*time.Minute)

	var dials atomic.Int32
	cfg := c.ClientConfig()
	cfg.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}).DialContext(ctx, network, addr)
	}
	victim := c.ClientWith(t, cfg)
	h, err := victim.Open(ctx, c.Name("victim"), client.Read|client.Write|client.Create, client.WithoutCache())
	if err != nil {
		t.Fatal(err)
	}
	dialled := dials.Load()

	// The attack: each address keeps connsPerIP connections, each holding
	// streams almost-full frames it never finishes; a connection the
	// replica cuts is replaced at once.
	actx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var cut atomic.Int64
	for i := range sources {
		from := fmt.Sprintf("127.0.0.%d", 2+i)
		for range connsPerIP {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for actx.Err() == nil {
					sess, err := rawMux(t, from, srv.ClientAddr())
					if err != nil {
						time.Sleep(10 * time.Millisecond) // pacing a redial, not synchronising
						continue
					}
					wait := stallFrames(sess, streams, streamBytes)
					select {
					case <-sess.CloseChan():
						cut.Add(1)
					case <-actx.Done():
					}
					sess.Close()
					wait()
				}
			}()
		}
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	// Under way once the process budget is full.
	deadline := time.Now().Add(30 * time.Second)
	for srv.ConnStats().RequestHeld < d.MaxBuffer {
		if time.Now().After(deadline) {
			t.Fatalf("the attack never filled the process budget: %+v", srv.ConnStats())
		}
		time.Sleep(10 * time.Millisecond)
	}

	var lats []time.Duration
	began := time.Now()
	for i := 0; time.Since(began) < attackFor; i++ {
		want := fmt.Appendf(nil, "write %d under attack", i)
		t0 := time.Now()
		if err := h.SetContents(ctx, want); err != nil {
			t.Fatalf("write %d under attack: %v", i, err)
		}
		lats = append(lats, time.Since(t0))
		t0 = time.Now()
		got, _, err := h.GetContentsAndStat(ctx)
		if err != nil || string(got) != string(want) {
			t.Fatalf("read %d under attack: %q, %v", i, got, err)
		}
		lats = append(lats, time.Since(t0))
	}
	st := srv.ConnStats()
	stop()
	wg.Wait()
	slices.Sort(lats)
	p99 := lats[len(lats)*99/100]
	t.Logf("victim: %d calls in %v, p50 %v p99 %v max %v; attackers cut %d times; %+v",
		len(lats), attackFor, lats[len(lats)/2], p99, lats[len(lats)-1], cut.Load(), st)

	if worst := lats[len(lats)-1]; worst > callBound {
		t.Errorf("a call of the victim took %v under attack (bound %v): the process budget starved it", worst, callBound)
	}
	if n := dials.Load(); n != dialled {
		t.Errorf("the victim dialled %d more times: its connection was cut", n-dialled)
	}
	if _, err := admin.New(victim).Sessions(ctx); err != nil {
		t.Errorf("the victim's session after the attack: %v", err)
	}
	if st.OverBudgetProcess == 0 || cut.Load() == 0 {
		t.Errorf("no attacker was cut at the process budget (%d cuts in all): %+v", cut.Load(), st)
	}
	if st.ReserveReads == 0 {
		t.Errorf("nothing was read from the reserve: %+v", st)
	}
	// One read of at most 32 KiB per connection may pass a level; the
	// memory counted around the bytes adds, per connection, at most the
	// room of a frame chunk per stream being read.
	conns := int64(sources*connsPerIP + 1)
	if bound := d.MaxBuffer + d.BufferReserve + conns*32<<10; st.RequestBytesPeak > bound {
		t.Errorf("the process held %d KiB of requests; budget and reserve are %d KiB, %d KiB with one read per connection",
			st.RequestBytesPeak>>10, (d.MaxBuffer+d.BufferReserve)>>10, bound>>10)
	}
	if bound := d.MaxBuffer + d.BufferReserve + conns*(32<<10+streams*16<<10); st.RequestHeldPeak > bound {
		t.Errorf("the process counted %d KiB of requests and their buffers; the bound is %d KiB", st.RequestHeldPeak>>10, bound>>10)
	}
}
