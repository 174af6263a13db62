package wire

import (
	"errors"
	"strings"
)

// SessionIdleClosedMsg opens the message of the CodeSessionExpired error
// that answers a session the master closed for idleness: it held no open
// handle and made no call but KeepAlives for the cell's idle-session
// timeout. Such a session held nothing (no handle, so no lock, wait or
// ephemeral node), so a client may open a new session in its place
// without the program losing anything; a client that does not know this
// message sees an ordinary expiry.
const SessionIdleClosedMsg = "session idle-closed"

// IsSessionIdleClosed reports whether err is the CodeSessionExpired
// answer about a session closed for idleness (SessionIdleClosedMsg).
func IsSessionIdleClosed(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeSessionExpired && strings.HasPrefix(e.Msg, SessionIdleClosedMsg)
}
