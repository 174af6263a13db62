package clientport

import (
	"errors"
	"net"
	"time"
)

func (p *Port) acceptLoop() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			p.log.Warn("accept failed", "err", err)
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		ip := RemoteIP(conn)
		if r := p.admit(ip); r != connAdmitted {
			p.refuseConn(conn, conn, r, "")
			continue
		}
		p.wg.Add(1)
		go p.serveConn(conn, ip)
	}
}

// RemoteIP is the address a connection comes from, without its port: the
// key of the per-address caps (the HTTP port's too).
func RemoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}
