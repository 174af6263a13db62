package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/client/recipe"
	"lockcell/wire"
)

// env is what the verbs share during one run: the streams, the global
// options and a client dialed on first use (usage errors and bad names
// never touch the network).
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	flagsParsed bool // Before ran: the fields below are set
	cell        string
	replicas    []string
	// cells is where cells are found by name (--cells, --cells-domain):
	// nil when neither is given. other is the cell of the command's names
	// when a full name named one other than --cell ("" otherwise): the
	// command's client dials it.
	cells client.CellResolver
	other string
	// homeErr is why --cell's replicas were not found by its name.
	homeErr error
	timeout time.Duration
	// timeoutSet: --timeout was given (lock waits without limit unless
	// it, or --wait, was).
	timeoutSet bool
	// retry is the client's Config.RetryTimeout when set (lock's hidden
	// --retry-timeout); zero means timeout.
	retry   time.Duration
	json    bool
	verbose bool
	// grace is the session's grace period after its lease runs out
	// (client.Config.GracePeriod); zero means the library's default.
	grace time.Duration
	// tls is the mutual TLS configuration from --cert, --key and --ca
	// (nil: plain TCP).
	tls *tls.Config
	// dial sends connections to other addresses than the cell names
	// (--connect-to); nil dials the names. connectTo is the rules as given.
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	connectTo string
	// certFiles are the --cert, --key and --ca files (empty without TLS):
	// the shell passes them on to its lines.
	certFiles [3]string

	// ctx carries the --timeout deadline, counted from when the options
	// were parsed, so that it bounds the whole command.
	ctx    context.Context
	cancel context.CancelFunc
	cl     *client.Client
}

// setup reads the global options (the App's Before hook).
func (e *env) setup(c *cli.Context) error {
	e.json = c.Bool("json")
	e.verbose = c.Bool("verbose")
	e.flagsParsed = true
	e.timeout = c.Duration("timeout")
	e.timeoutSet = c.IsSet("timeout")
	if e.timeout <= 0 {
		return usageErrorf(c, "--timeout must be positive, got %v", e.timeout)
	}
	// The library reads the settings, defaults and all, as a program
	// reading the environment would: each flag stands for its variable
	// (urfave/cli has already let the variable fill a flag not given).
	cellsSet := c.String("cells") != "" || c.String("cells-domain") != ""
	cfg, err := client.ConfigFromLookup(func(name string) (string, bool) {
		if name == client.EnvReplicas && cellsSet && !c.IsSet("replicas") {
			return "", false // found by the cell's name
		}
		return c.String(envFlags[name]), true
	})
	var ee *client.EnvError
	switch {
	case errors.Is(err, client.ErrTLSIncomplete):
		return usageErrorf(c, "--cert, --key and --ca (or LOCKCELL_CERT, LOCKCELL_KEY and LOCKCELL_CA) go together")
	case errors.As(err, &ee) && (ee.Var == client.EnvCert || ee.Var == client.EnvKey || ee.Var == client.EnvCA):
		return fmt.Errorf("TLS: %s", strings.TrimPrefix(errText(ee.Err), "certs: "))
	case errors.As(err, &ee):
		return usageErrorf(c, "--%s: %s", envFlags[ee.Var], errText(ee.Err))
	case err != nil:
		return err
	}
	e.cell, e.replicas, e.tls, e.dial = cfg.Cell, cfg.Replicas, cfg.TLS, cfg.Dialer
	if cellsSet {
		if e.cells, err = client.CellResolverFor(cfg); err != nil {
			return err
		}
	}
	e.connectTo = c.String("connect-to")
	if e.tls != nil {
		e.certFiles = [3]string{c.String("cert"), c.String("key"), c.String("ca")}
	}
	e.ctx, e.cancel = context.WithTimeout(c.Context, e.timeout)
	if len(e.replicas) == 0 && e.cells != nil {
		// --cell without --replicas: its replicas are found by its name.
		// A cell found nowhere fails the command only once it needs the
		// cell: its names may all be of other cells.
		e.replicas, e.homeErr = e.cells.LookupCell(e.ctx, e.cell)
	}
	return nil
}

