package main

import (
	"fmt"
	"io"
	"lockcell/client/admin"
	"os"
	"strconv"

	"github.com/urfave/cli/v2"

	"lockcell/sequencer"
	"lockcell/wire"
)

// seqEnv is the environment variable lock hands its command the sequencer
// in, and where seq looks for one when none is given.
const seqEnv = "LOCKCELL_SEQUENCER"

// maxSeqText bounds a sequencer read from stdin (real ones are a few
// hundred bytes: names are at most 1 KiB).
const maxSeqText = 16 << 10

// seqCommand groups the sequencer verbs.
func seqCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "seq",
		Usage:     "inspect (show) or validate (check) a lock's sequencer",
		ArgsUsage: "show|check [SEQUENCER]",
		Description: "SEQUENCER is the text lock hands its command in $" + seqEnv +
			" (unpadded base64url); - reads it from stdin, and without it $" + seqEnv + " is used." +
			"\n\nExample: lockcell seq check \"$LOCKCELL_SEQUENCER\"",
		Subcommands: []*cli.Command{seqShowCommand(e), seqCheckCommand(e)},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageErrorf(c, "unknown seq command %q (want show or check)", c.Args().First())
			}
			return usageErrorf(c, "no seq command given (want show or check)")
		},
	}
}

// seqJSON is the JSON form of a sequencer's fields.
type seqJSON struct {
	Cell       string `json:"cell"`
	Path       string `json:"path"`
	Mode       string `json:"mode"`
	Generation uint64 `json:"generation"`
}

func toSeqJSON(s sequencer.Sequencer) seqJSON {
	return seqJSON{Cell: s.Cell, Path: s.Path, Mode: s.Mode.String(), Generation: s.Generation}
}

func seqShowCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "print a sequencer's cell, path, mode and lock generation",
		ArgsUsage: "[SEQUENCER]",
		Description: "Decodes the sequencer locally, without contacting the cell, so it cannot tell " +
			"a forged or stale sequencer from a good one (seq check can). With --json prints " +
			`{"cell", "path", "mode", "generation"}.` +
			"\n\nExample: lockcell seq show \"$LOCKCELL_SEQUENCER\"",
		Action: func(c *cli.Context) error {
			_, s, err := e.seqArg(c, "seq show")
			if err != nil {
				return err
			}
			if e.json {
				return e.printJSON(toSeqJSON(s))
			}
			return e.printFields([]field{{"cell", s.Cell}, {"path", s.Path}, {"mode", s.Mode.String()},
				{"generation", strconv.FormatUint(s.Generation, 10)}})
		},
	}
}

func seqCheckCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "ask the cell whether a sequencer is still valid",
		ArgsUsage: "[SEQUENCER]",
		Description: "Prints valid (exit 0) when the cell signed the sequencer and its lock is held " +
			"right now at that generation in that mode, and \"stale: REASON\" (exit 1) otherwise: the " +
			"lock file is gone, the lock is free, held at another generation or in the other mode. " +
			"Checking needs read permission on the lock file; without it every sequencer of that lock " +
			"is stale, as if the file were gone. " +
			"A malformed, forged or other cell's sequencer is an error (exit 1). With --json prints " +
			`{"valid", "reason" (when stale), "cell", "path", "mode", "generation"}.` +
			"\n\nExample: lockcell seq check \"$LOCKCELL_SEQUENCER\" && echo still the holder",
		Action: func(c *cli.Context) error {
			b, s, err := e.seqArg(c, "seq check")
			if err != nil {
				return err
			}
			if s.Cell != e.cell {
				// The master would refuse it too; saying so here is clearer
				// and needs no dialing.
				return fail("seq check", "", wire.Errorf(wire.CodeBadSequencer,
					"the sequencer is of cell %q, not of --cell %q", s.Cell, e.cell))
			}
			cl, err := e.client()
			if err != nil {
				return fail("seq check", "", err)
			}
			st, err := admin.New(cl).SequencerStatus(e.ctx, b)
			if err != nil {
				return fail("seq check", "", err)
			}
			if e.json {
				err = e.printJSON(struct {
					Valid  bool   `json:"valid"`
					Reason string `json:"reason,omitempty"`
					seqJSON
				}{st.Valid, st.Reason, toSeqJSON(s)})
			} else if st.Valid {
				_, err = fmt.Fprintln(e.stdout, "valid")
			} else {
				_, err = fmt.Fprintf(e.stdout, "stale: %s\n", st.Reason)
			}
			if err == nil && !st.Valid {
				// Stale is an answer, not a failure to get one: exit 1
				// with nothing on stderr.
				return &exitStatus{code: exitError}
			}
			return err
		},
	}
}

// seqArg returns the sequencer the command was given (its argument, stdin
// for -, or $LOCKCELL_SEQUENCER), decoded and parsed. It never dials.
func (e *env) seqArg(c *cli.Context, op string) ([]byte, sequencer.Sequencer, error) {
	if err := wantArgs(c, 0, 1); err != nil {
		return nil, sequencer.Sequencer{}, err
	}
	text := c.Args().First()
	switch {
	case c.NArg() == 0:
		text = os.Getenv(seqEnv)
		if text == "" {
			return nil, sequencer.Sequencer{}, usageErrorf(c, "no SEQUENCER given and $%s is not set", seqEnv)
		}
	case text == "-":
		data, err := io.ReadAll(io.LimitReader(e.stdin, maxSeqText+1))
		if err != nil {
			return nil, sequencer.Sequencer{}, fail(op, "", fmt.Errorf("read stdin: %w", err))
		}
		if len(data) > maxSeqText {
			return nil, sequencer.Sequencer{}, fail(op, "", badSequencer(fmt.Errorf("stdin holds more than %d bytes", maxSeqText)))
		}
		text = string(data)
	}
	b, err := sequencer.DecodeText(text)
	if err != nil {
		return nil, sequencer.Sequencer{}, fail(op, "", badSequencer(err))
	}
	s, err := sequencer.Parse(b)
	if err != nil {
		return nil, sequencer.Sequencer{}, fail(op, "", badSequencer(err))
	}
	return b, s, nil
}

// badSequencer types a local decoding error the way the cell types the
// ones it finds ("bad sequencer: sequencer: malformed: ..."), so both read
// and classify (--json code bad_sequencer) alike.
func badSequencer(err error) error {
	return wire.Errorf(wire.CodeBadSequencer, "%v", err)
}
