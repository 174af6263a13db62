package cell

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
)

// auditLogger is the master's audit stream: AuditLogger tagged with this
// replica, or nil when unset (the master then audits to Logger).
func (c *Config) auditLogger() *slog.Logger {
	if c.AuditLogger == nil {
		return nil
	}
	return c.AuditLogger.With("replica", c.Self)
}

// AuditFile is the destination of an audit stream. For a file it can be
// reopened, so that an operator's log rotation (rename the file, then
// SIGHUP) moves writing to a fresh file at the same path without losing
// a line; for stderr, stdout and "off" its methods do nothing.
type AuditFile struct {
	path string // "" when not a file

	mu sync.Mutex
	f  *os.File
}

// Write writes one line to the current file.
func (a *AuditFile) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return 0, os.ErrClosed
	}
	return a.f.Write(p)
}

// Reopen opens the path again (creating it, mode 0600, when rotation
// moved it away) and writes on to it; the old file is closed once no
// line is being written to it. On failure writing goes on to the old
// file, and the error says why.
func (a *AuditFile) Reopen() error {
	if a == nil || a.path == "" {
		return nil
	}
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: reopen: %w", err)
	}
	a.mu.Lock()
	old := a.f
	a.f = f
	a.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// Path is the file's path, "" for stderr, stdout and "off".
func (a *AuditFile) Path() string { return a.path }

// Close closes the file, if any.
func (a *AuditFile) Close() error {
	if a == nil || a.path == "" {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}

// OpenAuditLog opens the audit stream an operator names: "stderr" (or
// ""), "stdout", "off" (nothing is written), or a file path, appended to
// and created mode 0600 when missing. Lines are structured, JSON when
// json is set and key=value text otherwise, and always at Info, whatever
// level the process's other logs keep. The AuditFile reopens and closes
// the file, if any.
func OpenAuditLog(dest string, json bool) (log *slog.Logger, file *AuditFile, err error) {
	var w io.Writer
	file = &AuditFile{}
	switch dest {
	case "", "stderr":
		w = os.Stderr
	case "stdout":
		w = os.Stdout
	case "off":
		return slog.New(slog.DiscardHandler), file, nil
	default:
		file.path = dest
		if err := file.Reopen(); err != nil {
			return nil, nil, err
		}
		w = file
	}
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), file, nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), file, nil
}
