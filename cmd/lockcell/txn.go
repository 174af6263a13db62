package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/sequencer"
	"lockcell/wire"
)

// txnCommand applies a transaction read from a file or stdin.
func txnCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "txn",
		Usage:     "apply checks and operations on several names all at once, or none of them (FILE or - : stdin)",
		ArgsUsage: "[FILE]",
		Description: "Reads one check or operation a line (blank lines and lines starting with # are skipped):\n\n" +
			"  check-exists NAME          NAME exists\n" +
			"  check-missing NAME         NAME does not exist\n" +
			"  check-gen NAME N           NAME's content generation is N\n" +
			"  check-held NAME [MODE]     this session holds NAME's lock (exclusive|shared; any without)\n" +
			"  check-sequencer SEQUENCER  the sequencer is still valid\n" +
			"  create NAME [VALUE]        make the file NAME\n" +
			"  mkdir NAME                 make the directory NAME\n" +
			"  set NAME VALUE             replace the file NAME's contents\n" +
			"  delete NAME                delete the file or empty directory NAME\n\n" +
			"VALUE is the rest of the line, or @FILE for a file's contents. If every check holds, every " +
			"operation applies, in order, in one step of the cell; otherwise nothing changes and txn fails " +
			"naming the check or operation (its number from 0, among the checks or the operations) and why. " +
			"Each name may be the subject of one operation. A transaction holds at most 64 checks, 64 " +
			"operations and 256 KiB of contents. Prints the transaction's generation: the new content " +
			"generation of every file it created or wrote (--json: with each operation's)." +
			"\n\nExample: printf 'check-gen cfg/a 41\\nset cfg/a on\\nset cfg/b on\\n' | lockcell txn",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 1); err != nil {
				return err
			}
			var in io.Reader = e.stdin
			if f := c.Args().First(); f != "" && f != "-" {
				file, err := os.Open(f)
				if err != nil {
					return fail("txn", "", err)
				}
				defer file.Close()
				in = file
			}
			cmps, ops, names, err := e.parseTxn(in)
			if err != nil {
				return err
			}
			cl, err := e.client()
			if err != nil {
				return fail("txn", "", err)
			}
			res, err := cl.Txn(e.ctx).If(cmps...).Then(ops...).Commit()
			if err != nil {
				return txnFail(err)
			}
			if e.json {
				out := txnJSON{Generation: res.Generation, Operations: []txnOpJSON{}}
				for i, n := range names {
					out.Operations = append(out.Operations, txnOpJSON{Op: n[0], Name: n[1], Generation: res.Generations[i]})
				}
				return e.printJSON(out)
			}
			_, err = fmt.Fprintf(e.stdout, "committed at generation %d (%d checks, %d operations)\n", res.Generation, len(cmps), len(ops))
			return err
		},
	}
}

type txnJSON struct {
	Generation uint64      `json:"generation"`
	Operations []txnOpJSON `json:"operations"`
}

type txnOpJSON struct {
	Op         string `json:"op"`
	Name       string `json:"name"`
	Generation uint64 `json:"generation"`
}

// txnFail words a failed transaction: the check or operation, its name and
// the cell's reason; its code is the reason's (generation_mismatch, ...).
func txnFail(err error) error {
	var te *client.TxnError
	if !errors.As(err, &te) {
		return fail("txn", "", err)
	}
	what := fmt.Sprintf("check %d", te.Check)
	if te.Check < 0 {
		what = fmt.Sprintf("operation %d", te.Op)
	}
	return &opError{op: "txn " + what, path: te.Path, err: te.Err}
}

// maxTxnScript bounds what txn reads: the contents limit plus room for
// the names of the most checks and operations.
const maxTxnScript = wire.MaxTxnContents + (wire.MaxTxnChecks+wire.MaxTxnOps)*(wire.MaxNameLen+64)

