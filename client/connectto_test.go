package client

import (
	"strings"
	"testing"
)

// TestConnectTo: rules parse as curl's --connect-to, empty parts match
// anything (or keep the original), the first match wins, and malformed
// rules are refused with the rule named.
func TestConnectTo(t *testing.T) {
	rules, err := parseConnectTo("replica-9:7009:10.1.1.1:9999, ::127.0.0.1:,[::1]:1:[::2]:")
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]string{
		"replica-3:7003": "127.0.0.1:7003", // any host, same port
		"replica-9:7009": "10.1.1.1:9999",  // the first rule wins
		"[::1]:1":        "127.0.0.1:1",    // the second rule matches first
		"no-port":        "no-port",        // not host:port: unchanged
	} {
		if got := connectTarget(rules, addr); got != want {
			t.Errorf("connectTarget(%q) = %q, want %q", addr, got, want)
		}
	}
	if got := connectTarget(rules[2:], "[::1]:1"); got != "[::2]:1" {
		t.Errorf("bracketed rule: %q", got)
	}
	for _, bad := range []string{"a:b:c", "a:b:c:d:e", "[::1:1:a:b"} {
		if _, err := parseConnectTo(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("parseConnectTo(%q): %v, want an error naming it", bad, err)
		}
	}
}
