// Package kv is a small HTTP key/value resource server whose writes are
// fenced by lockcell sequencers: the reference "resource server" of
// docs/spec.md#sequencers-and-fencing.
//
// Clients take a lockcell lock, get its sequencer (client.Handle's
// GetSequencer) and send it with every write in the Lockcell-Sequencer
// header (sequencer.EncodeText). The server applies a write only inside
// sequencer.Guard's Do, so the fencing check and the write are atomic for
// each lock: once a newer lock holder has written, an older one (a holder
// that paused, lost its session and resumed) is rejected, and with a
// Checker the cell is asked too, so even a stale holder's first write is
// refused.
//
// API:
//
//	PUT  /kv/{key}       body = value; needs a sequencer; stores the value
//	POST /kv/{key}/incr  needs a sequencer; adds 1 to the integer value
//	                     (absent = 0) and returns the new value
//	GET  /kv/{key}       the raw value (no sequencer needed); 404 if absent
//	GET  /accepted       the accept log: every accepted write, in order, as
//	                     a JSON list (?key=K keeps K's entries)
//
// Writes answer 200 with a JSON WriteResult. Errors answer with a JSON
// ErrorBody: 400 for a missing or malformed sequencer (or a bad request),
// 409 Conflict for a sequencer that may no longer write (stale: a newer
// generation was accepted, or the cell says the lock is no longer held at
// that generation; forged: the cell does not recognise it), 413 for a
// value over MaxValueSize, 422 when incr finds a value that is not an
// integer, 503 when the cell could not be asked, and 500 when the state
// file could not be written (the write is then not applied).
//
// A key should always be written under the same lock: the guard fences per
// lock, not per key.
package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"lockcell/client"
	"lockcell/sequencer"
)

// HeaderSequencer is the request header that carries the writer's
// sequencer, encoded with sequencer.EncodeText.
const HeaderSequencer = "Lockcell-Sequencer"

// MaxValueSize bounds a stored value.
const MaxValueSize = 1 << 20

// Config configures a Server.
type Config struct {
	// Guard fences the writes. Required unless Unguarded. Give it a
	// Checker (a *client.Client, or a CellChecker) wherever clients are not
	// trusted: a local-only guard cannot verify signatures, so it accepts a
	// forged sequencer of a high generation, and it accepts a stale
	// holder's writes until the lock's next holder has written. A guard
	// without a Checker refuses every semaphore holder's (Permit)
	// sequencer with 503: only the cell can tell a held permit from a
	// lost one.
	Guard *sequencer.Guard
	// StateFile, when set, persists the store and the guard's fencing
	// state after every accepted write (temporary file, fsync, rename,
	// fsync of the folder) and loads them at start, so fencing survives a
	// restart. The accept log is not persisted.
	StateFile string
	// Unguarded disables fencing: writes still need a well-formed
	// sequencer (its generation is logged) but are never checked. It is
	// for demonstrations only, to show the lost update fencing prevents.
	Unguarded bool
	// CheckTimeout bounds how long a write waits for the guard (its
	// Checker asking the cell) before it fails with 503. Default 10 s.
	CheckTimeout time.Duration
	// AcceptLogSize is how many of the latest accepted writes GET /accepted
	// keeps. Default 10000.
	AcceptLogSize int
	// Logger receives the server's logs (default slog.Default()).
	Logger *slog.Logger
}

// Accepted is one entry of the accept log: a write the server applied.
type Accepted struct {
	// Index numbers accepted writes from 1 since the server started.
	Index uint64 `json:"index"`
	Key   string `json:"key"`
	// Op is "put" or "incr".
	Op string `json:"op"`
	// Cell, Lock and Generation are the sequencer's.
	Cell       string    `json:"cell"`
	Lock       string    `json:"lock"`
	Generation uint64    `json:"generation"`
	Time       time.Time `json:"time"`
}

// WriteResult is the JSON answer to an accepted write.
type WriteResult struct {
	Key        string `json:"key"`
	Lock       string `json:"lock"`
	Generation uint64 `json:"generation"`
	// Index is the write's entry in the accept log.
	Index uint64 `json:"index"`
	// Value is the counter after an incr (absent for put).
	Value *int64 `json:"value,omitempty"`
}

