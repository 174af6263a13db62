// Command lockcell-kv runs the fenced key/value resource server of package
// sequencer/kv: writers send the sequencer of the lockcell lock they hold
// in the Lockcell-Sequencer header, and writes of superseded lock holders
// are refused.
//
//	lockcell-kv --listen 127.0.0.1:8080 --state kv.json \
//	    --cell local --replicas 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
//
// With --replicas the server asks the cell (CheckSequencer, answers cached
// for 1 s) before it accepts a sequencer, so forged sequencers and a stale
// holder's first write are refused too; without it, it fences locally
// only.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/sequencer"
	"lockcell/sequencer/kv"
)

func main() {
	app := &cli.App{
		Name:  "lockcell-kv",
		Usage: "key/value resource server fenced by lockcell sequencers",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", Usage: "HTTP listen address"},
			&cli.StringFlag{Name: "state", Usage: "state file: the store and the fencing state survive restarts (default: in memory only)"},
			&cli.StringFlag{Name: "cell", Value: "local", Usage: "cell name: sequencers of other cells are refused"},
			&cli.StringFlag{Name: "replicas", Usage: "comma-separated client addresses of the cell's replicas; when given, sequencers are checked with the cell"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Action: serve,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "lockcell-kv:", err)
		os.Exit(1)
	}
}

func serve(c *cli.Context) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	gcfg := sequencer.GuardConfig{Cell: c.String("cell"), CacheTTL: time.Second}
	if r := c.String("replicas"); r != "" {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		checker, err := kv.DialChecker(dctx, client.Config{Cell: c.String("cell"), Replicas: strings.Split(r, ","),
			ClientName: "lockcell-kv", Logger: log})
		cancel()
		if err != nil {
			return fmt.Errorf("dialing cell %s: %w", c.String("cell"), err)
		}
		defer checker.Close()
		gcfg.Checker = checker
	} else {
		log.Warn("!!! NO --replicas: LOCAL FENCING ONLY. Sequencers are not verified with the cell: " +
			"a forged sequencer is accepted, and a stale holder's writes are accepted until the lock's next holder writes. " +
			"Do not use this against untrusted clients.")
	}
	srv, err := kv.NewServer(kv.Config{Guard: sequencer.NewGuard(gcfg), StateFile: c.String("state"), Logger: log})
	if err != nil {
		return err
	}
	hs := &http.Server{Addr: c.String("listen"), Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.ListenAndServe() }()
	log.Info("lockcell-kv serving", "listen", c.String("listen"), "cell", c.String("cell"),
		"state", c.String("state"), "checked", gcfg.Checker != nil)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
