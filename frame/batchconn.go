package frame

import (
	"fmt"
	"net"
	"sync"
)

// BatchConnBuffer is the most bytes a BatchConn holds that are not yet
// written, the batch being written included: 64 KiB is room for hundreds
// of small replies, so batches are never cut short by it under load,
// while a peer that never reads costs no more than this beyond what the
// kernel's socket buffers hold.
const BatchConnBuffer = 64 << 10

// batchBufKeep is the largest buffer a BatchConn gives back to the pool
// for reuse: one that grew past it for a large frame is left to the
// garbage collector, so the pool never pins large buffers.
const batchBufKeep = 16 << 10

type batchBuf struct{ b []byte }

var batchBufs = sync.Pool{New: func() any { return &batchBuf{b: make([]byte, 0, 4<<10)} }}

// BatchConn is a net.Conn for a yamux session to write through: it turns
// yamux's two writes per frame (header, then body) and one write per
// frame into one write per batch of whole frames. hashicorp/yamux writes
// every frame from one goroutine, header and body separately, and waits
// for each write before taking the next frame; through a BatchConn each
// Write only copies its bytes into a buffer and returns, and a goroutine
// writes what is buffered to the connection underneath:
//
//   - a frame goes out whole, header and body in one write, as soon as
//     its last byte is buffered: a lone frame is written at once, with no
//     timer and nothing waited for;
//   - frames buffered while a write is in flight go out together in the
//     next write (group commit of system calls: under load one write
//     carries many frames, and over TLS one record instead of two per
//     frame);
//   - at most BatchConnBuffer bytes are held, the batch being written
//     included: a Write blocks while the buffer is full, so a peer that
//     does not read backs writers up as the connection itself would. A
//     frame larger than the buffer goes out in pieces.
//
// The first write that fails closes the connection underneath, and every
// later Write returns its error. Close closes the connection underneath,
// returns any Write blocked for room with net.ErrClosed, discards frames
// not yet written (yamux, too, drops the frames queued when its session
// closes) and returns once the writing goroutine has ended; the goroutine
// runs only while there is something to write, so an idle connection has
// none. Reads, addresses and deadlines are the underlying connection's;
// a write deadline bounds the goroutine's writes, and one it passes is a
// failed write.
//
// Only yamux frames may be written through a BatchConn: it parses the
// byte stream as frames to know where they end.
type BatchConn struct {
	net.Conn
	max int // BatchConnBuffer; smaller in tests

	mu       sync.Mutex
	room     sync.Cond // broadcast when bytes leave, on failure and on Close
	buf      *batchBuf // accepted, not yet being written (nil: none)
	whole    int       // the prefix of buf that ends where a frame ends
	inflight int       // bytes of the batch being written
	flushing bool      // the writing goroutine runs
	err      error     // the first failed write
	closed   bool
	frames   Scanner
	waiting  int // Writes blocked for room (tests watch it)
	flusher  sync.WaitGroup
}

// NewBatchConn returns c with its writes batched. Bytes written to c
// before (a protocol byte, a handshake) are not part of the frame stream
// and must not be written through the BatchConn.
func NewBatchConn(c net.Conn) *BatchConn {
	return newBatchConn(c, BatchConnBuffer)
}

func newBatchConn(c net.Conn, max int) *BatchConn {
	bc := &BatchConn{Conn: c, max: max}
	bc.room.L = &bc.mu
	return bc
}

// Write buffers p and returns once all of it is buffered (or, under load,
// once the writing goroutine has made room for the rest). It returns the
// error of an earlier failed write, or net.ErrClosed after Close.
func (c *BatchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for len(p) > 0 {
		for c.err == nil && !c.closed && c.held() >= c.max {
			c.waiting++
			c.room.Wait()
			c.waiting--
		}
		if c.err != nil {
			return n, c.err
		}
		if c.closed {
			return n, net.ErrClosed
		}
		k := min(len(p), c.max-c.held())
		if c.buf == nil {
			c.buf = batchBufs.Get().(*batchBuf)
		}
		start := len(c.buf.b)
		c.buf.b = append(c.buf.b, p[:k]...)
		if end := c.frames.Scan(p[:k]); end >= 0 {
			c.whole = start + end
		}
		p, n = p[k:], n+k
		if !c.flushing && c.ready() > 0 {
			c.flushing = true
			c.flusher.Add(1)
			go c.flush()
		}
	}
	return n, nil
}

// held is the bytes buffered and being written; mu held.
func (c *BatchConn) held() int {
	h := c.inflight
	if c.buf != nil {
		h += len(c.buf.b)
	}
	return h
}

// ready is how many buffered bytes may be written now: the whole frames,
// or everything when the buffer is full of one frame larger than it; mu
// held.
func (c *BatchConn) ready() int {
	if c.buf == nil {
		return 0
	}
	if c.whole == 0 && len(c.buf.b) >= c.max {
		return len(c.buf.b)
	}
	return c.whole
}

// flush writes what is ready, batch after batch, until nothing is, the
// connection failed or it is closed. It is the writing goroutine: Write
// starts it when it finds none running, Close waits for it.
func (c *BatchConn) flush() {
	defer c.flusher.Done()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.closed {
		take := c.ready()
		if take == 0 {
			break
		}
		batch := c.buf
		c.buf = nil
		if rest := batch.b[take:]; len(rest) > 0 {
			// The start of a frame whose end is still to come (most
			// often a header whose body is being copied in).
			c.buf = batchBufs.Get().(*batchBuf)
			c.buf.b = append(c.buf.b, rest...)
		}
		c.whole = 0 // the rest holds no frame's end: take ended at the last
		c.inflight = take
		c.mu.Unlock()
		_, err := c.Conn.Write(batch.b[:take])
		if cap(batch.b) <= batchBufKeep {
			batch.b = batch.b[:0]
			batchBufs.Put(batch)
		}
		c.mu.Lock()
		c.inflight = 0
		c.room.Broadcast()
		if err != nil {
			if c.err == nil && !c.closed {
				c.err = fmt.Errorf("frame: write: %w", err)
			}
			c.buf, c.whole = nil, 0
			// Closed outside the lock: a TLS close writes an alert.
			c.mu.Unlock()
			c.Conn.Close()
			c.mu.Lock()
		}
	}
	c.flushing = false
}

// Close closes the connection underneath, discarding frames not yet
// written, returns Writes blocked for room with net.ErrClosed, and waits
// for the writing goroutine to end (closing the connection ends a write
// it is blocked in).
func (c *BatchConn) Close() error {
	c.mu.Lock()
	c.closed = true
	if c.buf != nil {
		c.buf.b = c.buf.b[:0]
		if cap(c.buf.b) <= batchBufKeep {
			batchBufs.Put(c.buf)
		}
		c.buf, c.whole = nil, 0
	}
	c.room.Broadcast()
	c.mu.Unlock()
	err := c.Conn.Close()
	c.flusher.Wait()
	return err
}
