package selfcheck

import (
	"context"
	"net"
	"sync"
	"time"
)

// lagDialer wraps dial so that every byte a connection receives is handed
// to the reader lag after it arrived, in order and at full throughput: a
// delay line, not a throttle. One lagging session receives its cache
// invalidations late, so a write that did not wait for that session to
// acknowledge its invalidation completes while the session's cache still
// serves the old value, and the next cache hit is a stale read the checker
// sees.
func lagDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), lag time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil || lag <= 0 {
			return c, err
		}
		lc := &lagConn{Conn: c, lag: lag, chunks: make(chan chunk, 64), closed: make(chan struct{})}
		go lc.pump()
		return lc, nil
	}
}

type chunk struct {
	data []byte
	at   time.Time // when it may be read
	err  error
}

// lagConn is a connection whose reads lag. Its pump goroutine reads the
// underlying connection and ends when that read fails, which Close
// causes.
type lagConn struct {
	net.Conn
	lag    time.Duration
	chunks chan chunk
	closed chan struct{}
	once   sync.Once

	mu  sync.Mutex // serializes Read
	cur chunk
}

func (c *lagConn) pump() {
	for {
		buf := make([]byte, 32<<10)
		n, err := c.Conn.Read(buf)
		select {
		case c.chunks <- chunk{data: buf[:n], at: time.Now().Add(c.lag), err: err}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

func (c *lagConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.cur.data) == 0 {
		if c.cur.err != nil {
			return 0, c.cur.err
		}
		select {
		case ch := <-c.chunks:
			if wait := time.Until(ch.at); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-c.closed:
					t.Stop()
					return 0, net.ErrClosed
				}
			}
			c.cur = ch
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	n := copy(p, c.cur.data)
	c.cur.data = c.cur.data[n:]
	return n, nil
}

func (c *lagConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