// useCell makes the command's client one of cell, whose name a full name
// on the command line gave: with --cells or --cells-domain a name of
// another cell than --cell is reached there. Names of two cells in one
// command are refused (cells are independent: nothing spans two).
func (e *env) useCell(op, arg, cell string) error {
	if cell == e.cell && e.other == "" {
		return nil
	}
	if e.cells == nil {
		return nil // ValidateName says it is not a name of --cell
	}
	switch {
	case e.other == "" && e.cl == nil:
		e.other = cell
	case e.other != cell:
		first := e.other
		if first == "" {
			first = e.cell
		}
		return &opError{op: op, path: arg, err: fmt.Errorf("%w: %s and %s", client.ErrCrossCell, first, cell)}
	}
	return nil
}

// envFlags names the global flag that stands for each variable
// client.ConfigFromLookup reads.
var envFlags = map[string]string{
	client.EnvCell: "cell", client.EnvReplicas: "replicas", client.EnvCert: "cert", client.EnvKey: "key",
	client.EnvCA: "ca", client.EnvConnectTo: "connect-to", client.EnvCells: "cells", client.EnvCellsDomain: "cells-domain",
}

// client returns the session with the cell, dialing it on first use.
func (e *env) client() (*client.Client, error) {
	if e.cl != nil {
		return e.cl, nil
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if e.verbose {
		log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	retry := e.timeout
	if e.retry > 0 {
		retry = e.retry
	}
	cell, replicas := e.cell, e.replicas
	if e.homeErr != nil && (e.other == "" || e.other == e.cell) {
		return nil, e.homeErr
	}
	if e.other != "" && e.other != e.cell {
		var err error
		if replicas, err = e.cells.LookupCell(e.ctx, e.other); err != nil {
			return nil, err
		}
		cell = e.other
	}
	cl, err := client.Dial(e.ctx, client.Config{Cell: cell, Replicas: replicas, ClientName: "lockcell-cli",
		RetryTimeout: retry, DialTimeout: min(e.timeout, 2*time.Second), GracePeriod: e.grace, Logger: log,
		TLS: e.tls, Dialer: e.dialer()})
	if err != nil {
		return nil, err
	}
	e.cl = cl
	return cl, nil
}

// dialer is the client's TCP dialer: nil (the default) unless
// --connect-to gave rules.
func (e *env) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return e.dial
}

// close ends the session (releasing anything this run held) and the
// deadline.
func (e *env) close() {
	if e.cl != nil {
		if err := e.cl.Close(); err != nil && e.verbose {
			fmt.Fprintf(e.stderr, "lockcell: %v\n", err)
		}
		e.cl = nil
	}
	if e.cancel != nil {
		e.cancel()
	}
}

// root is the name of the cell's root directory.
func (e *env) root() string { return "/ls/" + e.cell }

// name turns a command-line name into a full, valid node name: names not
// starting with / are relative to the cell root, and trailing slashes (as
// ls prints after directories) are dropped. It validates locally so a bad
// name fails before any dialing, with the rule it breaks.
func (e *env) name(op, arg string) (string, error) {
	n := client.ResolveName(e.cell, arg)
	if arg == "" {
		n = e.root() // on the command line "" is the root, as "/ls/<cell>/" is
	}
	if t := strings.TrimRight(n, "/"); t != "" {
		n = t
	}
	cell := e.cell
	if other, ok := client.CellOf(n); ok && e.cells != nil {
		if err := e.useCell(op, arg, other); err != nil {
			return "", err
		}
		cell = other
	}
	if err := wire.ValidateName(cell, n); err != nil {
		return "", &opError{op: op, path: arg, err: err}
	}
	return n, nil
}

// opError is a failed verb: its message names the operation and the path
// (when it has one).
type opError struct {
	op   string
	path string // empty for operations on no node (seq check)
	err  error
	hint string // what to do about it, when there is an obvious answer
}

func (o *opError) Error() string {
	path := o.path
	// The client names the node it was working on, which for mkdir -p or
	// put's parent creation can be an ancestor of the name given.
	var ce *client.OpError
	if errors.As(o.err, &ce) && ce.Path != "" {
		path = ce.Path
	}
	detail := errText(o.err)
	// The cell's details often start with the name again.
	detail = strings.Replace(detail, ": "+path+": ", ": ", 1)
	if strings.ContainsFunc(path, func(r rune) bool { return r <= ' ' || r > '~' }) {
		path = strconv.Quote(path)
	}
	msg := o.op + ": " + detail
	if path != "" {
		msg = o.op + " " + path + ": " + detail
	}
	if o.hint != "" {
		msg += " (" + o.hint + ")"
	}
	return msg
}

func (o *opError) Unwrap() error { return o.err }

// fail wraps err (when not nil) as a failure of op on path.
func fail(op, path string, err error) error {
	if err == nil {
		return nil
	}
	var oe *opError
	if errors.As(err, &oe) {
		return err
	}
	return &opError{op: op, path: path, err: err}
}

// errText describes err for people: the kind and the cell's detail, without
// the client's own op/path prefix (opError supplies those) or repeated
// "lockcell:" prefixes.
func errText(err error) string {
	var we *wire.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out (raise --timeout)"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, client.ErrAllRefused):
		// Nothing listens at --replicas: waiting longer would not help.
		return strings.TrimPrefix(err.Error()[strings.Index(err.Error(), client.ErrAllRefused.Error()):], "lockcell: ") +
			" (is the cell running? are --replicas right?)"
	case errors.As(err, &we):
		if we.Msg == "" {
			return we.Code.String()
		}
		return we.Code.String() + ": " + we.Msg
	}
	var ce *client.OpError
	if errors.As(err, &ce) {
		err = ce.Err
	}
	return strings.TrimPrefix(err.Error(), "lockcell: ")
}

