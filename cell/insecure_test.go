package cell_test

import (
	"strings"
	"testing"
	"time"

	"lockcell/cell"
	"lockcell/fixtures"
)

// A plain cell is a choice the configuration states (Insecure), and it
// listens on loopback unless InsecureAnyAddress says otherwise.
func TestConfigPlainIsExplicit(t *testing.T) {
	set := fixtures.TestCerts(t)
	srv, peer := set.ReplicaTLS(t, "1")
	cfg := func(client, raft string) cell.Config {
		return cell.Config{Cell: "t", Self: "1", Dir: t.TempDir(),
			Peers: []cell.Peer{{ID: "1", ClientAddr: client, RaftAddr: raft}}}
	}
	for _, c := range []struct {
		name string
		cfg  cell.Config
		want string // "" for valid
	}{
		{"no TLS", cfg("127.0.0.1:1", "127.0.0.1:2"), "Insecure"},
		{"Insecure on loopback", with(cfg("127.0.0.1:1", "127.0.0.2:2"), func(c *cell.Config) { c.Insecure = true }), ""},
		{"Insecure on localhost", with(cfg("localhost:1", "[::1]:2"), func(c *cell.Config) { c.Insecure = true }), ""},
		{"Insecure on all interfaces", with(cfg(":1", "127.0.0.1:2"), func(c *cell.Config) { c.Insecure = true }), "loopback"},
		{"Insecure Raft port on a LAN", with(cfg("127.0.0.1:1", "192.0.2.1:2"), func(c *cell.Config) { c.Insecure = true }), "loopback"},
		{"InsecureAnyAddress", with(cfg("0.0.0.0:1", "192.0.2.1:2"), func(c *cell.Config) { c.Insecure, c.InsecureAnyAddress = true, true }), ""},
		{"TLS", with(cfg("0.0.0.0:1", "192.0.2.1:2"), func(c *cell.Config) { c.TLS, c.PeerTLS = srv, peer }), ""},
		{"TLS and Insecure", with(cfg("127.0.0.1:1", "127.0.0.1:2"), func(c *cell.Config) { c.TLS, c.PeerTLS, c.Insecure = srv, peer, true }), "contradict"},
		{"longest lease a minute", with(cfg("127.0.0.1:1", "127.0.0.1:2"), func(c *cell.Config) { c.Insecure, c.MaxLeaseTTL = true, time.Minute }), ""},
		{"longest lease negative", with(cfg("127.0.0.1:1", "127.0.0.1:2"), func(c *cell.Config) { c.Insecure, c.MaxLeaseTTL = true, -time.Second }), "negative"},
		{"longest lease past its bound", with(cfg("127.0.0.1:1", "127.0.0.1:2"), func(c *cell.Config) { c.Insecure, c.MaxLeaseTTL = true, 6*time.Minute }), "more than 5m"},
		{"longest lease under the lease", with(cfg("127.0.0.1:1", "127.0.0.1:2"), func(c *cell.Config) {
			c.Insecure, c.LeaseTTL, c.MaxLeaseTTL = true, 20*time.Second, 15*time.Second
		}), "shorter than the lease"},
		{"longest lease under the default lease", with(cfg("127.0.0.1:1", "127.0.0.1:2"), func(c *cell.Config) { c.Insecure, c.MaxLeaseTTL = true, 5*time.Second }), "shorter than the lease (12s)"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, c.want)
		}
	}
}

func with(c cell.Config, f func(*cell.Config)) cell.Config {
	f(&c)
	return c
}
