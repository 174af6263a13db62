package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/chzyer/readline"
	"github.com/urfave/cli/v2"

	"lockcell/client"
	"lockcell/wire"
)

// shellCommand runs an interactive shell on one session (docs/spec.md#cli).
func shellCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "shell",
		Usage:     "interactive shell on one session: history, tab completion, cd and pwd",
		ArgsUsage: " ",
		Description: "Reads command lines and runs each like 'lockcell LINE' (the global options given to " +
			"shell apply to every line), all on one session. Relative names are relative to the current " +
			"directory, which starts at the cell root.\n\n" +
			"Built-ins: cd [DIR] (no DIR: the cell root; .. and absolute names work), pwd, help, " +
			"exit [N] / quit (or Ctrl-D). Words may be quoted with \"...\" or '...'; # starts a comment line. " +
			"An error is printed and the shell goes on. Ctrl-C cancels the running command; at the prompt " +
			"it clears the line. Tab completes verbs and node names (directories with a trailing /). " +
			"History is kept in ~/.lockcell_history (or $LOCKCELL_HISTORY).\n\n" +
			"When stdin is not a terminal the lines are read plainly, without prompt or history, so " +
			"scripts can pipe commands in; the shell then exits with the status of the last line.\n\n" +
			"Example:\n" +
			"   $ lockcell --cell local shell\n" +
			"   lockcell:local /ls/local> mkdir svc\n" +
			"   lockcell:local /ls/local> cd svc\n" +
			"   lockcell:local /ls/local/svc> put config 'mode=on'\n" +
			"   lockcell:local /ls/local/svc> cat config\n" +
			"   mode=on\n" +
			"   lockcell:local /ls/local/svc> exit\n\n" +
			"   printf 'mkdir svc\\nput svc/ready yes\\n' | lockcell shell",
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, 0); err != nil {
				return err
			}
			sh := newShell(e)
			defer sh.close()
			if code := sh.main(c.Context); code != exitOK {
				return &exitStatus{code: code}
			}
			return nil
		},
	}
}

// shell is one interactive session: every line runs through the same
// command table as the command line, on a client the lines share.
type shell struct {
	e       *env     // the shell's own run: global options, streams
	globals []string // the global options every line runs with
	in      io.Reader
	// cmdStdin is what the lines' commands read as stdin.
	cmdStdin io.Reader

	mu  sync.Mutex
	cl  *client.Client // the shared session; nil until first needed (or after lock ended it)
	cwd string         // full name of the current directory
}

func newShell(e *env) *shell {
	g := []string{"--cell", e.cell, "--replicas", strings.Join(e.replicas, ",")}
	if e.timeoutSet {
		// Only when given: a --timeout bounds lock's wait, which is
		// otherwise endless.
		g = append(g, "--timeout", e.timeout.String())
	}
	if e.json {
		g = append(g, "--json")
	}
	if e.verbose {
		g = append(g, "--verbose")
	}
	if e.certFiles[0] != "" {
		// Given as flags or in the environment: the lines dial alike.
		g = append(g, "--cert", e.certFiles[0], "--key", e.certFiles[1], "--ca", e.certFiles[2])
	}
	if e.connectTo != "" {
		g = append(g, "--connect-to", e.connectTo)
	}
	return &shell{e: e, globals: g, in: e.stdin, cmdStdin: e.stdin, cwd: e.root()}
}

// close ends the shared session.
func (sh *shell) close() {
	sh.mu.Lock()
	cl := sh.cl
	sh.cl = nil
	sh.mu.Unlock()
	if cl != nil {
		if err := cl.Close(); err != nil && sh.e.verbose {
			fmt.Fprintf(sh.e.stderr, "lockcell: %v\n", err)
		}
	}
}

// client returns the shared session, dialing it when there is none.
func (sh *shell) client(ctx context.Context) (*client.Client, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.cl != nil {
		return sh.cl, nil
	}
	te := &env{stderr: sh.e.stderr, cell: sh.e.cell, replicas: sh.e.replicas, timeout: sh.e.timeout,
		verbose: sh.e.verbose, tls: sh.e.tls, dial: sh.e.dial, ctx: ctx}
	cl, err := te.client()
	if err != nil {
		return nil, err
	}
	sh.cl = cl
	return cl, nil
}

func (sh *shell) prompt() string { return "lockcell:" + sh.e.cell + " " + sh.cwd + "> " }

