package master

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"
)

// BenchmarkCacheRegistrationCost measures the master memory one cacher
// registration holds, for sizing Limits.CacheRegistrations: 1,000
// sessions each registered for 100 names of a 1,000-name tree, with
// names of about 60 bytes (each read's name is its own string, as the
// wire decodes it) and of 1 KiB, the longest.
func BenchmarkCacheRegistrationCost(b *testing.B) {
	for _, nameLen := range []int{60, 1024} {
		b.Run(fmt.Sprintf("name%d", nameLen), func(b *testing.B) {
			const sessions, each, names = 1000, 100, 1000
			pad := strings.Repeat("x", nameLen-len("/ls/c/000000-"))
			for range b.N {
				clock, sess := newFakeClock(), newFakeSessions()
				for id := uint64(1); id <= sessions; id++ {
					sess.add(id, clock.Now().Add(time.Hour))
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				inv := newInvalidator(clock, sess, "admin", testLease, slog.New(slog.NewTextHandler(io.Discard, nil)))
				for id := uint64(1); id <= sessions; id++ {
					for n := range each {
						name := fmt.Sprintf("/ls/c/%06d-%s", (int(id)*7+n*13)%names, pad)
						if !inv.register(id, fmt.Sprintf("p%d", id%10), name) {
							b.Fatal("a registration was refused")
						}
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				regs, _, _, _, _ := inv.registrations()
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(regs), "heap-B/registration")
				runtime.KeepAlive(inv)
			}
		})
	}
}
