package client

import (
	"context"
	"crypto/tls"
	"sync"
	"time"
)

// Connections shared by the Clients of a process (Config.ShareConnections).
// A Client is one session, and without sharing each holds its own
// connection to the master: a process with many sessions holds as many
// connections, and a replica's cap per address (64 by default) refuses
// the rest. Sharing Clients use one connection per replica and way of
// reaching it (the same TLS configuration, the same dial timeout, the
// default dialer), each session's calls being streams of it, as the
// wire allows ("Many sessions may share a connection").
//
// A shared connection is counted: each Client that uses it holds a
// reference, given back when it moves on (a redirect, its Close), and the
// last closes it. A Client that must end the calls it has parked on a
// connection (a frozen replica, a master that stepped down) closes it
// for all: the others' calls on it fail as on any lost connection and
// are retried, mutating ones under their request ids.

// sharedKey is what two Clients must agree on to share a connection.
type sharedKey struct {
	addr    string
	tls     *tls.Config
	timeout time.Duration
}

// sharedConn is one shared connection and its references.
type sharedConn struct {
	key  sharedKey
	cn   *conn
	refs int
}

var shared struct {
	mu sync.Mutex
	m  map[sharedKey]*sharedConn
}

// canShare reports whether connections dialled with o may be shared: a
// Dialer of the application's own may do anything, so only the default
// one's are.
func canShare(o *dialOpts) bool { return o.dialer == nil }

// acquireShared returns the process's live connection to addr dialled
// with o, with one more reference, or dials one.
func acquireShared(ctx context.Context, o *dialOpts, addr string, timeout time.Duration) (*conn, error) {
	key := sharedKey{addr: addr, tls: o.tls, timeout: o.timeout}
	if take := takeShared(key); take != nil {
		return take, nil
	}
	cn, err := dial(ctx, o, addr, timeout)
	if err != nil {
		return nil, err
	}
	shared.mu.Lock()
	if e := shared.m[key]; e != nil && e.cn.alive() {
		// Another Client dialled it meanwhile: use theirs.
		e.refs++
		shared.mu.Unlock()
		cn.close()
		return e.cn, nil
	}
	if shared.m == nil {
		shared.m = map[sharedKey]*sharedConn{}
	}
	e := &sharedConn{key: key, cn: cn, refs: 1}
	cn.shared = e
	shared.m[key] = e
	shared.mu.Unlock()
	return cn, nil
}

func takeShared(key sharedKey) *conn {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if e := shared.m[key]; e != nil && e.cn.alive() {
		e.refs++
		return e.cn
	}
	return nil
}

// release gives back one reference to cn, closing it with the last; with
// force, it closes cn at once for every Client that uses it. A connection
// that is not shared is closed.
func (cn *conn) release(force bool) {
	e := cn.shared
	if e == nil {
		cn.close()
		return
	}
	shared.mu.Lock()
	e.refs--
	last := e.refs <= 0
	if (last || force) && shared.m[e.key] == e {
		delete(shared.m, e.key)
	}
	shared.mu.Unlock()
	if last || force {
		cn.close()
	}
}
