package main

import (
	"encoding/hex"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"lockcell/cell"
	"lockcell/fsm"
	"lockcell/replica"
)

// restoreCommand seeds a new replica's data folder from a backup file.
func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "seed a new replica's data folder from a backup file (lockcell backup)",
		Description: "Checks the backup (checksum, and the state decoded and validated in full), then writes its " +
			"state into --data, which must not exist or be empty, as a Raft snapshot at the backup's index whose " +
			"configuration is --peers. Run it once for every replica of the new cell, each with its own --id and " +
			"--data and all with the same --from and --peers, then start each with `lockcelld serve` and the same " +
			"--id, --data, --peers and --cell. The cell name is part of every node name and sequencer, so it must " +
			"be the backup's (--cell, when given, is checked against it).\n\n" +
			"Restored: every node with its stat (instance, generations, times) and contents, the ACL files, and the " +
			"cell's sequencer key (sequencers issued before the backup still verify). Not restored: sessions, their " +
			"handles, the locks they held or waited for, lock-delays, and ephemeral nodes (which live only with " +
			"their sessions).\n\n" +
			"Example:\n   lockcelld restore --from backup.lcb --data ./r1 --id 1 --peers 1=10.0.0.1:7001/10.0.0.1:7101,2=...,3=...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from", Usage: "the backup file; required"},
			&cli.StringFlag{Name: "data", Usage: "the new replica's data folder (must not exist or be empty); required"},
			&cli.StringFlag{Name: "id", Usage: "the new replica's id (one of --peers); required"},
			&cli.StringFlag{Name: "peers", Usage: "all members of the new cell: id=clientaddr/raftaddr,...; required"},
			&cli.StringFlag{Name: "cell", Usage: "the new cell's name: must be the backup's (default: the backup's)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "check the backup and the flags, and write nothing"},
		},
		Action: func(c *cli.Context) error {
			for _, name := range []string{"from", "data", "id", "peers"} {
				if c.String(name) == "" && !(c.Bool("dry-run") && name != "from") {
					return cli.Exit("--"+name+" is required", 2)
				}
			}
			var peers []cell.Peer
			if c.String("peers") != "" {
				var err error
				if peers, err = cell.ParsePeers(c.String("peers")); err != nil {
					return cli.Exit(err.Error(), 2)
				}
			}
			f, err := os.Open(c.String("from"))
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			defer f.Close()
			b, err := fsm.ReadBackup(f)
			if err != nil {
				return cli.Exit(fmt.Sprintf("%s: %v", c.String("from"), err), 1)
			}
			h := b.Header
			if c.Bool("dry-run") {
				nodes, eph, sessions := fsm.BackupPreview(b)
				if want := c.String("cell"); want != "" && want != h.Cell {
					return cli.Exit(fmt.Sprintf("the backup is of cell %q, not %q", h.Cell, want), 1)
				}
				fmt.Fprintf(c.App.Writer, "%s: ok: cell %s, index %d; would restore %d nodes, drop %d sessions and %d ephemeral nodes\n",
					c.String("from"), h.Cell, h.Applied, nodes, sessions, eph)
				return nil
			}
			var rps []replica.Peer
			for _, p := range peers {
				rps = append(rps, replica.Peer{ID: p.ID, RaftAddr: p.RaftAddr})
			}
			res, err := replica.Seed(b, replica.SeedConfig{Dir: c.String("data"), ID: c.String("id"), Cell: c.String("cell"),
				Peers: rps, Logger: logger(c)})
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			fmt.Fprintf(c.App.Writer, "restored cell %s at index %d into %s: %d nodes; dropped %d sessions and %d ephemeral nodes; state sha256 %s\n"+
				"start it with: lockcelld serve --cell %s --id %s --data %s --peers %s ...\n",
				h.Cell, h.Applied, c.String("data"), res.Nodes, res.Sessions, res.DroppedEphemeral, hex.EncodeToString(res.StateHash[:]),
				h.Cell, c.String("id"), c.String("data"), cell.FormatPeers(peers))
			return nil
		},
	}
}
