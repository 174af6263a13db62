package frame

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// BenchmarkYamuxCalls runs echo calls (a stream each: 100 bytes out, 100
// back, as a small lockcell call) over real loopback TCP from 1 and 16
// goroutines, with yamux writing straight to the connection and through a
// BatchConn on both ends. It reports the writes both ends made per call,
// counted on the TCP connections.
func BenchmarkYamuxCalls(b *testing.B) {
	for _, batched := range []bool{false, true} {
		for _, callers := range []int{1, 16} {
			name := fmt.Sprintf("direct/callers=%d", callers)
			if batched {
				name = fmt.Sprintf("batched/callers=%d", callers)
			}
			b.Run(name, func(b *testing.B) {
				cc, sc := tcpPair(b)
				cw, sw := &countingConn{Conn: cc}, &countingConn{Conn: sc}
				var cconn, sconn net.Conn = cw, sw
				if batched {
					cconn, sconn = NewBatchConn(cw), NewBatchConn(sw)
				}
				echoMux(b, sconn)
				sess, err := yamux.Client(cconn, quietMux())
				if err != nil {
					b.Fatal(err)
				}
				defer sess.Close()
				msg := bytes.Repeat([]byte("b"), 100)
				cw.take()
				sw.take()
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				errs := make(chan error, callers)
				per := (b.N + callers - 1) / callers
				for range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range per {
							if err := echoCall(sess, msg); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				cl, _ := cw.take()
				sl, _ := sw.take()
				calls := float64(per * callers)
				b.ReportMetric(float64(len(cl))/calls, "client-writes/call")
				b.ReportMetric(float64(len(sl))/calls, "server-writes/call")
				b.ReportMetric(calls/elapsed.Seconds(), "calls/s")
			})
		}
	}
}
