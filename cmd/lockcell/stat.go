package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/client"
)

// statCommand prints all of a node's metadata.
func statCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "stat",
		Usage:     "print a file's or directory's metadata",
		ArgsUsage: "NAME",
		Description: "Prints every field of the node's Stat: instance, generations, checksum, size, " +
			"times, ephemeral flag, ACL names, lock mode, holders, waiters and lock-delay. --json for scripts.\n\n" +
			"With --max-staleness the JSON has \"read\", who answered." + staleHelp + "\n\n" +
			"Example: lockcell --json stat cfg/flag",
		Flags: []cli.Flag{staleFlag()},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, 1); err != nil {
				return err
			}
			name, err := e.name("stat", c.Args().First())
			if err != nil {
				return err
			}
			var info client.ReadInfo
			st, err := e.stat(name, staleOpts(c, &info)...)
			if err != nil {
				return fail("stat", name, err)
			}
			if e.json {
				if r := readInfoJSON(c, info); r != nil {
					return e.printJSON(struct {
						statJSON
						Read *readJSON `json:"read"`
					}{toStatJSON(name, st), r})
				}
				return e.printJSON(toStatJSON(name, st))
			}
			return e.printFields(statFields(name, st))
		},
	}
}

// stat returns a node's metadata.
func (e *env) stat(name string, opts ...client.ReadOption) (client.Stat, error) {
	cl, err := e.client()
	if err != nil {
		return client.Stat{}, err
	}
	h, err := cl.Open(e.ctx, name, client.Read)
	if err != nil {
		return client.Stat{}, err
	}
	defer h.Close()
	return h.GetStat(e.ctx, opts...)
}

// field is one "key: value" line of stat's output.
type field struct{ key, value string }

func statFields(name string, st client.Stat) []field {
	kind := "file"
	if st.Dir {
		kind = "directory"
	}
	acl := func(s string) string {
		if s == "" {
			return "(none)"
		}
		return s
	}
	fs := []field{
		{"name", name},
		{"type", kind},
		{"instance", fmt.Sprint(st.Instance)},
		{"content generation", fmt.Sprint(st.ContentGen)},
		{"lock generation", fmt.Sprint(st.LockGen)},
		{"acl generation", fmt.Sprint(st.ACLGen)},
		{"checksum", checksumHex(st.Checksum)},
		{"size", fmt.Sprint(st.Size)},
		{"ctime", timeText(st.CTime)},
		{"mtime", timeText(st.MTime)},
		{"ephemeral", fmt.Sprint(st.Ephemeral)},
		{"read acl", acl(st.ReadACL)},
		{"write acl", acl(st.WriteACL)},
		{"change acl", acl(st.ChangeACL)},
		{"lock mode", st.LockMode.String()},
		{"lock holders", fmt.Sprint(st.LockHolders)},
		{"lock waiters", fmt.Sprint(st.LockWaiters)},
		{"lock-delay until", lockDelayText(st.LockDelayUntil)},
	}
	// Shown only for the nodes that have them, so other nodes' output
	// reads as before.
	if st.TTL != 0 {
		fs = append(fs, field{"ttl", st.TTL.String()}, field{"expires", timeText(st.MTime.Add(st.TTL)) + " unless written"})
	}
	if st.Container {
		fs = append(fs, field{"container", "true"})
	}
	if st.SemLimit != 0 {
		fs = append(fs, field{"semaphore permits", fmt.Sprintf("%d (%d held)", st.SemLimit, st.LockHolders)})
	}
	return fs
}

// printFields prints aligned "key: value" lines, values in one column.
func (e *env) printFields(fs []field) error {
	width := 0
	for _, f := range fs {
		width = max(width, len(f.key))
	}
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "%-*s %s\n", width+1, f.key+":", f.value)
	}
	_, err := fmt.Fprint(e.stdout, b.String())
	return err
}

// lockDelayText shows when a lock-delay ends, or that none applies.
func lockDelayText(t time.Time) string {
	if t.IsZero() || time.Now().After(t) {
		return "none"
	}
	return t.UTC().Format(time.RFC3339Nano)
}
