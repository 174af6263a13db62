package client

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"lockcell/wire"
)

// What Dial declares: the process as it is by default (made acceptable to
// the cell however odd its host or program name), the fields a Config
// gives instead of the process's own, and nothing with NoIdentity.
func TestDeclaredIdentity(t *testing.T) {
	proc := ProcessIdentity()
	if proc.PID != os.Getpid() || proc.Program == "" {
		t.Fatalf("ProcessIdentity() = %+v", proc)
	}
	if err := wire.CheckIdentity(proc.Host, int64(proc.PID), proc.Program); err != nil {
		t.Fatalf("the process's own identity is refused: %v", err)
	}
	if got := declaredIdentity(&Config{}); got != proc {
		t.Errorf("zero Config declares %+v, want %+v", got, proc)
	}
	if got := declaredIdentity(&Config{Identity: Identity{Program: "svc"}}); got != (Identity{Host: proc.Host, PID: proc.PID, Program: "svc"}) {
		t.Errorf("Config with a program declares %+v", got)
	}
	if got := declaredIdentity(&Config{Identity: Identity{Host: "h"}, NoIdentity: true}); got != (Identity{}) {
		t.Errorf("NoIdentity declares %+v", got)
	}
	for _, raw := range []string{strings.Repeat("é", MaxIdentityLen), "tab\there", "bad\xffutf8", "ok"} {
		fit := fitIdentity(raw)
		if err := wire.CheckIdentity(fit, 1, fit); err != nil || !utf8.ValidString(fit) {
			t.Errorf("fitIdentity(%.30q) = %.30q, refused: %v", raw, fit, err)
		}
	}
	if fitIdentity("ok") != "ok" {
		t.Error("fitIdentity changed a fine name")
	}
}