// main runs the shell until exit or end of input and returns its exit code.
func (sh *shell) main(ctx context.Context) int {
	if isTerminal(sh.in) {
		return sh.interactive(ctx)
	}
	// Scripts: the lines are stdin, so commands get none.
	sh.cmdStdin = strings.NewReader("")
	sc := bufio.NewScanner(sh.in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	last := exitOK
	for sc.Scan() {
		code, exit := sh.line(ctx, sc.Text())
		last = code
		if exit {
			return code
		}
	}
	if err := sc.Err(); err != nil {
		sh.e.printError(fmt.Errorf("shell: reading input: %w", err), "error")
		return exitError
	}
	return last
}

// interactive is the terminal loop: readline, history, completion, and
// Ctrl-C cancelling the running command.
func (sh *shell) interactive(ctx context.Context) int {
	cfg := &readline.Config{
		Prompt:            sh.prompt(),
		HistoryFile:       historyFile(),
		AutoComplete:      completer{sh},
		InterruptPrompt:   "^C",
		EOFPrompt:         "exit",
		HistorySearchFold: true,
		Stdout:            sh.e.stdout,
		Stderr:            sh.e.stderr,
	}
	if f, ok := sh.in.(*os.File); ok {
		cfg.Stdin = f
	}
	rl, err := readline.NewEx(cfg)
	if err != nil {
		sh.e.printError(fmt.Errorf("shell: %w", err), "error")
		return exitError
	}
	defer rl.Close()

	// The terminal is in raw mode at the prompt, so a Ctrl-C there reaches
	// readline as a key; while a command runs it is a SIGINT, which cancels
	// that command only.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt)
	defer signal.Stop(sigc)
	for {
		rl.SetPrompt(sh.prompt())
		text, err := rl.Readline()
		switch {
		case errors.Is(err, readline.ErrInterrupt):
			continue // Ctrl-C at the prompt: the line is dropped
		case errors.Is(err, io.EOF):
			return exitOK
		case err != nil:
			sh.e.printError(fmt.Errorf("shell: %w", err), "error")
			return exitError
		}
		for len(sigc) > 0 {
			<-sigc // a stray signal from the prompt must not cancel this line
		}
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			select {
			case <-sigc:
				cancel()
			case <-done:
			}
		}()
		code, exit := sh.line(lctx, text)
		close(done)
		cancel()
		if exit {
			return code
		}
	}
}

// historyFile is where readline keeps the history ("" for none).
func historyFile() string {
	if p, ok := os.LookupEnv("LOCKCELL_HISTORY"); ok {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".lockcell_history")
}

// line runs one input line: a built-in or a verb. It returns the line's
// exit code and whether the shell should end.
func (sh *shell) line(ctx context.Context, text string) (code int, exit bool) {
	text = strings.TrimSpace(text)
	if text == "" || strings.HasPrefix(text, "#") {
		return exitOK, false
	}
	words, err := splitWords(text)
	if err != nil {
		sh.e.printError(&usageError{msg: err.Error()}, "usage")
		return exitUsage, false
	}
	switch words[0] {
	case "exit", "quit":
		if len(words) > 2 {
			sh.e.printError(&usageError{msg: words[0] + ": want at most 1 argument"}, "usage")
			return exitUsage, false
		}
		if len(words) == 2 {
			n, err := strconv.Atoi(words[1])
			if err != nil || n < 0 || n > 255 {
				sh.e.printError(&usageError{msg: fmt.Sprintf("%s: bad status %q", words[0], words[1])}, "usage")
				return exitUsage, false
			}
			return n, true
		}
		return exitOK, true
	case "pwd":
		fmt.Fprintln(sh.e.stdout, sh.cwd)
		return exitOK, false
	case "cd":
		if len(words) > 2 {
			sh.e.printError(&usageError{msg: "cd: want at most 1 argument"}, "usage")
			return exitUsage, false
		}
		dir := ""
		if len(words) == 2 {
			dir = words[1]
		}
		if err := sh.cd(ctx, dir); err != nil {
			sh.e.printError(err, errorCode(err))
			return exitError, false
		}
		return exitOK, false
	case "help", "?":
		if len(words) == 1 {
			sh.help()
			return exitOK, false
		}
		// help VERB: the verb's own help.
		words = append(words[1:], "--help")
	case "shell":
		sh.e.printError(&usageError{msg: "shell: already in the shell"}, "usage")
		return exitUsage, false
	}
	return sh.run(ctx, words), false
}

// abs resolves a name typed in the shell against the current directory.
func (sh *shell) abs(name string) string {
	if strings.HasPrefix(name, "/") {
		return name
	}
	return path.Join(sh.cwd, name)
}