// errorCode is the machine name of err's kind.
func errorCode(err error) string {
	var we *wire.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, client.ErrNoMaster):
		return "no_master"
	case errors.Is(err, client.ErrAllRefused):
		return "refused"
	case errors.Is(err, client.ErrClosed):
		return "closed"
	case errors.Is(err, recipe.ErrNotCounter):
		return "not_counter"
	case errors.Is(err, client.ErrUnknownCell):
		return "unknown_cell"
	case errors.Is(err, client.ErrCrossCell):
		return "cross_cell"
	case errors.As(err, &we):
		return we.Code.Name()
	}
	return "error"
}

// printError reports err on stderr, as JSON under --json.
func (e *env) printError(err error, code string) {
	if e.json {
		b, _ := json.Marshal(struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}{err.Error(), code})
		fmt.Fprintf(e.stderr, "%s\n", b)
		return
	}
	fmt.Fprintf(e.stderr, "lockcell: %v\n", err)
}

// printJSON writes v as the command's one JSON document.
func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// statJSON is the JSON form of a node's metadata.
type statJSON struct {
	Name        string  `json:"name"`
	Instance    uint64  `json:"instance"`
	ContentGen  uint64  `json:"content_generation"`
	LockGen     uint64  `json:"lock_generation"`
	ACLGen      uint64  `json:"acl_generation"`
	Checksum    string  `json:"checksum"`
	Size        uint64  `json:"size"`
	CTime       string  `json:"ctime"`
	MTime       string  `json:"mtime"`
	Ephemeral   bool    `json:"ephemeral"`
	Dir         bool    `json:"dir"`
	ACL         aclJSON `json:"acl"`
	LockMode    string  `json:"lock_mode"`
	LockHolders int     `json:"lock_holders"`
	LockWaiters int     `json:"lock_waiters"`
	// TTLMillis and Container appear only for TTL nodes and containers.
	TTLMillis int64 `json:"ttl_ms,omitempty"`
	Container bool  `json:"container,omitempty"`
}

type aclJSON struct {
	Read   string `json:"read"`
	Write  string `json:"write"`
	Change string `json:"change"`
}

func toStatJSON(name string, st client.Stat) statJSON {
	return statJSON{Name: name, Instance: st.Instance, ContentGen: st.ContentGen, LockGen: st.LockGen,
		ACLGen: st.ACLGen, Checksum: checksumHex(st.Checksum), Size: st.Size,
		CTime: timeText(st.CTime), MTime: timeText(st.MTime), Ephemeral: st.Ephemeral, Dir: st.Dir,
		ACL:      aclJSON{Read: st.ReadACL, Write: st.WriteACL, Change: st.ChangeACL},
		LockMode: st.LockMode.String(), LockHolders: st.LockHolders, LockWaiters: st.LockWaiters,
		TTLMillis: st.TTL.Milliseconds(), Container: st.Container}
}

func checksumHex(c uint64) string { return fmt.Sprintf("%016x", c) }

// timeText prints times in UTC so output does not depend on where the
// operator sits.
func timeText(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
