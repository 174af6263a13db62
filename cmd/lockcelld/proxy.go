package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"

	"lockcell/cell"
	"lockcell/cell/certs"
	"lockcell/proxy"
)

// proxyCommand is `lockcelld proxy`: flags and wiring only; the proxy is
// package proxy.
func proxyCommand() *cli.Command {
	d := cell.DefaultConnLimits
	return &cli.Command{
		Name:  "proxy",
		Usage: "run a proxy: clients dial it as a replica; it forwards their calls to the master and coalesces their KeepAlives",
		Description: "Clients configured with the proxy's address (alone, with other proxies, or with the replicas) use it as a replica. " +
			"The proxy forwards every call to the master on its client's behalf and answers KeepAlives itself, keeping all its " +
			"sessions' leases with a few batch calls. On a TLS cell it presents --cert (a replica certificate naming the proxy's " +
			"host) to its clients, and calls the master with --upstream-cert, a user certificate whose name every replica trusts " +
			"as a proxy (serve --proxy-principals). With --http it serves /metrics (lockcell_proxy_*), /healthz, and /readyz " +
			"(200 while it has a master and a fresh lease for its clients' sessions).\n\n" +
			"Example:\n   lockcelld proxy --listen 10.0.0.9:7001 --peers 10.0.0.1:7001,10.0.0.2:7001,10.0.0.3:7001 \\\n" +
			"      --cert proxy9.crt --key proxy9.key --ca ca.crt --upstream-cert proxy.crt --upstream-key proxy.key",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "client address to serve; required"},
			&cli.StringFlag{Name: "peers", Usage: "the replicas' client addresses, comma-separated; required"},
			&cli.StringFlag{Name: "cert", Usage: "the certificate the proxy presents to its clients (a replica certificate naming its host): turns mutual TLS on"},
			&cli.StringFlag{Name: "key", Usage: "its private key (PEM)"},
			&cli.StringFlag{Name: "ca", Usage: "the cell's CA certificate (PEM)"},
			&cli.StringFlag{Name: "upstream-cert", Usage: "the user certificate the proxy calls the master with (its name must be in every replica's --proxy-principals)"},
			&cli.StringFlag{Name: "upstream-key", Usage: "its private key (PEM)"},
			&cli.StringFlag{Name: "connect-to", Usage: "ADDR=ADDR,...: dial the replica the cell names by the first address at the second (NAT, a container network)"},
			&cli.StringFlag{Name: "http", Usage: "serve /metrics, /healthz and /readyz at ADDR (off when empty)"},
			&cli.BoolFlag{Name: "cache-reads", Usage: "answer clients' file reads from a cache the proxy keeps consistent through a cache session of its own (the master invalidates it, and the clients it served, before every write)"},
			&cli.GenericFlag{Name: "cache-bytes", Value: newByteSize(proxy.DefaultCacheBytes), Usage: "with --cache-reads, the most the cache holds (contents, names and a little more per entry)"},
			&cli.BoolFlag{Name: "insecure", Usage: "run without TLS, for a plain cell: every client is anonymous, the admin; listens on loopback only"},
			&cli.BoolFlag{Name: "insecure-bind-any", Usage: "with --insecure, allow a --listen address other than loopback"},
			&cli.IntFlag{Name: "max-conns-per-ip", Value: d.MaxConnsPerIP, Usage: "client connections one IP address may hold"},
			&cli.IntFlag{Name: "max-conns", Value: d.MaxConns, Usage: "client connections the proxy may hold"},
			&cli.IntFlag{Name: "max-conns-per-principal", Value: d.MaxConnsPerPrincipal, Usage: "client connections one principal may hold"},
			&cli.IntFlag{Name: "max-streams-per-conn", Value: d.MaxStreamsPerConn, Usage: "calls in flight on one client connection"},
			&cli.IntFlag{Name: "max-calls-per-session", Value: d.MaxCallsPerSession, Usage: "calls in flight of one session on a connection"},
			&cli.IntFlag{Name: "max-streams-per-ip", Value: d.MaxStreamsPerIP, Usage: "client streams open at once from one IP address (every client session parks a KeepAlive here)"},
			&cli.IntFlag{Name: "max-streams-per-principal", Value: d.MaxStreamsPerPrincipal, Usage: "client streams open at once of one principal"},
			&cli.IntFlag{Name: "max-streams", Value: d.MaxStreams, Usage: "client streams open at once in the proxy"},
			&cli.IntFlag{Name: "max-kept-streams-per-ip", Value: d.MaxKeptStreamsPerIP, Usage: "client streams answered and not yet closed, or kept idle for a next call, from one IP address (clients behind one NAT address need more)"},
			&cli.IntFlag{Name: "max-kept-streams-per-principal", Value: d.MaxKeptStreamsPerPrincipal, Usage: "client streams answered and not yet closed, or kept idle, of one principal"},
			&cli.IntFlag{Name: "max-kept-streams", Value: d.MaxKeptStreams, Usage: "client streams kept idle for a next call in the whole proxy"},
		}, portBudgetFlags()...),
		Action: func(c *cli.Context) error {
			sig := catchSignals()
			defer sig.release()
			cfg, err := proxyConfig(c)
			if err != nil {
				return err
			}
			listen := c.String("listen")
			if c.Bool("insecure") && !c.Bool("insecure-bind-any") && !loopback(listen) {
				return cli.Exit("--insecure listens on loopback only (--insecure-bind-any to allow "+listen+")", 2)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			cfg.Metrics = reg
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return cli.Exit(fmt.Sprintf("listen %s: %v", listen, err), 1)
			}
			p, err := proxy.New(ln, cfg)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			p.Serve()
			if addr := c.String("http"); addr != "" {
				srv, bound, err := serveProxyHTTP(addr, p.HTTPHandler(reg))
				if err != nil {
					p.Close()
					return cli.Exit(err.Error(), 1)
				}
				defer srv.Close()
				fmt.Fprintf(os.Stderr, "lockcelld proxy: metrics at http://%s/metrics\n", bound)
			}
			fmt.Fprintf(os.Stderr, "lockcelld proxy: serving on %s for %v\n", p.Addr(), cfg.Peers)
			<-sig.stop.Done()
			p.Close()
			return nil
		},
	}
}