// cd changes the current directory to dir (the cell root when empty),
// which must exist and be a directory.
func (sh *shell) cd(ctx context.Context, dir string) error {
	target := sh.e.root()
	if dir != "" {
		target = path.Clean(sh.abs(dir))
	}
	if err := wire.ValidateName(sh.e.cell, target); err != nil {
		return &opError{op: "cd", path: dir, err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, sh.e.timeout)
	defer cancel()
	cl, err := sh.client(ctx)
	if err != nil {
		return fail("cd", dir, err)
	}
	h, err := cl.Open(ctx, target, client.Read)
	if err != nil {
		return fail("cd", target, err)
	}
	defer h.Close()
	st, err := h.GetStat(ctx)
	if err != nil {
		return fail("cd", target, err)
	}
	if !st.Dir {
		return &opError{op: "cd", path: target, err: errors.New("not a directory")}
	}
	sh.cwd = target
	return nil
}

// help lists the built-ins and the verbs, one line each.
func (sh *shell) help() {
	tw := tabwriter.NewWriter(sh.e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Built-ins:")
	fmt.Fprintln(tw, "  cd [DIR]\tchange the current directory (default: the cell root)")
	fmt.Fprintln(tw, "  pwd\tprint the current directory")
	fmt.Fprintln(tw, "  help [VERB]\tthis list, or a verb's help")
	fmt.Fprintln(tw, "  exit [N], quit\tleave the shell (so does Ctrl-D)")
	fmt.Fprintln(tw, "Verbs (names are relative to the current directory):")
	for _, cmd := range newApp(&env{}).Commands {
		if cmd.Hidden || cmd.Name == "shell" {
			continue
		}
		usage := cmd.Name
		if a := strings.TrimSpace(cmd.ArgsUsage); a != "" {
			usage += " " + a
		}
		fmt.Fprintf(tw, "  %s\t%s\n", usage, cmd.Usage)
	}
	tw.Flush()
}

// run runs one verb line the way run runs a command line, but on the
// shell's session and with names relative to the current directory.
func (sh *shell) run(ctx context.Context, words []string) int {
	cliMu.Lock()
	unlock := sync.OnceFunc(cliMu.Unlock)
	defer unlock()
	e := &env{stdin: sh.cmdStdin, stdout: sh.e.stdout, stderr: sh.e.stderr}
	sh.mu.Lock()
	e.cl = sh.cl
	sh.mu.Unlock()
	defer func() {
		// The verb may have dialed the session, or ended it (lock does):
		// the next line uses, or dials, whatever is left.
		sh.mu.Lock()
		sh.cl = e.cl
		sh.mu.Unlock()
		e.cl = nil
		e.close()
	}()
	app := newApp(e)
	before := app.Before
	app.Before = func(c *cli.Context) error {
		if err := before(c); err != nil {
			return err
		}
		if e.cell != sh.e.cell || strings.Join(e.replicas, ",") != strings.Join(sh.e.replicas, ",") {
			return usageErrorf(c, "--cell and --replicas cannot change inside the shell")
		}
		return nil
	}
	startActions(app.Commands, unlock)
	app.Action = startAction(app.Action, unlock)
	args := append(append([]string{"lockcell"}, sh.globals...), sh.resolveNames(app, arrangeArgs(app, words))...)
	err := app.RunContext(ctx, args)
	return exitCodeOf(e, args, err, true)
}

// nameArgs says which positional arguments of a verb are node names: -1
// all of them, 1 the first only. Verbs not listed take no names.
var nameArgs = map[string]int{
	"ls": -1, "cat": -1, "stat": -1, "watch": -1, "touch": -1, "mkdir": -1, "rm": -1, "who": 1,
	"put": 1, "lock": 1, "get": 1, "set": 1, // acl get|set NAME
}

// resolveNames makes the relative node names of a verb line absolute
// against the current directory (the env resolves relative names against
// the cell root), and gives ls the current directory by default.
func (sh *shell) resolveNames(app *cli.App, words []string) []string {
	out := append([]string(nil), words...)
	i := skipFlags(app.Flags, out, 0)
	if i >= len(out) {
		return out
	}
	cmd := app.Command(out[i])
	if cmd == nil {
		return out
	}
	// acl get|set NAME: the name follows the sub-verb.
	if len(cmd.Subcommands) > 0 && i+1 < len(out) {
		if sub := cmd.Command(out[i+1]); sub != nil {
			cmd, i = sub, i+1
		}
	}
	n, ok := nameArgs[cmd.Name]
	if !ok {
		return out
	}
	j := skipFlags(cmd.Flags, out, i+1)
	if j < len(out) && out[j] == "--" && cmd.Name != "lock" {
		j++
	}
	if j >= len(out) && cmd.Name == "ls" && sh.cwd != sh.e.root() {
		return append(out, sh.cwd)
	}
	for k := 0; j < len(out) && (n < 0 || k < n); j, k = j+1, k+1 {
		if out[j] == "--" {
			break
		}
		out[j] = sh.abs(out[j])
	}
	return out
}

// skipFlags returns the index of the first word at or after i that is not
// one of flags (or a flag's value).
func skipFlags(flags []cli.Flag, words []string, i int) int {
	for i < len(words) {
		w := words[i]
		if w == "-" || w == "--" || !strings.HasPrefix(w, "-") {
			return i
		}
		i++
		name := strings.TrimLeft(w, "-")
		if strings.Contains(name, "=") {
			continue
		}
		for _, f := range flags {
			for _, fn := range f.Names() {
				if fn != name {
					continue
				}
				if _, isBool := f.(*cli.BoolFlag); !isBool {
					i++ // its value
				}
			}
		}
	}
	return i
}

// splitWords splits a line into words: blanks separate words, "..." and
// '...' quote (a backslash escapes the next character outside '...').
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	esc := false
	for _, r := range s {
		switch {
		case esc:
			cur.WriteRune(r)
			esc = false
		case quote != 0:
			switch {
			case r == quote:
				quote = 0
			case r == '\\' && quote == '"':
				esc = true
			default:
				cur.WriteRune(r)
			}
		case r == '\\':
			esc, inWord = true, true
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if esc {
		return nil, errors.New("line ends with a backslash")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// builtins are completed like verbs.
var builtins = []string{"cd", "pwd", "help", "exit", "quit"}

// complete returns the word being completed at pos (a rune offset in line)
// and its candidates, whole: verbs and built-ins for the first word, node
// names (relative to the current directory, directories ending in /) for
// the others.
func (sh *shell) complete(line string, pos int) (word string, cands []string) {
	rs := []rune(line)
	pos = max(0, min(pos, len(rs)))
	before := string(rs[:pos])
	word = before[strings.LastIndexAny(before, " \t")+1:]
	if strings.TrimSpace(before[:len(before)-len(word)]) == "" {
		for _, v := range sh.verbs() {
			if strings.HasPrefix(v, word) {
				cands = append(cands, v)
			}
		}
		return word, cands
	}
	dirPart, base := "", word
	if k := strings.LastIndex(word, "/"); k >= 0 {
		dirPart, base = word[:k+1], word[k+1:]
	}
	dir := sh.cwd
	if dirPart != "" {
		dir = path.Clean(sh.abs(dirPart))
	}
	if wire.ValidateName(sh.e.cell, dir) != nil {
		if strings.HasPrefix(sh.e.root(), word) {
			// Typing an absolute name: offer the cell root.
			return word, []string{sh.e.root() + "/"}
		}
		return word, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(sh.e.timeout, 3*time.Second))
	defer cancel()
	cl, err := sh.client(ctx)
	if err != nil {
		return word, nil
	}
	h, err := cl.Open(ctx, dir, client.Read)
	if err != nil {
		return word, nil
	}
	defer h.Close()
	// Names come sorted: start the listing just before the first name
	// with the prefix and stop past the last, so completing in a huge
	// directory reads only the pages that matter.
	after := beforePrefix(base)
	for len(cands) < maxCompletions {
		dents, more, err := h.ReadDirPage(ctx, after, 0)
		if err != nil {
			return word, nil
		}
		for _, d := range dents {
			if !strings.HasPrefix(d.Name, base) {
				if d.Name > base {
					more = false
					break
				}
				continue
			}
			c := dirPart + d.Name
			if d.Dir {
				c += "/"
			}
			cands = append(cands, c)
		}
		if !more || len(dents) == 0 {
			break
		}
		after = dents[len(dents)-1].Name
	}
	sort.Strings(cands)
	return word, cands
}

// maxCompletions bounds the names one completion offers: past a few
// hundred a list helps nobody, and a prefix of one letter in a directory
// of a million names must not read them all.
const maxCompletions = 1000

// beforePrefix returns a listing cursor that sorts before every name with
// prefix p and after every name without it that sorts below p: p with its
// last byte lowered, followed by a byte above every byte a name may hold.
func beforePrefix(p string) string {
	if p == "" {
		return ""
	}
	return p[:len(p)-1] + string([]byte{p[len(p)-1] - 1, 0x7f})
}

// verbs are the words the first word completes to.
func (sh *shell) verbs() []string {
	vs := append([]string(nil), builtins...)
	for _, cmd := range newApp(&env{}).Commands {
		if !cmd.Hidden && cmd.Name != "shell" {
			vs = append(vs, cmd.Name)
		}
	}
	sort.Strings(vs)
	return vs
}

// completer adapts complete to readline, which wants the suffixes to add.
type completer struct{ sh *shell }

func (c completer) Do(line []rune, pos int) ([][]rune, int) {
	word, cands := c.sh.complete(string(line), pos)
	out := make([][]rune, 0, len(cands))
	for _, cand := range cands {
		s := strings.TrimPrefix(cand, word)
		if !strings.HasSuffix(cand, "/") {
			s += " "
		}
		out = append(out, []rune(s))
	}
	return out, len([]rune(word))
}
