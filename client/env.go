package client

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"lockcell/cell/certs"
	"lockcell/wire"
)

// The environment variables ConfigFromEnv reads. The lockcell CLI reads
// the same ones (its flags of the same names override them), so a program
// started from a shell set up for the CLI reaches the same cell as the
// same principal.
const (
	// EnvCell is the cell name (default DefaultCell).
	EnvCell = "LOCKCELL_CELL"
	// EnvReplicas is the comma-separated client addresses of the cell's
	// replicas (default DefaultReplicas).
	EnvReplicas = "LOCKCELL_REPLICAS"
	// EnvCert, EnvKey and EnvCA are the user's certificate, its key and
	// the cell's CA certificate (PEM files) of a cell with mutual TLS.
	// They go together: all three or none.
	EnvCert = "LOCKCELL_CERT"
	EnvKey  = "LOCKCELL_KEY"
	EnvCA   = "LOCKCELL_CA"
	// EnvConnectTo holds comma-separated rules HOST:PORT:TOHOST:TOPORT,
	// as curl's --connect-to (any part empty; IPv6 hosts in brackets): a
	// replica the cell knows as HOST:PORT is dialled at TOHOST:TOPORT,
	// the first rule that matches winning, while the cell's name for it
	// (and the TLS check of its certificate) stays. It serves a client
	// outside a container network: "::127.0.0.1:" dials every replica at
	// 127.0.0.1 on its own port (default none).
	EnvConnectTo = "LOCKCELL_CONNECT_TO"
)

// Defaults. DefaultCell and DefaultReplicas are those of ConfigFromEnv
// (and the CLI): what `lockcelld dev` starts.
const (
	DefaultCell     = "local"
	DefaultReplicas = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005"
	// DefaultCloseTimeout is Config.CloseTimeout's default: long enough for a
	// master fail-over, short enough that a program shutting down while the
	// cell is unreachable is not held up.
	DefaultCloseTimeout = 5 * time.Second
	// DefaultReplicaRefresh is how often a Client asks the master for the
	// cell's membership when nothing else made it ask (Config.ReplicaRefresh).
	DefaultReplicaRefresh = time.Minute
)

// EnvError is a setting ConfigFromEnv (or ConfigFromLookup) cannot use:
// the variable, the value it had, and why (Unwrap). A bad cell name wraps
// ErrInvalidName; certificate files that do not load wrap the file error.
type EnvError struct {
	Var   string
	Value string
	Err   error

	unset bool // Var is not set at all (ErrTLSIncomplete)
}

func (e *EnvError) Error() string {
	what := fmt.Sprintf("%s=%q", e.Var, e.Value)
	if e.unset {
		what = e.Var + " is not set"
	}
	why := strings.TrimPrefix(strings.TrimPrefix(e.Err.Error(), "lockcell: "), "certs: ")
	return "lockcell: " + what + ": " + why
}

// Unwrap returns the cause.
func (e *EnvError) Unwrap() error { return e.Err }

// ConfigFromEnv returns the Config the environment describes, with the
// CLI's defaults for what it leaves unset: the cell (EnvCell, default
// DefaultCell), the seeds (EnvReplicas, default DefaultReplicas; none when
// EnvCells or EnvCellsDomain is set: Dial then finds the cell by name
// there), where cells are found (EnvCells, read now, and
// EnvCellsDomain), mutual
// TLS from EnvCert, EnvKey and EnvCA (default none: plain TCP; the files
// are read now, so a missing or bad one fails here, not at Dial), and a
// Dialer following EnvConnectTo's rules. Every other field is left zero (Dial's
// defaults): set them on the result before Dial. A value that is set but
// unusable (an empty or invalid cell name, no addresses, a bad rule)
// fails with an *EnvError naming the variable.
func ConfigFromEnv() (Config, error) { return ConfigFromLookup(os.LookupEnv) }

// ConfigFromLookup is ConfigFromEnv reading the variables through lookup
// instead of the process environment (os.LookupEnv's contract: the value,
// and whether the variable is set). The lockcell CLI passes one that
// answers from its flags.
func ConfigFromLookup(lookup func(name string) (string, bool)) (Config, error) {
	get := func(name, def string) string {
		if v, ok := lookup(name); ok {
			return v
		}
		return def
	}
	var cfg Config
	cfg.Cell = get(EnvCell, DefaultCell)
	if err := wire.ValidCellName(cfg.Cell); err != nil {
		return Config{}, &EnvError{Var: EnvCell, Value: cfg.Cell, Err: err}
	}
	cfg.CellsFile, cfg.CellsDomain = get(EnvCells, ""), get(EnvCellsDomain, "")
	def := DefaultReplicas
	if cfg.CellsFile != "" || cfg.CellsDomain != "" {
		// Dial finds the cell's replicas by its name.
		def = ""
	}
	raw := get(EnvReplicas, def)
	for _, r := range strings.Split(raw, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Replicas = append(cfg.Replicas, r)
		}
	}
	if cfg.CellsFile != "" {
		if _, err := LoadCellsFile(cfg.CellsFile); err != nil {
			return Config{}, &EnvError{Var: EnvCells, Value: cfg.CellsFile, Err: err}
		}
	}
	if len(cfg.Replicas) == 0 && def != "" {
		return Config{}, &EnvError{Var: EnvReplicas, Value: raw, Err: errors.New("no replica addresses given")}
	}
	if v := get(EnvConnectTo, ""); v != "" {
		rules, err := parseConnectTo(v)
		if err != nil {
			return Config{}, &EnvError{Var: EnvConnectTo, Value: v, Err: err}
		}
		if len(rules) > 0 {
			cfg.Dialer = connectToDialer(rules, nil)
		}
	}
	files := [3]string{get(EnvCert, ""), get(EnvKey, ""), get(EnvCA, "")}
	names := [3]string{EnvCert, EnvKey, EnvCA}
	switch {
	case files[0] != "" && files[1] != "" && files[2] != "":
		tc, err := certs.LoadClientConfig(files[0], files[1], files[2])
		if err != nil {
			// certs names the file that failed; the variable is the
			// certificate's unless the CA's did not load.
			v := 0
			if strings.Contains(err.Error(), files[2]) && !strings.Contains(err.Error(), files[0]) {
				v = 2
			}
			return Config{}, &EnvError{Var: names[v], Value: files[v], Err: err}
		}
		cfg.TLS = tc
	case files[0] != "" || files[1] != "" || files[2] != "":
		for i, f := range files {
			if f == "" {
				return Config{}, &EnvError{Var: names[i], Err: ErrTLSIncomplete, unset: true}
			}
		}
	}
	return cfg, nil
}