// proxyConfig reads the proxy's flags.
func proxyConfig(c *cli.Context) (proxy.Config, error) {
	if c.String("listen") == "" || c.String("peers") == "" {
		return proxy.Config{}, cli.Exit("--listen and --peers are required", 2)
	}
	// The client port's limits read as a replica's are; a proxy has no
	// share of file descriptors to lower its connection cap to.
	lim := limits(c)
	lim.MaxConns = c.Int("max-conns")
	cfg := proxy.Config{Peers: splitList(c.String("peers")), Logger: logger(c), DialTimeout: 5 * time.Second, Limits: lim,
		CacheReads: c.Bool("cache-reads")}
	if cfg.CacheReads {
		n := int64(*c.Generic("cache-bytes").(*byteSize))
		if n < 1<<20 {
			return proxy.Config{}, cli.Exit(fmt.Sprintf("--cache-bytes %s: below the minimum 1MiB", cell.FormatBytes(n)), 2)
		}
		cfg.CacheBytes = n
	}
	if ct := c.String("connect-to"); ct != "" {
		m := map[string]string{}
		for _, r := range splitList(ct) {
			from, to, ok := strings.Cut(r, "=")
			if !ok || from == "" || to == "" {
				return proxy.Config{}, cli.Exit(fmt.Sprintf("--connect-to rule %q: want ADDR=ADDR", r), 2)
			}
			m[from] = to
		}
		cfg.Dialer = proxy.MapDialer(m)
	}
	cert, key, ca, ucert, ukey := c.String("cert"), c.String("key"), c.String("ca"), c.String("upstream-cert"), c.String("upstream-key")
	switch {
	case cert != "" && key != "" && ca != "" && ucert != "" && ukey != "":
		if c.Bool("insecure") {
			return proxy.Config{}, cli.Exit("--insecure contradicts --cert, --key and --ca", 2)
		}
		srv, _, err := certs.LoadReplicaConfigs(cert, key, ca)
		if err != nil {
			return proxy.Config{}, cli.Exit(err.Error(), 2)
		}
		up, err := certs.LoadClientConfig(ucert, ukey, ca)
		if err != nil {
			return proxy.Config{}, cli.Exit(err.Error(), 2)
		}
		cfg.TLS, cfg.Upstream = srv, up
	case cert != "" || key != "" || ca != "" || ucert != "" || ukey != "":
		return proxy.Config{}, cli.Exit("--cert, --key, --ca, --upstream-cert and --upstream-key go together", 2)
	case !c.Bool("insecure"):
		return proxy.Config{}, cli.Exit("no TLS: give --cert, --key, --ca, --upstream-cert and --upstream-key, or --insecure for a plain cell", 2)
	}
	return cfg, nil
}

// serveProxyHTTP serves h (the proxy's /metrics, /healthz and /readyz)
// at addr until the returned server is closed.
func serveProxyHTTP(addr string, h http.Handler) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--http: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv, ln.Addr().String(), nil
}

// loopback reports whether addr's host is a loopback address or localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
