package cell_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/fixtures"
	"lockcell/wire"
)

// createSessionOn creates a session over sess with a raw CreateSession.
func createSessionOn(sess *yamux.Session, epoch, seq uint64) (uint64, error) {
	s, err := sess.OpenStream()
	if err != nil {
		return 0, err
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(hostileWait))
	var buf []byte
	w := writerFunc(func(b []byte) (int, error) { buf = append(buf, b...); return len(b), nil })
	if err := wire.WriteMessage(w, &wire.Header{Method: wire.MethodCreateSession, Epoch: epoch, Seq: seq}, &wire.CreateSessionRequest{}); err != nil {
		return 0, err
	}
	if _, err := s.Write(buf); err != nil {
		return 0, err
	}
	var st wire.Status
	var resp wire.CreateSessionResponse
	if err := wire.ReadMessage(s, &st); err != nil {
		return 0, err
	}
	if st.Code != wire.CodeOK {
		return 0, fmt.Errorf("create session: %+v", st)
	}
	if err := wire.ReadMessage(s, &resp); err != nil {
		return 0, err
	}
	return resp.Session, nil
}

// createRawSessions creates n sessions, spread over muxes, from workers
// goroutines at once, and returns their ids in order.
func createRawSessions(t *testing.T, muxes []*yamux.Session, epoch uint64, n, workers int) []uint64 {
	t.Helper()
	ids := make([]uint64, n)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				id, err := createSessionOn(muxes[i%len(muxes)], epoch, uint64(i+1))
				if err != nil {
					errs <- err
					return
				}
				ids[i] = id
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// waitParked polls cond until it holds, or fails the test at the deadline
// with what says.
func waitParked(t *testing.T, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A KeepAlive parked at the master holds no goroutine: a thousand of them,
// over four connections of a real in-process cell, leave the process's
// goroutine count within a small constant of what it was without them. A
// client that closes one call's stream ends that call, and a connection's
// end ends every call parked over it, down to the goroutines of before.
func TestParkedKeepAlivesHoldNoGoroutines(t *testing.T) {
	const n, conns, slack = 1000, 4, 64
	c := fixtures.NewCell(t, 1, fixtures.Options{LeaseTTL: 20 * time.Second})
	srv := c.Server(c.WaitForMaster(30 * time.Second))
	_, epoch := srv.IsMaster()
	m := srv.Master()
	muxes := make([]*yamux.Session, conns)
	for i := range muxes {
		muxes[i] = hostileMux(t, srv.ClientAddr())
	}
	ids := createRawSessions(t, muxes, epoch, n, 32)
	// The baseline: the cell and the four connections, no call in flight.
	baseline := runtime.NumGoroutine()
	waitParked(t, 10*time.Second, func() bool {
		baseline = min(baseline, runtime.NumGoroutine())
		return runtime.NumGoroutine() <= baseline
	}, func() string { return "goroutines did not settle" })

	streams := make([]*yamux.Stream, n)
	for i, id := range ids {
		st, err := muxes[i%conns].OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = st
		if _, err := st.Write(encodeFrames(t, &wire.Header{Method: wire.MethodKeepAlive, Session: id, Epoch: epoch},
			&wire.KeepAliveRequest{})); err != nil {
			t.Fatal(err)
		}
	}
	waitParked(t, 30*time.Second, func() bool { calls, _ := m.ParkedKeepAlives(); return calls == n }, func() string {
		calls, _ := m.ParkedKeepAlives()
		return fmt.Sprintf("%d of %d KeepAlives parked", calls, n)
	})
	// The streams' goroutines end once their calls park; the calls stay
	// parked for most of a lease (20 s), so all of them are counted here.
	waitParked(t, 8*time.Second, func() bool {
		if calls, _ := m.ParkedKeepAlives(); calls != n {
			t.Fatalf("%d of %d KeepAlives parked before their holds ended", calls, n)
		}
		return runtime.NumGoroutine() <= baseline+slack
	}, func() string {
		return fmt.Sprintf("%d goroutines with %d KeepAlives parked, %d without: one stays per parked call",
			runtime.NumGoroutine(), n, baseline)
	})
	t.Logf("%d KeepAlives parked over %d connections: %d goroutines, %d before", n, conns, runtime.NumGoroutine(), baseline)

	// The client closes one call's stream: that call ends, and only it.
	streams[0].Close()
	waitParked(t, 10*time.Second, func() bool { calls, _ := m.ParkedKeepAlives(); return calls == n-1 }, func() string {
		calls, _ := m.ParkedKeepAlives()
		return fmt.Sprintf("%d KeepAlives parked after one stream closed; want %d", calls, n-1)
	})
	// A connection ends: its calls end, the others stay.
	muxes[1].Close()
	waitParked(t, 10*time.Second, func() bool {
		calls, cs := m.ParkedKeepAlives()
		return calls == n-1-n/conns && cs == conns-1
	}, func() string {
		calls, cs := m.ParkedKeepAlives()
		return fmt.Sprintf("%d KeepAlives parked over %d connections after one closed; want %d over %d", calls, cs, n-1-n/conns, conns-1)
	})
	for _, mux := range muxes {
		mux.Close()
	}
	waitParked(t, 10*time.Second, func() bool { calls, cs := m.ParkedKeepAlives(); return calls == 0 && cs == 0 }, func() string {
		calls, cs := m.ParkedKeepAlives()
		return fmt.Sprintf("%d KeepAlives still parked over %d connections after every connection closed", calls, cs)
	})
	// Nothing leaks: fewer goroutines than with the connections open.
	waitParked(t, 10*time.Second, func() bool { return runtime.NumGoroutine() <= baseline }, func() string {
		return fmt.Sprintf("%d goroutines after every connection closed; %d with them open and idle", runtime.NumGoroutine(), baseline)
	})
}
