// Package httpfence fences an HTTP resource server with lockcell
// sequencers: a net/http middleware that reads the caller's sequencer from
// the Lockcell-Sequencer header, admits the request only through a
// sequencer.Guard (per lock, the newest generation seen wins and an older
// one is refused), and hands the checked sequencer to the handler in the
// request's context; and, for callers, SetHeader and Attach, which put a
// held lock's sequencer on an outgoing request.
//
// The handler runs inside the guard's fence for the sequencer's lock
// (sequencer.Guard.Do): while it runs, no request carrying an older
// generation of that lock is admitted, and two requests of one lock never
// interleave their check and their effect. A write the handler makes is
// therefore fenced as long as it completes before the handler returns.
//
// Answers to refused requests are JSON (ErrorBody) unless Config.OnReject
// writes its own:
//
//	400 missing    no sequencer header (unless Config.Optional)
//	400 malformed  the header is not a sequencer
//	409 stale      a newer generation of the lock was admitted here, the
//	               cell says the lock is no longer held at that generation,
//	               or the sequencer is of another cell than Config.Cell
//	409 forged     the cell does not recognise the sequencer (altered,
//	               forged, or signed by another cell)
//	413 too_large  the body is over Config.BufferBody
//	503 unavailable the cell could not be asked, or the lock's fence was
//	               not free, within Config.CheckTimeout
package httpfence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"lockcell/client"
	"lockcell/sequencer"
)

// Header is the request header that carries the caller's sequencer,
// encoded with sequencer.EncodeText (unpadded URL-safe base64).
const Header = "Lockcell-Sequencer"

// Reasons of ErrorBody and Rejection.
const (
	ReasonMissing     = "missing"     // no sequencer header (400)
	ReasonMalformed   = "malformed"   // the header is not a sequencer (400)
	ReasonStale       = "stale"       // an older lock holder, or a foreign cell (409)
	ReasonForged      = "forged"      // the cell does not recognise the sequencer (409)
	ReasonTooLarge    = "too_large"   // body over Config.BufferBody (413)
	ReasonBadRequest  = "bad_request" // the body could not be read (400)
	ReasonUnavailable = "unavailable" // the cell could not be asked (503)
)

// Config configures the middleware.
type Config struct {
	// Guard admits the requests. Required. Give it a Checker (a
	// *client.Client, or kv.CellChecker) wherever callers are not trusted:
	// a guard without one cannot tell a forged sequencer from a real one,
	// and admits a stale holder until the lock's next holder has been
	// admitted here. With a Checker, a confirmation is reused for
	// GuardConfig.CacheTTL, during which a holder that has just lost the
	// lock may still be admitted.
	Guard *sequencer.Guard
	// Optional lets requests without the header through, unchecked and
	// with no sequencer in their context (FromContext reports false), so
	// one handler can serve reads without a lock and writes with one. A
	// header that is present is always checked: a malformed, stale or
	// forged one is refused as in the strict mode.
	Optional bool
	// CheckTimeout bounds how long a request waits for the guard, that is
	// for its lock's fence (held while another request of the same lock
	// is in its handler) and for the Checker asking the cell, before it
	// is answered 503. Default 10 s.
	CheckTimeout time.Duration
	// BufferBody, when positive, reads up to that many bytes of the
	// request body before the guard is asked, and answers 413 beyond: the
	// lock's fence is then never held while a slow client sends its body.
	// With 0 the handler reads the body itself, inside the fence.
	BufferBody int64
	// OnReject, when set, answers refused requests instead of the JSON
	// ErrorBody (for servers with an error format of their own).
	OnReject func(w http.ResponseWriter, r *http.Request, rej *Rejection)
}

