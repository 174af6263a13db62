package clientport

import (
	"sync"
	"sync/atomic"

	"lockcell/internal/fdlimit"
)

// The client port's connections. Each is a file descriptor, a goroutine,
// a yamux session and its buffers, so each remote IP address, each
// principal and the replica in all get a cap, and all client ports of the
// process together (a development cell runs five) hold at most
// clientFDNumerator/clientFDDenominator of its file descriptors: with the
// HTTP ports' eighth (httpport.go) that leaves a quarter for the Raft
// port, the store and the runtime, so that no number of client
// connections can take the descriptors Raft needs to keep the master's
// leadership (docs/limits.md, "File descriptors in reserve").
//
// Before the TLS handshake a caller is its address: the per-IP cap, the
// replica's cap and the process's share are checked and taken in one step
// at accept (admit, under connsMu; the share by compare-and-swap, given
// back if a later check refuses), before any TLS work, and a connection
// over one is told why and closed (connrefusal.go). The principal is
// known only after the handshake: its cap is checked and taken then
// (admitPrincipal), and a connection over it is told why, over TLS, and
// closed before its first stream is read.

// clientFDNumerator / clientFDDenominator is the share of the process's
// file descriptors all client ports may hold together.
const (
	clientFDNumerator   = 5
	clientFDDenominator = 8
)

// FDShare returns the most connections the client ports of this
// process may hold together (five eighths of the soft RLIMIT_NOFILE) and
// that limit; 0, 0 when the limit is unknown (no share is then enforced).
func FDShare() (share int, limit uint64) {
	limit = fdlimit.Soft()
	if limit == 0 {
		return 0, 0
	}
	return int(min(limit/clientFDDenominator*clientFDNumerator, uint64(1<<30))), limit
}

// clientFDs counts the client connections of every Port of the process
// against FDShare.
var clientFDs struct {
	once sync.Once
	max  int64 // 0: no share known
	open atomic.Int64
}

func takeClientFD() bool {
	clientFDs.once.Do(func() {
		share, _ := FDShare()
		clientFDs.max = int64(share)
	})
	for {
		n := clientFDs.open.Load()
		if clientFDs.max > 0 && n >= clientFDs.max {
			return false
		}
		if clientFDs.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func releaseClientFD() { clientFDs.open.Add(-1) }

// Why a client connection was refused at accept or after its handshake.
type connRefusal int

const (
	connAdmitted connRefusal = iota
	connRefusedPerIP
	connRefusedTotal
	connRefusedFDShare
	connRefusedPerPrincipal
)

func (r connRefusal) String() string {
	switch r {
	case connRefusedPerIP:
		return "too many from one address"
	case connRefusedTotal:
		return "the replica holds its most connections"
	case connRefusedFDShare:
		return "the client ports hold their share of file descriptors"
	case connRefusedPerPrincipal:
		return "too many of one principal"
	}
	return "admitted"
}

// admit counts a new connection from ip against MaxConnsPerIP, MaxConns
// and the process's share of file descriptors, all in one step, or says
// which is full.
func (p *Port) admit(ip string) connRefusal {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	switch {
	case p.perIP[ip] >= p.limits.MaxConnsPerIP:
		return connRefusedPerIP
	case p.open >= p.limits.MaxConns:
		return connRefusedTotal
	case !takeClientFD():
		return connRefusedFDShare
	}
	p.perIP[ip]++
	p.open++
	return connAdmitted
}

// release gives back what admit took.
func (p *Port) release(ip string) {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	if p.perIP[ip]--; p.perIP[ip] <= 0 {
		delete(p.perIP, ip)
	}
	p.open--
	releaseClientFD()
}

// admitPrincipal counts a connection whose handshake named principal
// against MaxConnsPerPrincipal, or reports false when the principal
// holds that many already (a plain cell's callers are all one principal,
// so there the cap is MaxConns's).
func (p *Port) admitPrincipal(principal string) bool {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	if p.perPrincipal[principal] >= p.limits.MaxConnsPerPrincipal {
		return false
	}
	p.perPrincipal[principal]++
	return true
}

func (p *Port) releasePrincipal(principal string) {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	if p.perPrincipal[principal]--; p.perPrincipal[principal] <= 0 {
		delete(p.perPrincipal, principal)
	}
}

// countRefusal counts a refused connection by its reason.
func (p *Port) countRefusal(r connRefusal) {
	switch r {
	case connRefusedPerIP:
		p.stats.perIP.Add(1)
	case connRefusedTotal:
		p.stats.connsTotal.Add(1)
	case connRefusedFDShare:
		p.stats.connsFDShare.Add(1)
	case connRefusedPerPrincipal:
		p.stats.connsPrincipal.Add(1)
	}
}

// openConns reports the client connections the replica holds now.
func (p *Port) openConns() int {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	return p.open
}
