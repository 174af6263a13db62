// Command lockcelld runs lockcell replicas: "dev" starts a whole
// five-replica cell in one process on loopback; "serve" runs one replica of
// a real cell.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/cell"
)

func main() {
	app := &cli.App{
		Name:  "lockcelld",
		Usage: "lockcell replica daemon",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "warn", Usage: "debug, info, warn or error", EnvVars: []string{"LOCKCELL_LOG_LEVEL"}},
			&cli.BoolFlag{Name: "log-json", Usage: "structured JSON logs"},
		},
		Commands: []*cli.Command{devCommand(), serveCommand()},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "lockcelld:", err)
		os.Exit(1)
	}
}

func logger(c *cli.Context) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		level = slog.LevelWarn
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.Bool("log-json") {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func timingFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "lease", Value: 12 * time.Second, Usage: "session lease"},
		&cli.DurationFlag{Name: "lock-delay", Value: time.Minute, Usage: "default lock-delay (at most 1m)"},
	}
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run a five-replica development cell in this process on loopback",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "data", Value: "./lockcell-data", Usage: "data folder (one sub-folder per replica)"},
			&cli.StringFlag{Name: "cell", Value: "local", Usage: "cell name"},
			&cli.IntFlag{Name: "port", Value: 7001, Usage: "first client port (replicas use port..port+4)"},
			&cli.IntFlag{Name: "raft-port", Value: 7101, Usage: "first Raft port"},
			&cli.IntFlag{Name: "replicas", Value: 5, Usage: "number of replicas"},
			&cli.IntFlag{Name: "metrics-port", Value: 7201, Usage: "first Prometheus /metrics port (replica i on port+i); 0 turns metrics off"},
		}, timingFlags()...),
		Action: func(c *cli.Context) error {
			log := logger(c)
			log.Warn("dev cell runs WITHOUT TLS: every caller is the same principal; do not expose these ports")
			d, err := cell.StartDev(cell.DevConfig{Cell: c.String("cell"), Dir: c.String("data"),
				Peers:    cell.LoopbackPeers(c.Int("replicas"), c.Int("port"), c.Int("raft-port")),
				LeaseTTL: c.Duration("lease"), DefaultLockDelay: c.Duration("lock-delay"), Logger: log,
				MetricsPort: c.Int("metrics-port")})
			if err != nil {
				return err
			}
			defer d.Close()
			ctx, cancel := signalContext()
			defer cancel()
			wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
			m, err := d.WaitForMaster(wctx)
			wcancel()
			if err != nil {
				return err
			}
			_, epoch := m.IsMaster()
			fmt.Printf("lockcell dev cell %q serving: master %s (replica %s, epoch %d); replicas %s; data %s\n",
				c.String("cell"), m.ClientAddr(), m.ID(), epoch, strings.Join(d.Addrs(), ","), c.String("data"))
			<-ctx.Done()
			fmt.Println("lockcell dev cell: shutting down")
			return d.Close()
		},
	}
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run one replica of a cell",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "id", Required: true, Usage: "this replica's id (one of --peers)"},
			&cli.StringFlag{Name: "data", Required: true, Usage: "data folder"},
			&cli.StringFlag{Name: "cell", Value: "local", Usage: "cell name"},
			&cli.StringFlag{Name: "peers", Required: true, Usage: "all members: id=clientaddr/raftaddr,..."},
			&cli.StringFlag{Name: "listen", Usage: "client address (must match this id's entry in --peers)"},
			&cli.StringFlag{Name: "raft", Usage: "Raft address (must match this id's entry in --peers)"},
			&cli.StringFlag{Name: "metrics", Usage: "serve Prometheus metrics at http://ADDR/metrics (off when empty)"},
		}, timingFlags()...),
		Action: func(c *cli.Context) error {
			log := logger(c)
			peers, err := cell.ParsePeers(c.String("peers"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			for _, p := range peers {
				if p.ID != c.String("id") {
					continue
				}
				if l := c.String("listen"); l != "" && l != p.ClientAddr {
					return cli.Exit(fmt.Sprintf("--listen %s differs from peer %s's client address %s", l, p.ID, p.ClientAddr), 2)
				}
				if r := c.String("raft"); r != "" && r != p.RaftAddr {
					return cli.Exit(fmt.Sprintf("--raft %s differs from peer %s's Raft address %s", r, p.ID, p.RaftAddr), 2)
				}
			}
			log.Warn("replica runs WITHOUT TLS: every caller is the same principal")
			s, err := cell.New(cell.Config{Cell: c.String("cell"), Self: c.String("id"), Peers: peers, Dir: c.String("data"),
				LeaseTTL: c.Duration("lease"), DefaultLockDelay: c.Duration("lock-delay"), Logger: log,
				MetricsAddr: c.String("metrics")})
			if err != nil {
				return err
			}
			fmt.Printf("lockcell replica %s of cell %q listening on %s\n", c.String("id"), c.String("cell"), s.ClientAddr())
			ctx, cancel := signalContext()
			defer cancel()
			<-ctx.Done()
			return s.Close()
		},
	}
}
