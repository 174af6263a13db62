package master

import (
	"context"
	"sync"

	"lockcell/wire"
)

// route is how the master admits and serves one wire method. Every call
// goes through the same steps in Dispatch (serving, leadership proof,
// fail-over recovery, epoch, session owner, read ration, admit,
// handler, audit);
// a route says which of them apply, so adding a method is one entry.
type route struct {
	// serve decodes the body into the method's request and runs its
	// handler; nil for a method the master does not serve itself (the
	// cell answers CellStatus), which Dispatch refuses as unknown.
	serve func(c *call, ctx context.Context, body []byte) (any, error)
	// anyEpoch: admitted whatever epoch the header names. Calls that
	// start a session or learn the master's epoch (KeepAlive), and the
	// session-less ones, carry none worth checking.
	anyEpoch bool
	// inRecovery: admitted while the master waits for every session to
	// acknowledge its fail-over (the calls that let sessions acknowledge
	// or end, and the admin's membership calls).
	inRecovery bool
	// newSession: the call makes the session its header would name, so
	// no session-owner check applies.
	newSession bool
	// rationed: a read charged to the caller's read ration (rations.go).
	rationed bool
	// admit, if set, runs before the body is decoded; a call it refuses
	// is answered its error.
	admit func(c *call) error
}

// decoded wraps a handler of request type Req: the body is decoded into a
// zeroed Req (a malformed body is answered BadRequest by wire.Decode) and
// the handler runs on it.
//
// The Reqs are pooled, one pool per route: a handler must not keep req,
// or a pointer into it, once it has returned. What it holds is its own:
// the Req is zeroed before each decode, so every string and byte slice in
// it is a fresh copy of the body's (wire.Decode), never memory a later
// call decodes into.
func decoded[Req, Resp any](h func(c *call, ctx context.Context, req *Req) (Resp, error)) func(*call, context.Context, []byte) (any, error) {
	pool := sync.Pool{New: func() any { return new(Req) }}
	return func(c *call, ctx context.Context, body []byte) (any, error) {
		req := pool.Get().(*Req)
		var zero Req
		*req = zero
		defer func() {
			*req = zero // the pool keeps none of the call's data
			pool.Put(req)
		}()
		if err := wire.Decode(body, req); err != nil {
			return nil, err
		}
		return h(c, ctx, req)
	}
}

// bodiless wraps a handler whose call has no request fields.
func bodiless[Resp any](h func(c *call, ctx context.Context) (Resp, error)) func(*call, context.Context, []byte) (any, error) {
	return func(c *call, ctx context.Context, _ []byte) (any, error) { return h(c, ctx) }
}

// routes is the method table. A method missing from it is answered
// BadRequest.
var routes = map[wire.Method]route{
	wire.MethodCreateSession: {serve: decoded((*call).createSession), anyEpoch: true, newSession: true},
	wire.MethodKeepAlive:     {serve: decoded((*call).keepAlive), anyEpoch: true, inRecovery: true},
	wire.MethodCloseSession:  {serve: bodiless((*call).closeSession), inRecovery: true},
	wire.MethodCellStatus:    {anyEpoch: true, newSession: true},
	// Rationed like a read: a principal cannot make the master hash
	// secrets without bound (docs/limits.md).
	wire.MethodResumeSession: {serve: decoded((*call).resumeSession), anyEpoch: true, newSession: true, rationed: true},

	wire.MethodOpen:          {serve: decoded((*call).open)},
	wire.MethodSetContents:   {serve: decoded((*call).setContents)},
	wire.MethodSetACL:        {serve: decoded((*call).setACL)},
	wire.MethodAcquire:       {serve: decoded((*call).acquireTimed)},
	wire.MethodCancelAcquire: {serve: decoded((*call).cancelAcquire)},

	wire.MethodClose:              {serve: decoded((*call).handleCall)},
	wire.MethodDelete:             {serve: decoded((*call).handleCall)},
	wire.MethodRelease:            {serve: decoded((*call).handleCall)},
	wire.MethodGetSequencer:       {serve: decoded((*call).handleCall)},
	wire.MethodGetContentsAndStat: {serve: decoded((*call).handleCall), rationed: true},
	wire.MethodGetStat:            {serve: decoded((*call).handleCall), rationed: true},
	wire.MethodReadDir:            {serve: decoded((*call).handleCall), rationed: true},

	wire.MethodListSessions:   {serve: bodiless((*call).listSessions), rationed: true},
	wire.MethodCheckSequencer: {serve: decoded((*call).checkSequencer), rationed: true},
	wire.MethodBackup:         {serve: decoded((*call).backup)},
	wire.MethodBreakLock:      {serve: decoded((*call).breakLock)},
	wire.MethodListLocks:      {serve: decoded((*call).listLocks), rationed: true},
	wire.MethodRequestRelease: {serve: decoded((*call).requestRelease), rationed: true},
	wire.MethodQuotaUsage:     {serve: decoded((*call).quotaUsage), rationed: true},

	wire.MethodReplicaAdd:    {serve: decoded((*call).replicaAddCall), anyEpoch: true, inRecovery: true, admit: (*call).membershipAdmit},
	wire.MethodReplicaRemove: {serve: decoded((*call).replicaRemoveCall), anyEpoch: true, inRecovery: true, admit: (*call).membershipAdmit},
	wire.MethodReplicaList:   {serve: decoded((*call).replicaList), anyEpoch: true, inRecovery: true, admit: (*call).membershipAdmit},
}
