package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"lockcell/client"
)

// mkdirCommand creates directories.
func mkdirCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "mkdir",
		Usage:     "create directories",
		ArgsUsage: "NAME...",
		Description: "Fails if a directory exists already or its parent is missing, unless -p. " +
			"Stops at the first failure. With --json prints {\"dirs\": [names]}.\n\n" +
			"With --sequential each NAME is a prefix: mkdir creates a new directory named NAME followed by " +
			"the next number of its parent's counter in ten zero-padded digits, and prints the name made " +
			"(--json: the names made)." +
			"\n\nExamples: lockcell mkdir -p /ls/local/jobs/etl; lockcell mkdir --sequential jobs/batch-",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "parents", Aliases: []string{"p"},
				Usage: "create missing parents; an existing directory is not an error"},
			&cli.BoolFlag{Name: "sequential", Usage: "each NAME is a prefix: create a new directory NAME + a 10-digit sequence number and print its name"},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 1, -1); err != nil {
				return err
			}
			if c.Bool("sequential") {
				return e.mkdirSequential(c.Args().Slice(), c.Bool("parents"))
			}
			names, err := e.names("mkdir", c.Args().Slice())
			if err != nil {
				return err
			}
			for _, name := range names {
				if c.Bool("parents") {
					err = e.mkdirAll(name)
				} else {
					err = e.mkdir(name)
				}
				if err != nil {
					return fail("mkdir", name, err)
				}
			}
			if e.json {
				return e.printJSON(struct {
					Dirs []string `json:"dirs"`
				}{names})
			}
			return nil
		},
	}
}

// names resolves every name before anything is done, so one bad name
// leaves the cell untouched.
func (e *env) names(op string, args []string) ([]string, error) {
	out := make([]string, len(args))
	for i, a := range args {
		n, err := e.name(op, a)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// mkdir creates one directory; it must not exist and its parent must.
func (e *env) mkdir(name string) error {
	cl, err := e.client()
	if err != nil {
		return err
	}
	h, err := cl.Open(e.ctx, name, client.Read|client.Create|client.Excl|client.Directory)
	if err != nil {
		return err
	}
	h.Close()
	return nil
}

// mkdirAll is mkdir -p: it creates name and its missing ancestors.
func (e *env) mkdirAll(name string) error {
	cl, err := e.client()
	if err != nil {
		return err
	}
	return cl.MkdirAll(e.ctx, name)
}

// mkdirSequential makes a new directory under each prefix with the next
// number of its parent's counter, printing each name made (with parents:
// making the prefix's missing directories first).
func (e *env) mkdirSequential(args []string, parents bool) error {
	prefixes := make([]string, len(args))
	for i, a := range args {
		p, err := e.seqPrefix("mkdir", a)
		if err != nil {
			return err
		}
		prefixes[i] = p
	}
	cl, err := e.client()
	if err != nil {
		return err
	}
	var made []string
	for _, p := range prefixes {
		var opts []client.OpenOption
		if parents {
			opts = append(opts, client.WithParents())
		}
		h, err := cl.Open(e.ctx, p, client.Read|client.Create|client.Directory|client.Sequential, opts...)
		if err != nil {
			return fail("mkdir", p, err)
		}
		h.Close()
		made = append(made, h.Name())
		if !e.json {
			if _, err := fmt.Fprintln(e.stdout, h.Name()); err != nil {
				return err
			}
		}
	}
	if e.json {
		return e.printJSON(struct {
			Dirs []string `json:"dirs"`
		}{made})
	}
	return nil
}
