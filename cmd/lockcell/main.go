// Command lockcell is the operator CLI of a lockcell cell: shell-like verbs
// (put, cat, stat, ls, mkdir, touch, rm) on the cell's namespace, watch
// (print a node's events), lock (hold a lock while a command runs), seq
// (inspect and check sequencers), status (every replica's view of the
// cell), health (a verdict for probes) and replica (list, add and remove
// the cell's members), and the recipe verbs counter, queue, members and
// barrier over client/recipe (docs/spec.md#cli).
//
// Exit codes: 0 ok, 1 error (the cell or the client refused or failed; the
// message names the operation and the path), 2 usage error; lock exits with
// its command's status; health exits 3 (degraded) or 4 (unavailable). With --json every verb prints one JSON document on
// stdout (lock prints nothing: stdout is its command's; watch prints one
// JSON object per line), and errors are printed as {"error": "...",
// "code": "..."} on stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"lockcell/buildinfo"
	"lockcell/client"
)

// Defaults of the global flags: the library's (client.ConfigFromEnv), which
// match what `lockcelld dev` starts.
const (
	defaultCell     = client.DefaultCell
	defaultReplicas = client.DefaultReplicas
	defaultTimeout  = 30 * time.Second
)

// Exit codes (docs/spec.md#exit-codes).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() { os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr)) }

// run runs one command line and returns its exit code. It builds a fresh
// App each call and never calls os.Exit, so tests (and a future interactive
// shell) can call it repeatedly, even concurrently, with their own streams.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// urfave/cli writes package globals (its help flag and help command)
	// while it sets a command line up, so runs take turns until their
	// verb starts: a lock's command may run alongside other runs.
	cliMu.Lock()
	unlock := sync.OnceFunc(cliMu.Unlock)
	defer unlock()
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	defer e.close()
	app := newApp(e)
	startActions(app.Commands, unlock)
	app.Action = startAction(app.Action, unlock)
	argv := args
	if len(args) > 0 {
		argv = append([]string{args[0]}, arrangeArgs(app, args[1:])...)
	}
	err := app.RunContext(context.Background(), argv)
	return exitCodeOf(e, args, err, false)
}

// exitCodeOf reports err on e's stderr and returns the exit code: 0 ok,
// 1 error, 2 usage, or a lock command's own status. inShell drops the
// program name from the "Run ... for usage" hint.
func exitCodeOf(e *env, args []string, err error, inShell bool) int {
	if err == nil {
		return exitOK
	}
	if !e.flagsParsed {
		// The global flags did not parse, so Before never ran: honour a
		// --json the operator asked for anyway, so scripts still get JSON.
		e.json = wantsJSON(args)
	}
	var ue *usageError
	var ec cli.ExitCoder
	var xs *exitStatus
	switch {
	case errors.As(err, &xs):
		if xs.err != nil {
			e.printError(xs.err, xs.kind)
		}
		return xs.code
	case errors.As(err, &ue):
		e.printError(err, "usage")
		if !e.json {
			hint := ue.helpCommand()
			if inShell {
				hint = strings.TrimPrefix(hint, "lockcell ")
			}
			fmt.Fprintf(e.stderr, "Run '%s' for usage.\n", hint)
		}
		return exitUsage
	case errors.As(err, &ec):
		// Only urfave/cli itself makes ExitCoders (e.g. "No help topic for
		// 'x'"): they are all mistakes on the command line.
		e.printError(err, "usage")
		return exitUsage
	default:
		e.printError(err, errorCode(err))
		return exitError
	}
}

