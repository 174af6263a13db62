package wire

// MethodRequestRelease asks the holders of a lock to let it go: each is
// sent EventReleaseRequested naming the requester and its reason. It is
// advisory (nothing is freed, nothing is replicated) and served by the
// master alone: a request still queued when the master fails over is lost,
// and the requester may ask again. The caller names its own handle on the
// lock's node; it needs the write permission (the one a lock needs), or to
// be the cell's admin. A session may ask the holders of one lock at most
// once per RequestReleaseInterval (CodeTooMany otherwise).
const MethodRequestRelease Method = 25

// EventReleaseRequested tells a holder's session that someone asked it to
// release the lock its handle holds (Event.Handle names the handle,
// Event.Gen the lock's generation when asked, Event.From and
// Event.FromPrincipal the requester's session and principal,
// Event.Reason its reason). It is delivered whatever events the handle
// asked for; nothing is enforced, the holder decides.
const EventReleaseRequested uint8 = 10

// RequestReleaseRequest names the requester's handle on the lock's node and
// why it asks; the reason reaches the holders and the audit log.
type RequestReleaseRequest struct {
	Handle uint64 `msgpack:"h"`
	Reason string `msgpack:"r,omitempty"`
}

// RequestReleaseResponse says how many holders were sent the request (the
// requester's own handle, if it holds the lock, is not asked). A caller
// that may not read the node learns only whether any was (0 or 1), as much
// as a TryAcquire would tell it.
type RequestReleaseResponse struct {
	Asked uint32 `msgpack:"a,omitempty"`
}

// MaxReleaseReason bounds RequestReleaseRequest.Reason, which is logged
// and carried on every holder's event.
const MaxReleaseReason = 1024

// RequestReleaseIntervalMillis is how often one session may ask the holders
// of one lock to let go.
const RequestReleaseIntervalMillis = 1000
