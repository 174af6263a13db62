package client

import (
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"lockcell/wire"
)

// Identity is what a client declares about itself when it creates its
// session, so that people looking at a lock (Stat, `lockcell who`,
// `lockcell locks`) can tell which process holds or waits for it: the
// host it runs on, its process id and its program's name. The cell
// records it with the session and shows it with each of the session's
// holds and waits; it checks only the form (each of Host and Program at
// most MaxIdentityLen bytes of printable UTF-8, PID not negative), never
// the truth, so it identifies, it does not authenticate: the principal
// does that.
type Identity struct {
	Host    string `json:"host,omitempty"`
	PID     int    `json:"pid,omitempty"`
	Program string `json:"program,omitempty"`
}

// ProcessIdentity returns this process's identity as Dial declares it by
// default: os.Hostname, os.Getpid and the base name of os.Args[0], each
// made fit to declare (cut to MaxIdentityLen bytes, control characters
// replaced by '?'), and empty where the process cannot tell.
func ProcessIdentity() Identity {
	id := Identity{PID: os.Getpid()}
	if h, err := os.Hostname(); err == nil {
		id.Host = fitIdentity(h)
	}
	if len(os.Args) > 0 && os.Args[0] != "" {
		id.Program = fitIdentity(filepath.Base(os.Args[0]))
	}
	return id
}

// fitIdentity makes s acceptable to the cell: valid UTF-8 without control
// characters, at most MaxIdentityLen bytes, cut at a character boundary.
func fitIdentity(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
	for len(s) > MaxIdentityLen {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}

// declaredIdentity is the identity Dial declares for cfg: none with
// NoIdentity; otherwise Config.Identity with each empty field filled in
// from ProcessIdentity.
func declaredIdentity(cfg *Config) Identity {
	if cfg.NoIdentity {
		return Identity{}
	}
	id, proc := cfg.Identity, ProcessIdentity()
	if id.Host == "" {
		id.Host = proc.Host
	}
	if id.PID == 0 {
		id.PID = proc.PID
	}
	if id.Program == "" {
		id.Program = proc.Program
	}
	return id
}

// LockHolder is one holder of a lock, as Stat reports it: the holder's
// session id (the id Client.Session and Sessions report), the principal
// that session authenticated as ("" in a cell without TLS), the identity
// its client declared (empty when it declared none), and Since, when the
// lock was granted to it by the master's clock (zero when unknown: a
// grant made before the cell timed grants).
//
// Stat.Holders is filled by the reads GetStat and GetContentsAndStat (a
// Stat returned by a write leaves it empty), in grant order and for at
// most the first MaxStatHolders holders; Stat.LockHolders counts them all.
// It is as fresh as the rest of the Stat: a cached Stat is invalidated
// whenever the lock changes hands. A caller that may not read the node
// learns nothing of its holders (the read fails with ErrPermission, or
// ErrNotFound when the caller may neither read nor write it).
type LockHolder struct {
	Session   uint64 `json:"session"`
	Principal string `json:"principal"`
	Identity
	Since time.Time `json:"since,omitzero"`
}

// LockDelayCause is what started a lock's lock-delay, as Stat reports it
// (Stat.LockDelayBy): the session that expired while holding the lock,
// its principal and declared identity, and Expired, when the master
// expired it. The lock-delay runs from Expired to Stat.LockDelayUntil.
type LockDelayCause struct {
	Session   uint64 `json:"session"`
	Principal string `json:"principal"`
	Identity
	Expired time.Time `json:"expired,omitzero"`
}

func holdersFrom(hs []wire.LockHolder) []LockHolder {
	if len(hs) == 0 {
		return nil
	}
	out := make([]LockHolder, len(hs))
	for i, h := range hs {
		out[i] = LockHolder{Session: h.Session, Principal: h.Principal,
			Identity: Identity{Host: h.Host, PID: int(h.PID), Program: h.Program}, Since: unixTime(h.Since)}
	}
	return out
}

func delayCauseFrom(c *wire.LockDelayCause) *LockDelayCause {
	if c == nil {
		return nil
	}
	return &LockDelayCause{Session: c.Session, Principal: c.Principal,
		Identity: Identity{Host: c.Host, PID: int(c.PID), Program: c.Program}, Expired: unixTime(c.Time)}
}

// unixTime is the time of Unix nanoseconds ns; zero for 0 (unknown).
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// holdersSize is what a cached Stat's holders cost beyond the entry's
// fixed overhead, for the cache's byte budget.
func holdersSize(hs []wire.LockHolder) int64 {
	n := int64(0)
	for _, h := range hs {
		n += int64(len(h.Principal)+len(h.Host)+len(h.Program)) + 64
	}
	return n
}

func identityRequest(name string, id Identity) *wire.CreateSessionRequest {
	return &wire.CreateSessionRequest{ClientName: name, Host: id.Host, PID: int64(id.PID), Program: id.Program}
}
