package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/mirror"
)

// mirrorCommand runs a mirror (package mirror): flags and wiring only.
func mirrorCommand() *cli.Command {
	return &cli.Command{
		Name:  "mirror",
		Usage: "copy a subtree of one cell into other cells and keep the copies in step",
		Description: "Copies --subtree of cell --from into every cell of --to, at --dest (default " + mirror.DefaultDest +
			": /ls/global/config/a goes to /ls/<target>/global/config/a), then follows the source's subtree watch. " +
			"Cells are found by name in the cells file (--cells) or DNS SRV records under --cells-domain " +
			"(_lockcell._tcp.<cell>.<domain>). The mirror's principal (its --cert) needs read on the subtree in the " +
			"source and write on the copy's parent directories in each target. With --http it serves /metrics " +
			"(lockcell_mirror_lag_seconds{target}, lockcell_mirror_resyncs_total{target,reason}) and /healthz.\n\n" +
			"Example:\n   lockcelld mirror --cells /etc/lockcell/cells --from global --subtree /ls/global/config --to east,west --http :9480",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from", Usage: "the source cell; required"},
			&cli.StringFlag{Name: "subtree", Usage: "the directory mirrored, a full name in the source cell (/ls/<from>/...); required"},
			&cli.StringFlag{Name: "to", Usage: "the target cells, comma-separated; required"},
			&cli.StringFlag{Name: "dest", Value: mirror.DefaultDest, Usage: "where /ls/<from>/<rest> goes in a target: DEST/<rest>, {target} replaced by the target's name"},
			&cli.StringFlag{Name: "cells", EnvVars: []string{client.EnvCells}, Usage: "the cells file: a line per cell, its name then its replicas' client addresses"},
			&cli.StringFlag{Name: "cells-domain", EnvVars: []string{client.EnvCellsDomain}, Usage: "the DNS domain of the cells' SRV records"},
			&cli.StringFlag{Name: "cert", EnvVars: []string{client.EnvCert}, Usage: "the mirror's certificate (PEM), for cells with TLS; with --key and --ca"},
			&cli.StringFlag{Name: "key", EnvVars: []string{client.EnvKey}, Usage: "the certificate's key (PEM)"},
			&cli.StringFlag{Name: "ca", EnvVars: []string{client.EnvCA}, Usage: "the cells' CA certificate (PEM)"},
			&cli.StringFlag{Name: "http", Usage: "serve /metrics and /healthz at ADDR (off when empty)"},
			&cli.IntFlag{Name: "max-pending", Value: mirror.DefaultMaxPending, Usage: "changed names held for one target that cannot keep up; past it the target is re-synced in full"},
			&cli.DurationFlag{Name: "retry", Value: mirror.DefaultRetry, Usage: "the longest wait between tries of a failed write or watch"},
		},
		Action: func(c *cli.Context) error {
			for _, name := range []string{"from", "subtree", "to"} {
				if c.String(name) == "" {
					return cli.Exit("--"+name+" is required", 2)
				}
			}
			if c.String("cells") == "" && c.String("cells-domain") == "" {
				return cli.Exit("--cells or --cells-domain is required: the mirror finds every cell by name", 2)
			}
			flags := map[string]string{client.EnvCell: c.String("from"), client.EnvCells: c.String("cells"),
				client.EnvCellsDomain: c.String("cells-domain"), client.EnvCert: c.String("cert"), client.EnvKey: c.String("key"),
				client.EnvCA: c.String("ca")}
			base, err := client.ConfigFromLookup(func(name string) (string, bool) {
				v, ok := flags[name]
				return v, ok && v != ""
			})
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			log := logger(c)
			base.ClientName, base.RenewSession, base.Logger = "lockcelld-mirror", true, log
			cs, err := client.NewCells(base)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			defer cs.Close()
			var to []string
			for _, t := range strings.Split(c.String("to"), ",") {
				if t = strings.TrimSpace(t); t != "" {
					to = append(to, t)
				}
			}
			m, err := mirror.New(mirror.Config{Cells: cs, From: c.String("from"), Subtree: c.String("subtree"), To: to,
				Dest: c.String("dest"), MaxPending: c.Int("max-pending"), Retry: c.Duration("retry"), Logger: log})
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if addr := c.String("http"); addr != "" {
				srv, bound, err := serveMirrorHTTP(addr, m)
				if err != nil {
					return cli.Exit(err.Error(), 1)
				}
				defer srv.Close()
				fmt.Fprintf(os.Stderr, "lockcelld: mirror metrics at http://%s/metrics\n", bound)
			}
			fmt.Fprintf(os.Stderr, "lockcelld: mirroring %s of cell %s to %s\n", m.Subtree(), c.String("from"), strings.Join(to, ", "))
			if err := m.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return cli.Exit(err.Error(), 1)
			}
			return nil
		},
	}
}

// serveMirrorHTTP serves the mirror's /metrics (its own, the Go
// runtime's and the process's) and /healthz at addr.
func serveMirrorHTTP(addr string, m *mirror.Mirror) (*http.Server, string, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--http: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv, ln.Addr().String(), nil
}