// newApp builds the command tree bound to e.
func newApp(e *env) *cli.App {
	app := &cli.App{
		Name:      "lockcell",
		Usage:     "operate a lockcell cell",
		Version:   buildinfo.Version(),
		UsageText: "lockcell [global options] command [command options] [arguments...]",
		Description: "Names are relative to the cell root (cfg/flag means /ls/<cell>/cfg/flag) " +
			"unless they start with /. Options, global or the command's, may come anywhere before " +
			"\"--\" (lockcell ls /ls/local --json works); \"--\" ends them, so an argument that " +
			"looks like an option can follow it.\n\n" +
			"Exit codes: 0 ok, 1 error, 2 usage error; lock exits with its command's status, " +
			"75 when --timeout ends its wait for the lock, or 69 when it stopped its command because the lock may be lost; " +
			"health exits 3 when the cell is degraded and 4 when it is unavailable.\n\n" +
			"Examples:\n" +
			"   lockcell put svc/config 'mode=on'\n" +
			"   lockcell touch svc/ready\n" +
			"   lockcell ls -l svc\n" +
			"   lockcell watch svc/config\n" +
			"   lockcell lock svc/leader -- ./serve\n" +
			"   lockcell rm -r --yes svc/old\n" +
			"   lockcell status",
		Reader:    e.stdin,
		Writer:    e.stdout,
		ErrWriter: e.stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "cell", Value: defaultCell, EnvVars: []string{client.EnvCell},
				Usage: "cell name; names are relative to /ls/<cell>"},
			&cli.StringFlag{Name: "replicas", Value: defaultReplicas, EnvVars: []string{client.EnvReplicas},
				Usage: "comma-separated client addresses of the cell's replicas"},
			&cli.StringFlag{Name: "cells", EnvVars: []string{client.EnvCells},
				Usage: "a cells file (a line per cell: its name, then its replicas' client addresses): a name /ls/<other>/... reaches that cell, and --cell alone, without --replicas, finds its replicas there"},
			&cli.StringFlag{Name: "cells-domain", EnvVars: []string{client.EnvCellsDomain},
				Usage: "a DNS domain whose SRV records _lockcell._tcp.<cell>.<domain> name cells' replicas (after --cells)"},
			&cli.DurationFlag{Name: "timeout", Value: defaultTimeout,
				Usage: "overall deadline for the command, including finding the master (for lock: bounds the wait for the lock, only when given; without it lock waits as long as it takes)"},
			&cli.BoolFlag{Name: "json", Usage: "machine output: one JSON document per command; errors as JSON on stderr"},
			&cli.BoolFlag{Name: "verbose", Usage: "show the client library's logs on stderr"},
			&cli.StringFlag{Name: "cert", EnvVars: []string{client.EnvCert},
				Usage: "your certificate (PEM) for a cell with mutual TLS; its name is your principal"},
			&cli.StringFlag{Name: "key", EnvVars: []string{client.EnvKey}, Usage: "your certificate's private key (PEM)"},
			&cli.StringFlag{Name: "ca", EnvVars: []string{client.EnvCA}, Usage: "the cell's CA certificate (PEM)"},
			&cli.StringFlag{Name: "connect-to", EnvVars: []string{client.EnvConnectTo},
				Usage: "dial replicas elsewhere than the cell names them, as curl's --connect-to: HOST:PORT:TOHOST:TOPORT[,...], an empty part matching any (or keeping the original); e.g. ::127.0.0.1: reaches a compose cell's replicas by their ports published on the host"},
		},
		Commands: []*cli.Command{
			putCommand(e), catCommand(e), statCommand(e), lsCommand(e), mkdirCommand(e), touchCommand(e), rmCommand(e), sessionsCommand(e), shellCommand(e),
			watchCommand(e), lockCommand(e), seqCommand(e), statusCommand(e), healthCommand(e), aclCommand(e), backupCommand(e), replicaCommand(e),
			whoCommand(e), selfcheckCommand(e), breakCommand(e), locksCommand(e),
			requestReleaseCommand(e), benchCommand(e), auditCommand(e), quotaCommand(e), txnCommand(e),
			counterCommand(e), queueCommand(e), membersCommand(e), barrierCommand(e),
		},
		Before: e.setup,
		// Without a verb, or with an unknown one, urfave/cli would fall back
		// to its help action and exit 0 or 3; both are usage errors here.
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageErrorf(c, "unknown command %q", c.Args().First())
			}
			return usageErrorf(c, "no command given")
		},
		OnUsageError: onUsageError,
		// The default handler calls os.Exit for ExitCoder errors; run
		// decides the exit code itself.
		ExitErrHandler: func(*cli.Context, error) {},
	}
	setOnUsageError(app.Commands)
	return app
}

