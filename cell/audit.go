package cell

import (
	"fmt"
	"io"
	"log/slog"
	"os"
)

// auditLogger is the master's audit stream: AuditLogger tagged with this
// replica, or nil when unset (the master then audits to Logger).
func (c *Config) auditLogger() *slog.Logger {
	if c.AuditLogger == nil {
		return nil
	}
	return c.AuditLogger.With("replica", c.Self)
}

// OpenAuditLog opens the audit stream an operator names: "stderr" (or
// ""), "stdout", "off" (nothing is written), or a file path, appended to
// and created mode 0600 when missing. Lines are structured, JSON when
// json is set and key=value text otherwise, and always at Info, whatever
// level the process's other logs keep. close releases the file, if any.
func OpenAuditLog(dest string, json bool) (log *slog.Logger, close func() error, err error) {
	var w io.Writer
	close = func() error { return nil }
	switch dest {
	case "", "stderr":
		w = os.Stderr
	case "stdout":
		w = os.Stdout
	case "off":
		return slog.New(slog.DiscardHandler), close, nil
	default:
		f, err := os.OpenFile(dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("audit log: %w", err)
		}
		w, close = f, f.Close
	}
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), close, nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), close, nil
}