// parseTxn reads a transaction script. names has each operation's verb
// and full name, for the output.
func (e *env) parseTxn(r io.Reader) ([]client.Cmp, []client.Op, [][2]string, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxTxnScript+1))
	if err != nil {
		return nil, nil, nil, fail("txn", "", fmt.Errorf("read: %w", err))
	}
	if len(data) > maxTxnScript {
		return nil, nil, nil, fail("txn", "", wire.Errorf(wire.CodeTooLarge, "the script is longer than %d bytes", maxTxnScript))
	}
	var cmps []client.Cmp
	var ops []client.Op
	var names [][2]string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, len(data)+1)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return fail("txn", "", wire.Errorf(wire.CodeBadRequest, "line %d: %s", line, fmt.Sprintf(format, args...)))
		}
		verb, rest, _ := strings.Cut(text, " ")
		rest = strings.TrimLeft(rest, " \t")
		arg, value, _ := strings.Cut(rest, " ")
		value = strings.TrimLeft(value, " \t")
		if arg == "" {
			return nil, nil, nil, bad("%s needs an argument", verb)
		}
		if verb == "check-sequencer" {
			b, err := sequencer.DecodeText(arg)
			if err == nil {
				_, err = sequencer.Parse(b)
			}
			if err != nil {
				return nil, nil, nil, fail("txn", "", badSequencer(fmt.Errorf("line %d: %w", line, err)))
			}
			cmps = append(cmps, client.SequencerValid(b))
			continue
		}
		name, err := e.name("txn", arg)
		if err != nil {
			return nil, nil, nil, err
		}
		noValue := func() error {
			if value != "" {
				return bad("%s takes no value", verb)
			}
			return nil
		}
		switch verb {
		case "check-exists", "check-missing", "mkdir", "delete":
			if err := noValue(); err != nil {
				return nil, nil, nil, err
			}
		}
		switch verb {
		case "check-exists":
			cmps = append(cmps, client.Exists(name))
		case "check-missing":
			cmps = append(cmps, client.Missing(name))
		case "check-gen":
			g, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				return nil, nil, nil, bad("check-gen needs a generation: %q", value)
			}
			cmps = append(cmps, client.GenerationIs(name, g))
		case "check-held":
			var mode client.LockMode
			switch value {
			case "":
			case "exclusive":
				mode = client.Exclusive
			case "shared":
				mode = client.Shared
			default:
				return nil, nil, nil, bad("check-held: mode %q is neither exclusive nor shared", value)
			}
			cmps = append(cmps, client.Holds(name, mode))
		case "create", "set":
			contents, err := txnValue(value)
			if err != nil {
				return nil, nil, nil, bad("%s %s: %v", verb, arg, err)
			}
			if verb == "create" {
				ops = append(ops, client.OpCreate(name, contents))
			} else {
				if value == "" {
					return nil, nil, nil, bad("set needs a value (@FILE for a file's contents)")
				}
				ops = append(ops, client.OpSet(name, contents))
			}
			names = append(names, [2]string{verb, name})
		case "mkdir":
			ops = append(ops, client.OpMkdir(name))
			names = append(names, [2]string{verb, name})
		case "delete":
			ops = append(ops, client.OpDelete(name))
			names = append(names, [2]string{verb, name})
		default:
			return nil, nil, nil, bad("unknown verb %q", verb)
		}
	}
	if len(cmps)+len(ops) == 0 {
		return nil, nil, nil, fail("txn", "", wire.Errorf(wire.CodeBadRequest, "no checks or operations given"))
	}
	return cmps, ops, names, nil
}

// txnValue is a create's or set's VALUE: the text, or @FILE's contents.
func txnValue(v string) ([]byte, error) {
	if f, ok := strings.CutPrefix(v, "@"); ok {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if len(data) > wire.MaxContents {
			return nil, wire.Errorf(wire.CodeTooLarge, "%s holds more than the %d-byte limit", f, wire.MaxContents)
		}
		return data, nil
	}
	return []byte(v), nil
}
