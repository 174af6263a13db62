package cell_test

import (
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/fixtures"
)

// TestIdleDrainMetrics: an operator sees an idle drain on /metrics. A
// client dials a one-replica cell whose idle timeout is 300 ms and makes
// no further call: the master stops extending its lease (a drain,
// lockcell_sessions_idle_drains_total) and closes it once the lease has
// run out (lockcell_sessions_idle_closed_total); both counters start at
// zero, so a counter wired to the wrong figure or not at all fails.
func TestIdleDrainMetrics(t *testing.T) {
	c := fixtures.NewCell(t, 1, fixtures.Options{HTTP: true, Configure: func(cfg *cell.Config) {
		cfg.SessionLimits.IdleSessionTimeout = 300 * time.Millisecond
	}})
	s := c.Server(c.WaitForMaster(10 * time.Second))
	read := func(name string) float64 {
		v, ok := sample(scrape(t, nil, "http", s.MetricsAddr()), name)
		if !ok {
			t.Fatalf("/metrics has no %s", name)
		}
		return v
	}
	if d, cl := read("lockcell_sessions_idle_drains_total"), read("lockcell_sessions_idle_closed_total"); d != 0 || cl != 0 {
		t.Fatalf("before any session: %v drains, %v idle closes", d, cl)
	}
	c.Client(t) // Dial's CreateSession is its last call
	deadline := time.Now().Add(15 * time.Second)
	for {
		d, cl := read("lockcell_sessions_idle_drains_total"), read("lockcell_sessions_idle_closed_total")
		if d >= 1 && cl >= 1 {
			if d < cl {
				t.Fatalf("%v idle closes but only %v drains: every idle close follows a drain", cl, d)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15 s: %v drains, %v idle closes on /metrics", d, cl)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
}