// ErrorBody is the default JSON answer to a refused request.
type ErrorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
	// Lock and Generation are the refused sequencer's, when it parsed.
	Lock       string `json:"lock,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	// Highest is the highest generation of that lock the guard had
	// admitted when it answered (stale and forged refusals).
	Highest uint64 `json:"highest,omitempty"`
}

// Rejection is a refused request: the HTTP status it is answered with, the
// reason (one of the Reason constants), and the cause, which wraps
// ErrMissing, sequencer.ErrMalformed, ErrStale or ErrForged, client.ErrBadSequencer,
// or the error of asking the cell.
type Rejection struct {
	Status int
	Reason string
	Err    error
	// Sequencer is the refused sequencer's content, when it parsed.
	Sequencer sequencer.Sequencer
	// Highest is the highest generation of its lock admitted so far.
	Highest uint64
}

// Error describes the refusal.
func (r *Rejection) Error() string { return fmt.Sprintf("httpfence: %s: %v", r.Reason, r.Err) }

// Unwrap returns the cause.
func (r *Rejection) Unwrap() error { return r.Err }

// ErrMissing is the cause of a refusal of a request without a sequencer.
var ErrMissing = errors.New("httpfence: no sequencer")

type ctxKey struct{}

// FromContext returns the sequencer the middleware admitted for this
// request: verified by the guard and, for as long as the handler runs, the
// newest generation of its lock the guard has seen. It reports false for
// a request that carried none (Config.Optional).
func FromContext(ctx context.Context) (sequencer.Sequencer, bool) {
	s, ok := ctx.Value(ctxKey{}).(sequencer.Sequencer)
	return s, ok
}

// Middleware returns the fencing middleware of cfg, to wrap handlers with.
// It panics if cfg.Guard is nil, as net/http does for a nil handler: a
// server without a guard is a programming error, not a request's.
func Middleware(cfg Config) func(http.Handler) http.Handler {
	if cfg.Guard == nil {
		panic("httpfence: Config.Guard is required")
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = 10 * time.Second
	}
	return func(next http.Handler) http.Handler {
		return &fence{cfg: cfg, next: next}
	}
}

// Wrap is Middleware(cfg)(next).
func Wrap(next http.Handler, cfg Config) http.Handler { return Middleware(cfg)(next) }

type fence struct {
	cfg  Config
	next http.Handler
}

func (f *fence) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	text := r.Header.Get(Header)
	if text == "" {
		if f.cfg.Optional {
			f.next.ServeHTTP(w, r)
			return
		}
		f.reject(w, r, &Rejection{Status: http.StatusBadRequest, Reason: ReasonMissing,
			Err: fmt.Errorf("%w: no %s header (the lock holder's sequencer)", ErrMissing, Header)})
		return
	}
	raw, err := sequencer.DecodeText(text)
	if err == nil {
		_, err = sequencer.Parse(raw)
	}
	if err != nil {
		f.reject(w, r, &Rejection{Status: http.StatusBadRequest, Reason: ReasonMalformed, Err: err})
		return
	}
	if f.cfg.BufferBody > 0 && r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, f.cfg.BufferBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				f.reject(w, r, &Rejection{Status: http.StatusRequestEntityTooLarge, Reason: ReasonTooLarge,
					Err: fmt.Errorf("body over %d bytes", f.cfg.BufferBody)})
			} else {
				f.reject(w, r, &Rejection{Status: http.StatusBadRequest, Reason: ReasonBadRequest,
					Err: fmt.Errorf("reading the body: %w", err)})
			}
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	ctx, cancel := context.WithTimeout(r.Context(), f.cfg.CheckTimeout)
	defer cancel()
	s, err := f.cfg.Guard.Do(ctx, raw, func(s sequencer.Sequencer) error {
		f.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, s)))
		return nil
	})
	if err == nil {
		return
	}
	rej := &Rejection{Status: http.StatusServiceUnavailable, Reason: ReasonUnavailable, Err: err, Sequencer: s}
	switch {
	case errors.Is(err, sequencer.ErrMalformed):
		rej.Status, rej.Reason = http.StatusBadRequest, ReasonMalformed
	case errors.Is(err, sequencer.ErrStale):
		rej.Status, rej.Reason = http.StatusConflict, ReasonStale
	case errors.Is(err, sequencer.ErrForged), errors.Is(err, client.ErrBadSequencer):
		rej.Status, rej.Reason = http.StatusConflict, ReasonForged
	}
	if rej.Status == http.StatusConflict {
		rej.Highest = f.cfg.Guard.Highest(s)
	}
	f.reject(w, r, rej)
}

func (f *fence) reject(w http.ResponseWriter, r *http.Request, rej *Rejection) {
	if f.cfg.OnReject != nil {
		f.cfg.OnReject(w, r, rej)
		return
	}
	msg := rej.Err.Error()
	switch rej.Reason {
	case ReasonStale:
		msg = "httpfence: this lock holder has been superseded; stop and re-acquire the lock: " + msg
	case ReasonForged:
		msg = "httpfence: the cell does not recognise this sequencer (forged, altered, or of another cell): " + msg
	case ReasonUnavailable:
		msg = "httpfence: the sequencer could not be checked with the cell; retry later: " + msg
	}
	b, _ := json.Marshal(ErrorBody{Error: msg, Reason: rej.Reason, Lock: rej.Sequencer.Path,
		Generation: rej.Sequencer.Generation, Highest: rej.Highest})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(rej.Status)
	w.Write(append(b, '\n'))
}

// SetHeader puts seq (as returned by client.Handle's GetSequencer) on h
// in the form the middleware reads.
func SetHeader(h http.Header, seq []byte) { h.Set(Header, sequencer.EncodeText(seq)) }

// Attach asks the cell for the sequencer of the lock held through lock
// and puts it on req, so the resource server can fence req against later
// holders. It fails (wrapping client.ErrNotHeld) when lock holds no lock:
// a request that must be fenced is not sent without a sequencer.
func Attach(ctx context.Context, req *http.Request, lock *client.Handle) error {
	seq, err := lock.GetSequencer(ctx)
	if err != nil {
		return fmt.Errorf("httpfence: the sequencer of %s: %w", lock.Name(), err)
	}
	SetHeader(req.Header, seq)
	return nil
}
