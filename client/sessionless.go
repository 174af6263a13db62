package client

import "lockcell/wire"

// sessionless reports whether calls of method m go without a session: the
// membership calls, whose outcome must not hang on the caller's session
// (an operator replacing a dead machine may have none to spare).
func sessionless(m wire.Method) bool {
	switch m {
	case wire.MethodReplicaAdd, wire.MethodReplicaRemove, wire.MethodReplicaList, wire.MethodReplicaTransferLeadership:
		return true
	}
	return false
}
