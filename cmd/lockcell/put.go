package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/wire"
)

// putCommand writes a file's contents, creating the file (and by default
// its missing parent directories) when needed.
func putCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "put",
		Usage:     "write a file's contents (VALUE - reads stdin)",
		ArgsUsage: "NAME VALUE",
		Description: "Creates the file, and its missing parent directories, when needed. " +
			"With --if-generation N the write is a compare-and-swap: it happens only if the " +
			"file exists and its content generation is still N, and otherwise changes nothing.\n\n" +
			"With --ephemeral the file is created ephemeral: the cell deletes it when lockcell's session " +
			"ends, so on the command line it lasts only as long as put runs, and in 'lockcell shell' until " +
			"the shell exits (or its session is lost). An existing file is written only if it is " +
			"ephemeral already.\n\n" +
			"With --sequential NAME is a prefix: put creates a new file named NAME followed by the next " +
			"number of its directory's counter in ten zero-padded digits (jobs/job- makes " +
			"jobs/job-0000000017), and prints the name it made (--json: its stat, named so). Numbers " +
			"only grow and are never reused, so the names sort in the order they were made." +
			"\n\nExamples: lockcell put --if-generation 42 cfg/flag off; " +
			"lockcell put --sequential jobs/job- payload; " +
			"echo 'put --ephemeral svc/members/me up' | lockcell shell",
		Flags: []cli.Flag{
			&cli.Uint64Flag{Name: "if-generation", Usage: "write only if the content generation is still `N`"},
			&cli.BoolFlag{Name: "no-parents", Usage: "fail instead of creating missing parent directories"},
			&cli.BoolFlag{Name: "ephemeral", Usage: "create the file ephemeral: deleted when this session ends"},
			&cli.BoolFlag{Name: "sequential", Usage: "NAME is a prefix: create a new file NAME + a 10-digit sequence number and print its name"},
		},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 2, 2); err != nil {
				return err
			}
			name, err := e.putName(c.Bool("sequential"), c.Args().Get(0))
			if err != nil {
				return err
			}
			data, err := e.value(c.Args().Get(1))
			if err != nil {
				return fail("put", name, err)
			}
			var opts []client.SetOption
			mode := client.Read | client.Write | client.Create
			cas := c.IsSet("if-generation")
			if c.Bool("sequential") {
				if cas {
					return usageErrorf(c, "--sequential creates a new file; --if-generation needs one that exists")
				}
				if c.Bool("ephemeral") {
					mode |= client.Ephemeral
				}
				made, st, err := e.putSequential(name, data, mode, !c.Bool("no-parents"))
				if err != nil {
					return fail("put", name, err)
				}
				if e.json {
					return e.printJSON(toStatJSON(made, st))
				}
				_, err = fmt.Fprintln(e.stdout, made)
				return err
			}
			if c.Bool("ephemeral") {
				if cas {
					return usageErrorf(c, "--ephemeral creates a file; --if-generation needs one that exists")
				}
				mode |= client.Ephemeral
			}
			if cas {
				opts = append(opts, client.IfGeneration(c.Uint64("if-generation")))
				// A file that does not exist has no generation to match:
				// creating it first would leave an empty file behind a
				// failed compare-and-swap.
				mode &^= client.Create
			}
			st, err := e.put(name, data, mode, !cas && !c.Bool("no-parents"), opts)
			if err != nil {
				return fail("put", name, err)
			}
			if e.json {
				return e.printJSON(toStatJSON(name, st))
			}
			return nil
		},
	}
}

// value is put's VALUE argument: "-" means stdin, read up to the contents
// limit so a runaway pipe cannot exhaust memory.
func (e *env) value(arg string) ([]byte, error) {
	if arg != "-" {
		return []byte(arg), nil
	}
	data, err := io.ReadAll(io.LimitReader(e.stdin, wire.MaxContents+1))
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	if len(data) > wire.MaxContents {
		return nil, wire.Errorf(wire.CodeTooLarge, "stdin holds more than the %d-byte limit", wire.MaxContents)
	}
	return data, nil
}

// put opens (maybe creating) name and writes data, returning the new stat.
// With Ephemeral in mode an existing file must be ephemeral too, and the
// handle stays open until the session ends: closing the last handle of an
// ephemeral file deletes it.
func (e *env) put(name string, data []byte, mode client.OpenMode, parents bool, opts []client.SetOption) (client.Stat, error) {
	cl, err := e.client()
	if err != nil {
		return client.Stat{}, err
	}
	open := func() (*client.Handle, bool, error) {
		if mode&client.Create != 0 {
			// Create with the contents in one replicated step, so no reader
			// ever sees the new file empty; fall back to a write if it exists.
			opts := []client.OpenOption{client.WithContents(data)}
			if parents {
				opts = append(opts, client.WithParents())
			}
			h, err := cl.Open(e.ctx, name, mode|client.Excl, opts...)
			var oe *client.OpError
			if !errors.Is(err, client.ErrExists) || (errors.As(err, &oe) && oe.Path != name) {
				return h, err == nil, err
			}
		}
		h, err := cl.Open(e.ctx, name, mode&^(client.Create|client.Ephemeral))
		return h, false, err
	}
	h, created, err := open()
	if err != nil {
		return client.Stat{}, err
	}
	if mode&client.Ephemeral == 0 {
		defer h.Close()
	}
	if created {
		return h.GetStat(e.ctx)
	}
	if mode&client.Ephemeral != 0 {
		st, err := h.GetStat(e.ctx)
		if err != nil {
			return client.Stat{}, err
		}
		if !st.Ephemeral {
			h.Close()
			return client.Stat{}, wire.Errorf(wire.CodeExists, "%s exists and is not ephemeral (--ephemeral makes new files only)", name)
		}
	}
	return h.SetContentsAndStat(e.ctx, data, opts...)
}

// putSequential creates a new file under prefix with the next sequence
// number of its directory, with data as its first contents in the same
// replicated step, and returns the name made and its stat. An ephemeral
// one stays open until the session ends, like put's.
func (e *env) putSequential(prefix string, data []byte, mode client.OpenMode, parents bool) (string, client.Stat, error) {
	cl, err := e.client()
	if err != nil {
		return "", client.Stat{}, err
	}
	opts := []client.OpenOption{client.WithContents(data)}
	if parents {
		opts = append(opts, client.WithParents())
	}
	h, err := cl.Open(e.ctx, prefix, mode|client.Sequential, opts...)
	if err != nil {
		return "", client.Stat{}, err
	}
	if mode&client.Ephemeral == 0 {
		defer h.Close()
	}
	st, err := h.GetStat(e.ctx)
	return h.Name(), st, err
}

// putName resolves put's NAME: with --sequential a prefix (seqPrefix).
func (e *env) putName(sequential bool, arg string) (string, error) {
	if !sequential {
		return e.name("put", arg)
	}
	return e.seqPrefix("put", arg)
}

// seqPrefix resolves a --sequential prefix for op: kept as given (a
// trailing "/" makes names of digits alone in that directory), it must
// leave room for the number.
func (e *env) seqPrefix(op, arg string) (string, error) {
	n := client.ResolveName(e.cell, arg)
	if err := wire.ValidateSeqPrefix(e.cell, n); err != nil {
		return "", &opError{op: op, path: arg, err: err}
	}
	return n, nil
}