// Reasons of ErrorBody.
const (
	ReasonMissing     = "missing"     // no sequencer header (400)
	ReasonMalformed   = "malformed"   // the sequencer does not parse (400)
	ReasonBadRequest  = "bad_request" // the request itself is wrong (400)
	ReasonStale       = "stale"       // the sequencer may no longer write (409)
	ReasonForged      = "forged"      // the cell does not recognise the sequencer (409)
	ReasonTooLarge    = "too_large"   // value over MaxValueSize (413)
	ReasonNotInteger  = "not_integer" // incr on a non-integer value (422)
	ReasonNotFound    = "not_found"   // GET of an absent key (404)
	ReasonUnavailable = "unavailable" // the cell could not be asked (503)
	ReasonInternal    = "internal"    // the state could not be saved (500)
)

// ErrorBody is the JSON answer to a rejected request.
type ErrorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Key    string `json:"key,omitempty"`
	// Lock and Generation are the rejected sequencer's, when it parsed.
	Lock       string `json:"lock,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	// Highest is the highest generation of that lock the server had
	// accepted when it answered (for stale rejections).
	Highest uint64 `json:"highest,omitempty"`
}

// Server is the key/value resource server. It is an http.Handler and is
// safe for concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux

	mu      sync.Mutex // guards data, log, index and the state file
	data    map[string][]byte
	log0    []Accepted // ring of the latest accepted writes, oldest first
	index   uint64
	persist bool
}

// NewServer returns a server; with a StateFile it loads the saved store and
// restores the guard's fencing state from it.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Guard == nil && !cfg.Unguarded {
		return nil, errors.New("kv: Config.Guard is required (Unguarded is for demonstrations only)")
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = 10 * time.Second
	}
	if cfg.AcceptLogSize <= 0 {
		cfg.AcceptLogSize = 10000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, data: map[string][]byte{}, persist: cfg.StateFile != ""}
	if s.persist {
		st, err := loadState(cfg.StateFile)
		if err != nil {
			return nil, err
		}
		if st.Data != nil {
			s.data = st.Data
		}
		if cfg.Guard != nil {
			cfg.Guard.Restore(st.Guard)
		}
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("PUT /kv/{key}", func(w http.ResponseWriter, r *http.Request) { s.write(w, r, "put") })
	s.mux.HandleFunc("POST /kv/{key}/incr", func(w http.ResponseWriter, r *http.Request) { s.write(w, r, "incr") })
	s.mux.HandleFunc("GET /kv/{key}", s.get)
	s.mux.HandleFunc("GET /accepted", s.accepted)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Get returns the value stored under key.
func (s *Server) Get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[key]
	return append([]byte(nil), v...), ok
}

// Accepted returns the accept log (the latest AcceptLogSize entries).
func (s *Server) Accepted() []Accepted {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Accepted(nil), s.log0[max(0, len(s.log0)-s.cfg.AcceptLogSize):]...)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	v, ok := s.Get(key)
	if !ok {
		writeJSON(w, http.StatusNotFound, ErrorBody{Error: fmt.Sprintf("kv: no value under %q", key), Reason: ReasonNotFound, Key: key})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(v)))
	w.WriteHeader(http.StatusOK)
	w.Write(v)
}

func (s *Server) accepted(w http.ResponseWriter, r *http.Request) {
	all := s.Accepted()
	out := all[:0:0]
	key, filter := r.URL.Query()["key"]
	for _, a := range all {
		if !filter || a.Key == key[0] {
			out = append(out, a)
		}
	}
	if out == nil {
		out = []Accepted{}
	}
	writeJSON(w, http.StatusOK, out)
}

// applyError is an error of the write itself (not of the guard).
type applyError struct {
	status int
	reason string
	err    error
}

func (e *applyError) Error() string { return e.err.Error() }
func (e *applyError) Unwrap() error { return e.err }

func (s *Server) write(w http.ResponseWriter, r *http.Request, op string) {
	key := r.PathValue("key")
	text := r.Header.Get(HeaderSequencer)
	if text == "" {
		writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "kv: a write needs the " + HeaderSequencer + " header (the lock holder's sequencer)",
			Reason: ReasonMissing, Key: key})
		return
	}
	raw, err := sequencer.DecodeText(text)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorBody{Error: err.Error(), Reason: ReasonMalformed, Key: key})
		return
	}
	var value []byte
	if op == "put" {
		value, err = io.ReadAll(http.MaxBytesReader(w, r.Body, MaxValueSize))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeJSON(w, http.StatusRequestEntityTooLarge, ErrorBody{Error: fmt.Sprintf("kv: value over %d bytes", MaxValueSize), Reason: ReasonTooLarge, Key: key})
			} else {
				writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "kv: reading the value: " + err.Error(), Reason: ReasonBadRequest, Key: key})
			}
			return
		}
	}
	var res WriteResult
	apply := func(seq sequencer.Sequencer) error {
		var err error
		res, err = s.apply(key, op, value, seq)
		return err
	}
	var seq sequencer.Sequencer
	if s.cfg.Unguarded {
		if seq, err = sequencer.Parse(raw); err == nil {
			err = apply(seq)
		}
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CheckTimeout)
		seq, err = s.cfg.Guard.Do(ctx, raw, apply)
		cancel()
	}
	if err == nil {
		writeJSON(w, http.StatusOK, res)
		return
	}
	body := ErrorBody{Error: err.Error(), Key: key, Lock: seq.Path, Generation: seq.Generation}
	status := http.StatusServiceUnavailable
	var ae *applyError
	switch {
	case errors.As(err, &ae):
		status, body.Reason = ae.status, ae.reason
	case errors.Is(err, sequencer.ErrMalformed):
		status, body.Reason = http.StatusBadRequest, ReasonMalformed
	case errors.Is(err, sequencer.ErrStale):
		status, body.Reason = http.StatusConflict, ReasonStale
	case errors.Is(err, sequencer.ErrForged), errors.Is(err, client.ErrBadSequencer):
		// The cell refuses to vouch for it: altered, forged or foreign.
		status, body.Reason = http.StatusConflict, ReasonForged
		body.Error = "kv: the cell does not recognise this sequencer (forged, altered, or of another cell): " + err.Error()
	default:
		body.Reason = ReasonUnavailable
		s.log.Warn("kv: write refused, the guard could not decide", "key", key, "err", err)
	}
	if status == http.StatusConflict && s.cfg.Guard != nil {
		body.Highest = s.cfg.Guard.State()[seq.Key()]
	}
	writeJSON(w, status, body)
}

// apply performs an admitted write: it computes the new value, saves the
// state (when persistent) and only then makes the write visible and logs
// it. It runs inside the guard's fence for the sequencer's lock.
func (s *Server) apply(key, op string, value []byte, seq sequencer.Sequencer) (WriteResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := WriteResult{Key: key, Lock: seq.Path, Generation: seq.Generation}
	if op == "incr" {
		n := int64(0)
		if old, ok := s.data[key]; ok {
			var err error
			if n, err = strconv.ParseInt(string(old), 10, 64); err != nil {
				return res, &applyError{http.StatusUnprocessableEntity, ReasonNotInteger, fmt.Errorf("kv: %q holds %q, not an integer", key, truncate(old))}
			}
		}
		if n == 1<<63-1 {
			return res, &applyError{http.StatusUnprocessableEntity, ReasonNotInteger, fmt.Errorf("kv: %q would overflow", key)}
		}
		n++
		res.Value = &n
		value = []byte(strconv.FormatInt(n, 10))
	}
	if s.persist {
		next := make(map[string][]byte, len(s.data)+1)
		for k, v := range s.data {
			next[k] = v
		}
		next[key] = value
		var gs map[string]uint64
		if s.cfg.Guard != nil {
			gs = s.cfg.Guard.State()
		}
		err := saveState(s.cfg.StateFile, state{Version: stateVersion, Data: next, Guard: gs})
		if errors.Is(err, errNotDurable) {
			s.log.Warn("kv: state saved but its folder could not be synced", "file", s.cfg.StateFile, "err", err)
		} else if err != nil {
			s.log.Error("kv: could not save the state; write refused", "file", s.cfg.StateFile, "err", err)
			return res, &applyError{http.StatusInternalServerError, ReasonInternal, err}
		}
	}
	s.data[key] = value
	s.index++
	res.Index = s.index
	s.log0 = append(s.log0, Accepted{Index: s.index, Key: key, Op: op, Cell: seq.Cell, Lock: seq.Path,
		Generation: seq.Generation, Time: time.Now()})
	if len(s.log0) >= 2*s.cfg.AcceptLogSize { // trim now and then, not on every write
		s.log0 = append(s.log0[:0:0], s.log0[len(s.log0)-s.cfg.AcceptLogSize:]...)
	}
	return res, nil
}

func truncate(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "..."
	}
	return string(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"kv: encoding the answer failed","reason":"internal"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
