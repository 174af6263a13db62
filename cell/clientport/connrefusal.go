package clientport

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"lockcell/wire"
)

// A connection over a cap is told why before it is closed
// (docs/transport.md, "Refused connections"): the replica writes
// wire.RPCRefused and a Status of CodeTooMany naming the cap instead of
// starting yamux, so a client reports the cap at once instead of hunting
// for a master that will not take it. At accept the refusal goes out in
// plain bytes, before any TLS work (the client reads it in place of the
// ServerHello); a connection over its principal's cap gets it over TLS
// after the handshake.

// refusalLogEvery is the most often refused connections are logged: one
// line with the counts since the last, so a flood of refusals is not a
// flood of lines.
const refusalLogEvery = 10 * time.Second

// refusalDrainers bounds the refused connections a replica keeps open at
// once to read what their clients already sent. Closing a socket with
// unread bytes resets it, and a client whose next write meets the reset
// may lose the refusal it has not yet read; past this many, a refused
// connection is closed at once (its client then sees the end of the
// connection, as an old client does).
const refusalDrainers = 64

// refusalDrain is how long a refused connection is read before it is
// closed: long enough for the client to read the refusal and close
// first.
const refusalDrain = time.Second

// refusalNames are the reasons as lockcell_client_connections_refused_total
// labels them.
var refusalNames = map[connRefusal]string{connRefusedPerIP: "per_ip", connRefusedTotal: "total",
	connRefusedFDShare: "fd_share", connRefusedPerPrincipal: "per_principal"}

// refusalLog holds the refusals not yet logged.
type refusalLog struct {
	mu      sync.Mutex
	logged  time.Time
	pending map[connRefusal]uint64
	example string
}

// refusalMsg says which cap refused a connection, with its value and the
// flag that sets it.
func (p *Port) refusalMsg(r connRefusal, principal string) string {
	l := p.limits
	switch r {
	case connRefusedPerIP:
		return fmt.Sprintf("this address holds %d connections to the replica, its cap (--max-conns-per-ip %d)", l.MaxConnsPerIP, l.MaxConnsPerIP)
	case connRefusedTotal:
		return fmt.Sprintf("the replica holds %d client connections, its cap (--max-conns %d)", l.MaxConns, l.MaxConns)
	case connRefusedFDShare:
		return fmt.Sprintf("the replica's client ports hold their share of its file descriptors (%d: five eighths of its limit)", clientFDs.max)
	case connRefusedPerPrincipal:
		return fmt.Sprintf("principal %q holds %d connections to the replica, its cap (--max-conns-per-principal %d)",
			principal, l.MaxConnsPerPrincipal, l.MaxConnsPerPrincipal)
	}
	return r.String()
}

// refuseConn counts and logs a refused connection, tells its client why
// on conn (raw or, after the handshake, TLS) and closes raw: after
// reading what the client sent for up to refusalDrain, in a goroutine of
// its own, while fewer than refusalDrainers are being read; at once
// otherwise. The write cannot stall the caller: a new
// connection's socket buffer holds a refusal's few dozen bytes, and the
// write deadline ends it if not.
func (p *Port) refuseConn(conn, raw net.Conn, r connRefusal, principal string) {
	p.countRefusal(r)
	p.logRefusal(r, raw.RemoteAddr().String(), principal)
	raw.SetWriteDeadline(time.Now().Add(refusalDrain))
	if err := wire.WriteRefusal(conn, p.refusalMsg(r, principal)); err != nil {
		raw.Close()
		return
	}
	tcp, ok := raw.(*net.TCPConn)
	if !ok || p.draining.Add(1) > refusalDrainers {
		if ok {
			p.draining.Add(-1)
		}
		raw.Close()
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.draining.Add(-1)
		drainRefused(tcp)
	}()
}

// drainRefused half-closes a refused connection, so its client reads the
// refusal and then its end, and reads what the client sends until it
// closes or refusalDrain passes.
func drainRefused(tcp *net.TCPConn) {
	defer tcp.Close()
	tcp.CloseWrite()
	tcp.SetReadDeadline(time.Now().Add(refusalDrain))
	io.Copy(io.Discard, io.LimitReader(tcp, 64<<10))
}

// logRefusal logs, at INFO, the refusals since the last report when that
// is at least refusalLogEvery old: the first of a quiet period at once,
// and then one line per refusalLogEvery at most, with the counts by
// reason and one example.
func (p *Port) logRefusal(r connRefusal, remote, principal string) {
	l := &p.refusals
	l.mu.Lock()
	if l.pending == nil {
		l.pending = map[connRefusal]uint64{}
	}
	l.pending[r]++
	l.example = remote + ": " + r.String()
	if r == connRefusedPerPrincipal {
		l.example += " (" + principal + ")"
	}
	now := time.Now()
	if now.Sub(l.logged) < refusalLogEvery {
		l.mu.Unlock()
		return
	}
	l.logged = now
	counts, example := l.pending, l.example
	l.pending = nil
	l.mu.Unlock()
	args := []any{}
	for _, why := range []connRefusal{connRefusedPerIP, connRefusedTotal, connRefusedFDShare, connRefusedPerPrincipal} {
		if n := counts[why]; n > 0 {
			args = append(args, refusalNames[why], n)
		}
	}
	args = append(args, "example", example, "max_conns_per_ip", p.limits.MaxConnsPerIP, "max_conns", p.limits.MaxConns,
		"max_conns_per_principal", p.limits.MaxConnsPerPrincipal, "next_report_in", refusalLogEvery)
	p.log.Info("client port: connections refused over their caps since the last report, each told why (counted, not logged one by one)", args...)
}
