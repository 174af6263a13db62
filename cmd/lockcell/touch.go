package main

import (
	"errors"

	"github.com/urfave/cli/v2"

	"lockcell/client"
)

// touchCommand creates empty files.
func touchCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "touch",
		Usage:     "create empty files; existing nodes are left unchanged",
		ArgsUsage: "NAME...",
		Description: "Creates each NAME as an empty file unless it exists (file or directory), in which " +
			"case it is left as it is (contents, generation and mtime unchanged). Parents must exist, " +
			"like touch(1): use mkdir -p first. Stops at the first failure. " +
			"With --json prints {\"touched\": [names]}.\n\n" +
			"Example: lockcell touch svc/ready svc/alive",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, -1); err != nil {
				return err
			}
			names, err := e.names("touch", c.Args().Slice())
			if err != nil {
				return err
			}
			for _, name := range names {
				if err := e.touch(name); err != nil {
					return fail("touch", name, err)
				}
			}
			if e.json {
				return e.printJSON(struct {
					Touched []string `json:"touched"`
				}{names})
			}
			return nil
		},
	}
}

// touch creates name as an empty file when it does not exist. Opening
// with Create (without Excl) is the whole operation: the cell creates a
// missing node and opens an existing one as it is.
func (e *env) touch(name string) error {
	cl, err := e.client()
	if err != nil {
		return err
	}
	h, err := cl.Open(e.ctx, name, client.Read|client.Create)
	if errors.Is(err, client.ErrExists) {
		// Create without Directory insists on a file: the name is an
		// existing directory, which touch leaves alone. Opening it as one
		// checks that (and reports anything else, e.g. permission).
		h, err = cl.Open(e.ctx, name, client.Read|client.Directory)
	}
	if err != nil {
		return err
	}
	return h.Close()
}
