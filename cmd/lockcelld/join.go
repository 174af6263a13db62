package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/cell"
	"lockcell/cell/certs"
	"lockcell/client"
	"lockcell/client/admin"
)

// joinFlags are serve's flags for a replica that joins a running cell.
func joinFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "join", Usage: "join a running cell: ask the cell at these client addresses (ADDR[,ADDR...]) " +
			"to add this replica (--id at --listen and --raft); with an empty --data it waits to be added instead of bootstrapping, " +
			"and --peers may be left out. A replica that is a member already (a restart) ignores it"},
		&cli.StringFlag{Name: "join-cert", EnvVars: []string{"LOCKCELL_CERT"},
			Usage: "with --join on a TLS cell: the admin's certificate (PEM) to ask with (the cell's CA is --ca)"},
		&cli.StringFlag{Name: "join-key", EnvVars: []string{"LOCKCELL_KEY"}, Usage: "with --join: the admin certificate's private key (PEM)"},
	}
}

// joinRequest is what a joining replica asks the cell with.
type joinRequest struct {
	cell  string
	addrs []string    // client addresses of running members
	tls   *tls.Config // the admin's, or nil on a plain cell
	// ask is false on a TLS cell without the admin's certificate: the
	// replica waits for an operator to add it (lockcell replica add).
	ask      bool
	progress time.Duration
}

// joinSetup reads the join flags: nil when --join is not given.
func joinSetup(c *cli.Context, cfg cell.Config) (*joinRequest, error) {
	addrs := splitList(c.String("join"))
	if len(addrs) == 0 {
		return nil, nil
	}
	jr := &joinRequest{cell: cfg.Cell, addrs: addrs, ask: true, progress: 2 * time.Second}
	cert, key := c.String("join-cert"), c.String("join-key")
	switch {
	case cfg.TLS == nil:
		// A plain cell: every caller is the admin.
	case cert == "" && key == "":
		jr.ask = false
	case cert == "" || key == "":
		return nil, cli.Exit("--join-cert and --join-key (or LOCKCELL_CERT and LOCKCELL_KEY) go together", 2)
	default:
		tc, err := certs.LoadClientConfig(cert, key, c.String("ca"))
		if err != nil {
			return nil, cli.Exit("--join-cert/--join-key: "+err.Error(), 2)
		}
		jr.tls = tc
	}
	return jr, nil
}

// joinCell asks the cell to add s (idempotent, so a retry after a lost
// answer is harmless), or, without the admin's certificate, says how to
// add it, then reports its catch-up on out until it votes. A replica that
// is in the configuration it holds already (restarted on its data) asks
// nothing. It returns nil once the replica votes, the master's refusal,
// or ctx's error.
func joinCell(ctx context.Context, s *cell.Server, self cell.Peer, jr *joinRequest, out io.Writer, log *slog.Logger) error {
	if cfg, err := s.Replica().Configuration(); err == nil {
		if sv, ok := cfg.Find(self.ID); ok {
			fmt.Fprintf(out, "lockcell replica %s: a member already (voter %v); --join does nothing\n", self.ID, sv.Voter)
			return nil
		}
	}
	if !jr.ask {
		fmt.Fprintf(out, "lockcell replica %s: no admin certificate (--join-cert, --join-key) to ask with; waiting to be added: "+
			"lockcell replica add %s %s %s\n", self.ID, self.ID, self.ClientAddr, self.RaftAddr)
		return awaitVote(ctx, s, self, jr, out)
	}
	cl, err := client.Dial(ctx, client.Config{Cell: jr.cell, Replicas: jr.addrs, TLS: jr.tls, ClientName: "lockcelld-join " + self.ID,
		RetryTimeout: 30 * time.Second, Logger: log})
	if err != nil {
		return fmt.Errorf("join: reach the cell at %v: %w", jr.addrs, err)
	}
	defer cl.Close()
	for {
		_, err := admin.New(cl).AddReplica(ctx, self.ID, self.ClientAddr, self.RaftAddr)
		if err == nil {
			break
		}
		if errors.Is(err, client.ErrNoMaster) && ctx.Err() == nil {
			log.Warn("join: no master answered yet; asking again", "err", err)
			continue
		}
		return fmt.Errorf("join: the cell did not add replica %s: %w", self.ID, err)
	}
	cl.Close()
	fmt.Fprintf(out, "lockcell replica %s: added to cell %q as a non-voter; catching up\n", self.ID, jr.cell)
	return awaitVote(ctx, s, self, jr, out)
}

// awaitVote reports the replica's catch-up every jr.progress until the
// configuration it holds makes it a voter.
func awaitVote(ctx context.Context, s *cell.Server, self cell.Peer, jr *joinRequest, out io.Writer) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var said time.Time
	for {
		if cfg, err := s.Replica().Configuration(); err == nil {
			if sv, ok := cfg.Find(self.ID); ok && sv.Voter {
				st := s.Replica().Status()
				fmt.Fprintf(out, "lockcell replica %s: caught up (log at %d) and promoted: a voter of cell %q\n", self.ID, st.LastIndex, jr.cell)
				return nil
			}
		}
		if time.Since(said) >= jr.progress {
			st := s.Replica().Status()
			fmt.Fprintf(out, "lockcell replica %s: catching up: log at %d, committed %d, applied %d\n",
				self.ID, st.LastIndex, st.CommitIndex, st.AppliedIndex)
			said = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
