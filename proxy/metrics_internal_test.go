package proxy

import (
	"testing"

	"lockcell/wire"
)

// Counting a forwarded call, or a client KeepAlive answered, allocates
// nothing once its series exists: the proxy's hot path stays a lookup
// and an atomic add.
func TestCallMetricAllocatesNothing(t *testing.T) {
	m := newMetrics()
	m.call(wire.MethodOpen, wire.CodeOK)
	if n := testing.AllocsPerRun(1000, func() { m.call(wire.MethodOpen, wire.CodeOK) }); n != 0 {
		t.Fatalf("%v allocations a counted call", n)
	}
	if n := testing.AllocsPerRun(1000, func() { m.kaLease.Inc(); m.batchSessions.Observe(17) }); n != 0 {
		t.Fatalf("%v allocations a counted KeepAlive and batch", n)
	}
}
