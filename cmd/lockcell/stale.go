package main

import (
	"github.com/urfave/cli/v2"

	"lockcell/client"
)

// staleHelp is the --max-staleness paragraph of the reads' help.
const staleHelp = " With --max-staleness D the read may be answered by a replica other than the master (a read " +
	"replica, say) from a state that misses at most the writes of the last D (never one older than what " +
	"this command wrote or read), falling back to the master when none can prove that; it is never cached."

// staleFlag is the reads' --max-staleness.
func staleFlag() cli.Flag {
	return &cli.DurationFlag{Name: "max-staleness", Usage: "let a follower answer from a state at most `D` old"}
}

// staleOpts are the read options --max-staleness asks for, reporting who
// answered in info.
func staleOpts(c *cli.Context, info *client.ReadInfo) []client.ReadOption {
	d := c.Duration("max-staleness")
	if d <= 0 {
		return nil
	}
	return []client.ReadOption{client.MaxStaleness(d), client.WithReadInfo(info)}
}

// readJSON is who answered a read given --max-staleness.
type readJSON struct {
	Replica  string `json:"replica"`
	Index    uint64 `json:"index"`
	AgeMs    int64  `json:"age_ms"`
	Follower bool   `json:"follower"`
}

// readInfoJSON is info for --json, nil without --max-staleness.
func readInfoJSON(c *cli.Context, info client.ReadInfo) *readJSON {
	if c.Duration("max-staleness") <= 0 {
		return nil
	}
	return &readJSON{Replica: info.Replica, Index: info.Index, AgeMs: info.Age.Milliseconds(), Follower: info.Follower}
}
