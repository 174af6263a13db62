package client_test

import (
	"errors"
	"io/fs"
	"net"
	"strings"
	"testing"
	"time"

	"lockcell/client"
	"lockcell/client/admin"
	"lockcell/fixtures"
)

// TestConfigFromEnvDialsRelative dials a mutual-TLS cell with nothing but
// what the CLI's environment variables say (the seeds reached through a
// connect-to rule, since the seed's own port is dead), then uses names
// relative to the cell root on every Client call that takes one, and
// finds them under /ls/<cell>.
func TestConfigFromEnvDialsRelative(t *testing.T) {
	set := fixtures.TestCerts(t)
	c := fixtures.NewCell(t, 3, fixtures.Options{TLS: set, Admin: "admin"})
	cert, key := set.UserFiles(t, "admin")
	_, port, _ := net.SplitHostPort(c.Addrs()[0])
	// 127.0.0.1:1 listens nowhere: only the rule makes it the replica.
	t.Setenv(client.EnvReplicas, "127.0.0.1:1")
	t.Setenv(client.EnvConnectTo, "127.0.0.1:1:127.0.0.1:"+port)
	t.Setenv(client.EnvCell, "t")
	t.Setenv(client.EnvCert, cert)
	t.Setenv(client.EnvKey, key)
	t.Setenv(client.EnvCA, set.CAFile())
	cfg, err := client.ConfigFromEnv()
	if err != nil {
		t.Fatalf("ConfigFromEnv: %v", err)
	}
	if cfg.TLS == nil || cfg.Cell != "t" {
		t.Fatalf("config: cell %q, TLS %v", cfg.Cell, cfg.TLS != nil)
	}
	cl := c.ClientWith(t, cfg)
	ctx := testCtx(t, 30*time.Second)

	h := open(t, ctx, cl, "svc", rwc|client.Directory)
	if h.Name() != "/ls/t/svc" {
		t.Fatalf("Name() = %q, want /ls/t/svc", h.Name())
	}
	lead := open(t, ctx, cl, "svc/leader", rwc)
	acquire(t, ctx, lead)
	locks, _, err := admin.New(cl).Locks(ctx, "svc")
	if err != nil || len(locks) != 1 || locks[0].Name != "/ls/t/svc/leader" {
		t.Fatalf("Locks(svc) = %+v, %v", locks, err)
	}
	if all, _, err := admin.New(cl).Locks(ctx, ""); err != nil || len(all) != 1 {
		t.Fatalf(`Locks("") (the whole cell) = %+v, %v`, all, err)
	}
	if _, err := admin.New(cl).BreakLock(ctx, "svc/leader", "test"); err != nil {
		t.Fatalf("break lock on a relative name: %v", err)
	}
	// Resolution does not make a bad name good, and says what it tried.
	if _, err := cl.Open(ctx, "svc/", client.Read); !errors.Is(err, client.ErrInvalidName) || !strings.Contains(err.Error(), "/ls/t/svc/") {
		t.Fatalf("open svc/: %v, want ErrInvalidName naming /ls/t/svc/", err)
	}
}

// TestConfigFromLookupErrors: the defaults are the CLI's, and each bad
// value fails with an *EnvError naming its variable and a typed cause.
func TestConfigFromLookupErrors(t *testing.T) {
	lookup := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	cfg, err := client.ConfigFromLookup(lookup(nil))
	if err != nil || cfg.Cell != client.DefaultCell || strings.Join(cfg.Replicas, ",") != client.DefaultReplicas || cfg.TLS != nil || cfg.Dialer != nil {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	for _, tc := range []struct {
		vars  map[string]string
		want  string // EnvError.Var
		cause error
	}{
		{map[string]string{client.EnvCell: "a/b"}, client.EnvCell, client.ErrInvalidName},
		{map[string]string{client.EnvCell: ""}, client.EnvCell, client.ErrInvalidName},
		{map[string]string{client.EnvReplicas: " , "}, client.EnvReplicas, nil},
		{map[string]string{client.EnvConnectTo: "nonsense"}, client.EnvConnectTo, nil},
		{map[string]string{client.EnvCert: "c.pem", client.EnvCA: "ca.pem"}, client.EnvKey, client.ErrTLSIncomplete},
		{map[string]string{client.EnvCert: "/nonexistent/c.pem", client.EnvKey: "/nonexistent/k.pem", client.EnvCA: "/nonexistent/ca.pem"}, client.EnvCert, fs.ErrNotExist},
	} {
		_, err := client.ConfigFromLookup(lookup(tc.vars))
		var ee *client.EnvError
		if !errors.As(err, &ee) || ee.Var != tc.want || (tc.cause != nil && !errors.Is(err, tc.cause)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an EnvError on %s (cause %v)", tc.vars, err, tc.want, tc.cause)
		}
	}
}
