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
	serve func(ctx context.Context, c *call, body []byte) (any, error)
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
func decoded[Req, Resp any](h func(ctx context.Context, c *call, req *Req) (Resp, error)) func(context.Context, *call, []byte) (any, error) {
	pool := sync.Pool{New: func() any { return new(Req) }}
	return func(ctx context.Context, c *call, body []byte) (any, error) {
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
		return h(ctx, c, req)
	}
}

// bodiless wraps a handler whose call has no request fields.
func bodiless[Resp any](h func(ctx context.Context, c *call) (Resp, error)) func(context.Context, *call, []byte) (any, error) {
	return func(ctx context.Context, c *call, _ []byte) (any, error) { return h(ctx, c) }
}

// routeTable is the method table, each method served by its endpoint's
// method (endpoints.go). A method missing from it is answered BadRequest.
func routeTable(e *endpoints) map[wire.Method]route {
	ss, fs, ls, as := &e.sessions, &e.files, &e.locks, &e.admin
	return map[wire.Method]route{
		wire.MethodCreateSession: {serve: decoded(ss.createSession), anyEpoch: true, newSession: true},
		// Served by DispatchKeepAlive (Dispatch hands it there): its entry
		// holds only its admission.
		wire.MethodKeepAlive:    {anyEpoch: true, inRecovery: true},
		wire.MethodCloseSession: {serve: bodiless(ss.closeSession), inRecovery: true},
		wire.MethodCellStatus:   {anyEpoch: true, newSession: true},
		// Rationed like a read: a principal cannot make the master hash
		// secrets without bound (docs/limits.md).
		wire.MethodResumeSession: {serve: decoded(ss.resumeSession), anyEpoch: true, newSession: true, rationed: true},

		wire.MethodOpen:          {serve: decoded(fs.open)},
		wire.MethodSetContents:   {serve: decoded(fs.setContents)},
		wire.MethodSetACL:        {serve: decoded(fs.setACL)},
		wire.MethodTxn:           {serve: decoded(fs.txn)},
		wire.MethodAcquire:       {serve: decoded(ls.acquireTimed)},
		wire.MethodCancelAcquire: {serve: decoded(ls.cancelAcquire)},
		wire.MethodAcquireMulti:  {serve: decoded(ls.acquireMulti)},
		wire.MethodReleaseMulti:  {serve: decoded(ls.releaseMulti)},

		wire.MethodClose:              {serve: decoded(fs.close)},
		wire.MethodDelete:             {serve: decoded(fs.delete)},
		wire.MethodRelease:            {serve: decoded(ls.release)},
		wire.MethodGetSequencer:       {serve: decoded(ls.getSequencer)},
		wire.MethodGetContentsAndStat: {serve: decoded(fs.getContentsAndStat), rationed: true},
		wire.MethodGetStat:            {serve: decoded(fs.getStat), rationed: true},
		wire.MethodReadDir:            {serve: decoded(fs.readDir), rationed: true},
		wire.MethodWatchSubtree:       {serve: decoded(fs.watchSubtree), rationed: true},

		wire.MethodListSessions:   {serve: bodiless(ss.listSessions), rationed: true},
		wire.MethodCheckSequencer: {serve: decoded(ls.checkSequencer), rationed: true},
		wire.MethodBackup:         {serve: decoded(as.backup)},
		wire.MethodBreakLock:      {serve: decoded(ls.breakLock)},
		wire.MethodListLocks:      {serve: decoded(ls.listLocks), rationed: true},
		wire.MethodRequestRelease: {serve: decoded(ls.requestRelease), rationed: true},
		wire.MethodQuotaUsage:     {serve: decoded(as.quotaUsage), rationed: true},

		// Many sessions' KeepAlives from a trusted proxy (proxy.go):
		// admitted as a KeepAlive is, each session checked on its own.
		wire.MethodBatchKeepAlive: {serve: decoded(e.proxies.batchKeepAlive), anyEpoch: true, inRecovery: true, newSession: true},

		wire.MethodReplicaAdd:    {serve: decoded(as.replicaAddCall), anyEpoch: true, inRecovery: true, admit: as.membershipAdmit},
		wire.MethodReplicaRemove: {serve: decoded(as.replicaRemoveCall), anyEpoch: true, inRecovery: true, admit: as.membershipAdmit},
		wire.MethodReplicaList:   {serve: decoded(as.replicaList), anyEpoch: true, inRecovery: true, admit: as.membershipAdmit},
		// Session-less, serialised with the configuration changes, and
		// audited (transfer.go).
		wire.MethodReplicaTransferLeadership: {serve: decoded(as.replicaTransferCall), anyEpoch: true, inRecovery: true, admit: as.membershipAdmit},
	}
}
