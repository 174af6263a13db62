package master

// Limits cap what one principal, connection or session may hold, so one
// misbehaving client cannot exhaust the master (TESTPLAN "Bad input").
// Each limit reached is answered with wire.CodeTooMany.
type Limits struct {
	// SessionsPerPrincipal caps live sessions of one principal.
	SessionsPerPrincipal int
	// Sessions caps live sessions in the cell.
	Sessions int
	// HandlesPerSession caps open handles of one session.
	HandlesPerSession int
	// SessionsPerConn caps live sessions created over one client
	// connection (counted by the master that created them).
	SessionsPerConn int
}

// DefaultLimits are the limits of a cell that sets none.
var DefaultLimits = Limits{SessionsPerPrincipal: 20000, Sessions: 100000, HandlesPerSession: 10000, SessionsPerConn: 4096}

func (l *Limits) setDefaults() {
	if l.SessionsPerPrincipal <= 0 {
		l.SessionsPerPrincipal = DefaultLimits.SessionsPerPrincipal
	}
	if l.Sessions <= 0 {
		l.Sessions = DefaultLimits.Sessions
	}
	if l.HandlesPerSession <= 0 {
		l.HandlesPerSession = DefaultLimits.HandlesPerSession
	}
	if l.SessionsPerConn <= 0 {
		l.SessionsPerConn = DefaultLimits.SessionsPerConn
	}
}
