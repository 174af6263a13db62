package cell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"lockcell/wire"
)

// readIndexer is how a follower asks the master for read indexes, for
// linearizable reads it answers itself (master.Server.SetReadIndexer): one
// yamux connection to the master's client port, and one ask in flight at
// a time, shared by every read that arrived before it was sent (a read
// never takes an ask that began before it arrived: that index might miss
// a write acknowledged in between).
type readIndexer struct {
	s *Server

	mu       sync.Mutex
	next     *indexAsk // the ask the reads arriving now wait for
	running  bool
	conn     *yamux.Session
	connAddr string
}

// indexAsk is one ask and its outcome.
type indexAsk struct {
	done  chan struct{}
	index uint64
	err   error
}

// index returns a read index from the master proved after the call.
func (x *readIndexer) index(ctx context.Context) (uint64, error) {
	if x.s.cfg.TLS != nil {
		return 0, errors.New("read indexes are asked over plain TCP only")
	}
	x.mu.Lock()
	a := x.next
	if a == nil {
		a = &indexAsk{done: make(chan struct{})}
		x.next = a
	}
	if !x.running {
		x.running = true
		go x.run()
	}
	x.mu.Unlock()
	select {
	case <-a.done:
		return a.index, a.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run sends the asks one at a time while reads wait for one.
func (x *readIndexer) run() {
	for {
		x.mu.Lock()
		a := x.next
		x.next = nil
		if a == nil {
			x.running = false
			x.mu.Unlock()
			return
		}
		x.mu.Unlock()
		a.index, a.err = x.ask()
		close(a.done)
	}
}

// ask asks the master once, over the kept connection (dialled again when
// the master moved or the connection broke).
func (x *readIndexer) ask() (uint64, error) {
	addr := x.s.leaderHint()
	if addr == "" || addr == x.s.ClientAddr() {
		return 0, errors.New("no other master known")
	}
	ctx, cancel := context.WithTimeout(x.s.ctx, 2*time.Second)
	defer cancel()
	sess, err := x.session(ctx, addr)
	if err != nil {
		return 0, err
	}
	st, err := sess.OpenStream()
	if err != nil {
		x.drop(sess)
		return 0, err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Now()) })
	defer stop()
	h := wire.Header{Method: wire.MethodFollowerRead}
	if err := wire.WriteMessage(st, &h, &wire.FollowerReadRequest{Read: wire.MethodGetStat, MaxStaleMillis: 1, IndexOnly: true}); err != nil {
		x.drop(sess)
		return 0, err
	}
	var status wire.Status
	if err := wire.ReadMessage(st, &status); err != nil {
		x.drop(sess)
		return 0, err
	}
	var resp wire.FollowerReadResponse
	if err := wire.ReadMessage(st, &resp); err != nil {
		x.drop(sess)
		return 0, err
	}
	if status.Code != wire.CodeOK {
		return 0, fmt.Errorf("master %s: %w", addr, status.Err())
	}
	return resp.Index, nil
}

func (x *readIndexer) session(ctx context.Context, addr string) (*yamux.Session, error) {
	x.mu.Lock()
	if x.conn != nil && !x.conn.IsClosed() && x.connAddr == addr {
		s := x.conn
		x.mu.Unlock()
		return s, nil
	}
	old := x.conn
	x.conn = nil
	x.mu.Unlock()
	if old != nil {
		old.Close()
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{wire.RPCMultiplex}); err != nil {
		c.Close()
		return nil, err
	}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	s, err := yamux.Client(c, cfg)
	if err != nil {
		c.Close()
		return nil, err
	}
	x.mu.Lock()
	x.conn, x.connAddr = s, addr
	x.mu.Unlock()
	return s, nil
}

func (x *readIndexer) drop(s *yamux.Session) {
	x.mu.Lock()
	if x.conn == s {
		x.conn = nil
	}
	x.mu.Unlock()
	s.Close()
}