// cliMu serializes run's use of urfave/cli up to the start of the verb.
var cliMu sync.Mutex

// startActions makes the actions of cmds (and their subcommands) call
// started first.
func startActions(cmds []*cli.Command, started func()) {
	for _, cmd := range cmds {
		cmd.Action = startAction(cmd.Action, started)
		startActions(cmd.Subcommands, started)
	}
}

func startAction(a cli.ActionFunc, started func()) cli.ActionFunc {
	if a == nil {
		return nil
	}
	return func(c *cli.Context) error {
		started()
		return a(c)
	}
}

func setOnUsageError(cmds []*cli.Command) {
	for _, cmd := range cmds {
		cmd.OnUsageError = onUsageError
		setOnUsageError(cmd.Subcommands)
	}
}

// exitStatus ends run with a given exit code: lock passes on its command's
// status this way. err, when set, is reported (as kind under --json) like
// any other error; without it run prints nothing.
type exitStatus struct {
	code int
	kind string
	err  error
}

func (x *exitStatus) Error() string {
	if x.err == nil {
		return fmt.Sprintf("exit status %d", x.code)
	}
	return x.err.Error()
}

func (x *exitStatus) Unwrap() error { return x.err }

// usageError is a mistake on the command line: exit code 2.
type usageError struct {
	cmd string // the command's full name, e.g. "lockcell put"
	msg string
}

func (u *usageError) Error() string {
	if u.cmd == "" {
		return u.msg
	}
	return strings.TrimPrefix(u.cmd, "lockcell ") + ": " + u.msg
}

func (u *usageError) helpCommand() string {
	if u.cmd == "" {
		return "lockcell --help"
	}
	return u.cmd + " --help"
}

// usageErrorf builds a usage error for the command c runs.
func usageErrorf(c *cli.Context, format string, args ...any) error {
	u := &usageError{msg: fmt.Sprintf(format, args...)}
	// The root command is named after the app; its errors need no prefix.
	if c != nil && c.Command != nil && c.Command.Name != "" && c.Command.HelpName != c.App.Name {
		u.cmd = c.Command.HelpName
	}
	return u
}

// onUsageError turns flag parsing errors into usage errors (instead of
// urfave/cli's "Incorrect Usage" plus the whole help on stdout).
func onUsageError(c *cli.Context, err error, isSubcommand bool) error {
	return usageErrorf(c, "%v", err)
}

// wantArgs checks the number of positional arguments of a verb.
func wantArgs(c *cli.Context, min, max int) error {
	n := c.NArg()
	if n >= min && (max < 0 || n <= max) {
		return nil
	}
	var want string
	switch {
	case min == max:
		want = fmt.Sprintf("exactly %d", min)
	case max < 0:
		want = fmt.Sprintf("at least %d", min)
	default:
		want = fmt.Sprintf("%d to %d", min, max)
	}
	hint := ""
	if n > max && max >= 0 {
		// arrangeArgs leaves words that name no option among the
		// arguments: a mistyped option arrives here as an extra argument.
		for _, a := range c.Args().Slice()[max:] {
			if isOptionWord(a) {
				hint = fmt.Sprintf(" (%s is not an option of %s)", a, c.Command.HelpName)
				break
			}
		}
	}
	return usageErrorf(c, "want %s argument(s) (%s), got %d%s", want, c.Command.ArgsUsage, n, hint)
}

// wantsJSON reports whether args ask for --json. It is only a fallback for
// when the global options failed to parse.
func wantsJSON(args []string) bool {
	for _, a := range args[min(1, len(args)):] {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}
