package deploy_test

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockcell/cell"
)

// helpFlags returns the flag names (without dashes) a binary's help lists
// for the command path args (e.g. "serve"), global flags included.
func helpFlags(t *testing.T, bin string, args ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, a := range [][]string{{"--help"}, append(append([]string{}, args...), "--help")} {
		b, err := exec.Command(bin, a...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", filepath.Base(bin), a, err, b)
		}
		addHelpFlags(out, string(b))
	}
	return out
}

// addHelpFlags adds the flags of urfave/cli help text: a flag line is
// indented and starts with a dash; its names (", "-separated, each maybe
// followed by a placeholder) end at the first run of two spaces.
func addHelpFlags(into map[string]bool, help string) {
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		rest := strings.TrimLeft(line, " \t")
		if len(rest) == len(line) || !strings.HasPrefix(rest, "-") {
			continue
		}
		names, _, _ := strings.Cut(rest, "  ")
		for _, part := range strings.Split(names, ", ") {
			word, _, _ := strings.Cut(strings.TrimSpace(part), " ")
			if n := strings.TrimLeft(word, "-"); n != "" && strings.HasPrefix(word, "-") {
				into[n] = true
			}
		}
	}
}

// commandLine is one lockcelld or lockcell invocation found in a deploy
// file or document.
type commandLine struct {
	where string   // file (and line)
	bin   string   // "lockcelld" or "lockcell"
	args  []string // after the binary
}

// helpCommands returns the commands (and aliases) a help text lists
// under COMMANDS.
func helpCommands(help string) map[string]bool {
	out := map[string]bool{}
	in := false
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(line, "COMMANDS:"):
			in = true
		case in && strings.TrimSpace(line) == "":
		case in && strings.HasPrefix(line, " "):
			names, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
			for _, n := range strings.Split(names, ", ") {
				out[strings.TrimSpace(n)] = true
			}
		default:
			in = false
		}
	}
	return out
}

// checkCommandLines fails for every flag a command line uses that the
// binary's help does not list for its command (or its parents, or the
// global flags), and for a first word that is no command.
func checkCommandLines(t *testing.T, daemon, cli string, lines []commandLine) []string {
	t.Helper()
	helps := map[string]string{}
	help := func(bin string, path []string) string {
		key := bin + " " + strings.Join(path, " ")
		if h, ok := helps[key]; ok {
			return h
		}
		out, err := exec.Command(bin, append(append([]string{}, path...), "--help")...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v --help: %v\n%s", bin, path, err, out)
		}
		helps[key] = string(out)
		return helps[key]
	}
	var problems []string
	for _, l := range lines {
		bin := daemon
		if l.bin == "lockcell" {
			bin = cli
		}
		var path, flags []string
		known := map[string]bool{}
		addHelpFlags(known, help(bin, nil))
		cmds := helpCommands(help(bin, nil))
		for i, a := range l.args {
			if a == "--" {
				break
			}
			if strings.HasPrefix(a, "-") && len(a) > 1 {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				flags = append(flags, name)
				continue
			}
			if cmds[a] {
				path = append(path, a)
				h := help(bin, path)
				addHelpFlags(known, h)
				cmds = helpCommands(h)
				continue
			}
			if i == 0 {
				problems = append(problems, fmt.Sprintf("%s: %s has no command %q", l.where, l.bin, a))
			}
		}
		for _, f := range flags {
			if !known[f] {
				problems = append(problems, fmt.Sprintf("%s: %s %s has no flag --%s", l.where, l.bin, strings.Join(path, " "), f))
			}
		}
	}
	return problems
}

// checkConfigKeys fails for every key of a --config file that is no flag
// of lockcelld serve.
func checkConfigKeys(where string, s []cell.Setting, serveFlags map[string]bool) []string {
	var problems []string
	for _, kv := range s {
		if !serveFlags[kv.Key] || kv.Key == "config" || kv.Key == "help" {
			problems = append(problems, fmt.Sprintf("%s line %d: %q is no flag of lockcelld serve", where, kv.Line, kv.Key))
		}
	}
	return problems
}

// commandSplit separates the commands of a shell line; envAssign is a
// leading VAR=value word.
var (
	commandSplit = regexp.MustCompile(`\|\||&&|[|;(]|\$\(|#\s`)
	envAssign    = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)
)

// shellWords splits a command line as a shell would, roughly: quotes
// group, a backslash-newline continues.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	in := rune(0)
	have := false
	for _, r := range s {
		switch {
		case in != 0 && r == in:
			in = 0
		case in != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			in, have = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		case r == '\\':
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// docCommandLines finds lockcelld/lockcell invocations in a Markdown
// file's code blocks and inline code, and in a unit or Dockerfile's lines.
func docCommandLines(t *testing.T, path string) []commandLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []commandLine
	var texts []struct {
		line int
		s    string
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) { // continued lines
			i++
			l = strings.TrimSuffix(l, "\\") + " " + lines[i]
		}
		if strings.HasSuffix(path, ".md") {
			// Inline code spans and code lines alike.
			for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(l, -1) {
				texts = append(texts, struct {
					line int
					s    string
				}{i + 1, m[1]})
			}
		}
		texts = append(texts, struct {
			line int
			s    string
		}{i + 1, l})
	}
	for _, tx := range texts {
		for _, cmd := range commandSplit.Split(tx.s, -1) {
			words := shellWords(cmd)
			// Skip environment assignments, sudo and the like.
			for len(words) > 0 && (envAssign.MatchString(words[0]) || words[0] == "sudo" || words[0] == "exec" || words[0] == "$") {
				words = words[1:]
			}
			if len(words) == 0 {
				continue
			}
			first := words[0]
			if k, v, ok := strings.Cut(first, "="); ok && strings.HasPrefix(v, "/") && !strings.Contains(k, "/") {
				first = v // ExecStart=/usr/local/bin/lockcelld
			}
			bin := filepath.Base(first)
			if bin != "lockcelld" && bin != "lockcell" {
				continue
			}
			// Prose ("lockcell status shows ...") is skipped unless it
			// passes flags; a flag is what a typo would break.
			if !slices.ContainsFunc(words[1:], func(w string) bool { return strings.HasPrefix(w, "--") }) {
				continue
			}
			out = append(out, commandLine{where: fmt.Sprintf("%s:%d", path, tx.line), bin: bin, args: words[1:]})
		}
	}
	return out
}

// TestFlagsInDeployFilesExist checks every lockcelld and lockcell flag and
// every --config key used by the deploy files and the operator's guide
// against the built binaries' own help: a typo fails here, not at 3 am.
func TestFlagsInDeployFilesExist(t *testing.T) {
	daemon, cli := binaries(t)
	serveFlags := helpFlags(t, daemon, "serve")
	for _, f := range []string{"listen", "raft", "peers", "metrics", "config", "cert"} {
		if !serveFlags[f] {
			t.Fatalf("the help parser missed serve's --%s: %v", f, serveFlags)
		}
	}
	var problems []string
	// Every --config file: compose's, the systemd example, the ConfigMap's.
	configs := []string{"systemd/lockcelld.yaml"}
	cf, _ := filepath.Glob("compose/*.yaml")
	configs = append(configs, cf...)
	for _, c := range configs {
		s, err := cell.ReadSettings(c)
		if err != nil {
			t.Fatal(err)
		}
		problems = append(problems, checkConfigKeys(c, s, serveFlags)...)
	}
	cm := k8sObjects(t)["ConfigMap/lockcell-config"]
	for name, v := range cm["data"].(map[string]any) {
		f := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(f, []byte(v.(string)), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := cell.ReadSettings(f)
		if err != nil {
			t.Fatal(err)
		}
		problems = append(problems, checkConfigKeys("kubernetes/configmap.yaml "+name, s, serveFlags)...)
	}
	// Command lines: compose commands and health checks, the StatefulSet's
	// args, the unit's ExecStart, the Dockerfile's CMD, the docs.
	var lines []commandLine
	top, reps := composeReplicas(t)
	for name, v := range top["services"].(map[string]any) {
		svc := v.(map[string]any)
		if cmd := strs(svc, "command"); len(cmd) > 0 {
			bin := "lockcelld"
			if ep := strs(svc, "entrypoint"); len(ep) > 0 && filepath.Base(ep[0]) == "lockcell" {
				bin = "lockcell"
			}
			lines = append(lines, commandLine{where: "compose.yaml " + name, bin: bin, args: cmd})
		}
		if hc := strs(svc, "healthcheck", "test"); len(hc) > 2 {
			lines = append(lines, commandLine{where: "compose.yaml " + name + " healthcheck", bin: filepath.Base(hc[1]), args: hc[2:]})
		}
	}
	if len(reps) == 0 {
		t.Fatal("no compose replicas")
	}
	sts := k8sObjects(t)["StatefulSet/lockcell"]
	lines = append(lines, commandLine{where: "kubernetes/statefulset.yaml", bin: "lockcelld",
		args: strs(sts, "spec", "template", "spec", "containers", 0, "args")})
	for _, f := range []string{"systemd/lockcelld.service", "../Dockerfile", "../docs/operations.md", "kubernetes/README.md"} {
		lines = append(lines, docCommandLines(t, f)...)
	}
	// The image's default command runs under its ENTRYPOINT, lockcelld.
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CMD (\[.*\])$`).FindSubmatch(df)
	var cmdArgs []string
	if m == nil || json.Unmarshal(m[1], &cmdArgs) != nil || !strings.Contains(string(df), `ENTRYPOINT ["/usr/local/bin/lockcelld"]`) {
		t.Fatalf("Dockerfile: no ENTRYPOINT lockcelld with a JSON CMD")
	}
	lines = append(lines, commandLine{where: "Dockerfile CMD", bin: "lockcelld", args: cmdArgs})
	if len(lines) < 20 {
		t.Fatalf("found only %d command lines to check: the scanner is broken", len(lines))
	}
	problems = append(problems, checkCommandLines(t, daemon, cli, lines)...)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("checked %d command lines and %d config files", len(lines), len(configs)+1)
}

// TestFlagCheckCatchesTypos proves the check above fails on a misspelt
// key or flag, as a deploy file with a typo must.
func TestFlagCheckCatchesTypos(t *testing.T) {
	daemon, cli := binaries(t)
	serveFlags := helpFlags(t, daemon, "serve")
	f := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(f, []byte("id: \"1\"\nlisten-addr: 127.0.0.1:7001\nmax-conns-per-ip: 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := cell.ReadSettings(f)
	if err != nil {
		t.Fatal(err)
	}
	if p := checkConfigKeys("typo.yaml", s, serveFlags); len(p) != 1 || !strings.Contains(p[0], "listen-addr") {
		t.Errorf("config typo: problems %q, want one naming listen-addr", p)
	}
	md := filepath.Join(t.TempDir(), "doc.md")
	text := "Run `lockcelld serve --config x.yaml --lisen 1` and\n\n```sh\nlockcell status --jsn\nlockcelld serve --id 1 \\\n  --raft-hearbeat 1s\nlockcell --replicas a:1 stat x\nlockcelld sevre --id 1\n```\n"
	if err := os.WriteFile(md, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := checkCommandLines(t, daemon, cli, docCommandLines(t, md))
	for _, want := range []string{"--lisen", "--jsn", "--raft-hearbeat", `command "sevre"`} {
		if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("typo %s not reported; problems: %q", want, p)
		}
	}
	if slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, "--replicas") || strings.Contains(s, "--config") }) {
		t.Errorf("a real flag reported: %q", p)
	}
}

// TestConfigFilesStartTheRealDaemon runs lockcelld serve on each deploy
// configuration (compose's, the StatefulSet's args with the ConfigMap,
// the systemd example): every key and value must parse, the required ones
// be there and listen/raft match the peers entry, so the daemon gets as
// far as loading its certificate, which is absent here.
func TestConfigFilesStartTheRealDaemon(t *testing.T) {
	daemon, _ := binaries(t)
	type run struct {
		name string
		args []string
		cert string
	}
	var runs []run
	_, reps := composeReplicas(t)
	for _, r := range reps {
		runs = append(runs, run{r.service, []string{"serve", "--config", r.hostConfig}, r.settings["cert"]})
	}
	s := settings(t, "systemd/lockcelld.yaml")
	runs = append(runs, run{"systemd", []string{"serve", "--config", "systemd/lockcelld.yaml"}, s["cert"]})
	objs := k8sObjects(t)
	conf := objs["ConfigMap/lockcell-config"]["data"].(map[string]any)["lockcelld.yaml"].(string)
	cf := filepath.Join(t.TempDir(), "lockcelld.yaml")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	args := strs(objs["StatefulSet/lockcell"], "spec", "template", "spec", "containers", 0, "args")
	for i := range 5 {
		var a []string
		for _, x := range args {
			x = strings.ReplaceAll(x, "$(POD_INDEX)", fmt.Sprint(i))
			if strings.HasPrefix(x, "--config=") {
				x = "--config=" + cf
			}
			a = append(a, x)
		}
		runs = append(runs, run{fmt.Sprintf("kubernetes pod %d", i), a, fmt.Sprintf("/etc/lockcell/tls/replica-%d.crt", i)})
	}
	for _, r := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, daemon, r.args...)
		cmd.Env = append(os.Environ(), "LOCKCELL_LOG_LEVEL=", "LOCKCELL_AUDIT_LOG=")
		out, err := cmd.CombinedOutput()
		cancel()
		if _, statErr := os.Stat(r.cert); statErr == nil {
			t.Fatalf("%s exists on this machine: the test expects it absent", r.cert)
		}
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.Contains(string(out), "load "+r.cert) {
			t.Errorf("%s: lockcelld %v: exit %d, want 2 for the missing certificate %s only; output:\n%s",
				r.name, r.args, code, r.cert, out)
		}
	}
}

// TestBinariesAreStatic builds the binaries as the Dockerfile does and
// checks they need no dynamic loader or libc, so they run on
// distroless/static or scratch; and that the Dockerfile builds them so.
func TestBinariesAreStatic(t *testing.T) {
	daemon, cli := binaries(t)
	for _, b := range []string{daemon, cli} {
		f, err := elf.Open(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s has a %v program header: it is dynamically linked", filepath.Base(b), p.Type)
			}
		}
		libs, _ := f.ImportedLibraries()
		if len(libs) > 0 {
			t.Errorf("%s needs %v", filepath.Base(b), libs)
		}
		f.Close()
	}
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := string(df)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-buildvcs=auto", "./cmd/lockcelld", "./cmd/lockcell",
		"FROM gcr.io/distroless/static-debian12:nonroot", "USER 65532", "VOLUME [\"/var/lib/lockcell\"]", "EXPOSE 7001 7101 7201"} {
		if !strings.Contains(d, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// The Dockerfile's data folder and ports are the deploy files'.
	for _, c := range []string{"systemd/lockcelld.yaml", "compose/replica-1.yaml"} {
		if got := settings(t, c)["data"]; got != "/var/lib/lockcell" {
			t.Errorf("%s: data %s, not the image's volume /var/lib/lockcell", c, got)
		}
	}
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit, with
// ExecStart pointed at the built lockcelld (verify checks that the binary
// exists); any warning fails.
func TestSystemdUnitVerifies(t *testing.T) {
	unit, err := os.ReadFile("systemd/lockcelld.service")
	if err != nil {
		t.Fatal(err)
	}
	u := string(unit)
	for _, want := range []string{"Type=simple", "User=lockcell", "ExecStart=/usr/local/bin/lockcelld serve --config /etc/lockcell/lockcelld.yaml",
		"ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure", "ProtectSystem=strict", "ReadWritePaths=/var/lib/lockcell",
		"NoNewPrivileges=yes", "PrivateTmp=yes", "LimitNOFILE=", "TimeoutStopSec="} {
		if !strings.Contains(u, want) {
			t.Errorf("lockcelld.service lacks %q", want)
		}
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)s?$`).FindStringSubmatch(u)
	if n, _ := strconv.Atoi(safeIndex(m, 1)); n < 10 {
		t.Errorf("TimeoutStopSec must leave room for the master's 5 s hand-over and the store's close: %v", m)
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the unit is not verified")
	}
	daemon, _ := binaries(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "lockcelld.service")
	if err := os.WriteFile(f, []byte(strings.ReplaceAll(u, "/usr/local/bin/lockcelld", daemon)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", f).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestImageBuilds builds the image with docker or podman where one can
// build, and runs both binaries in it.
func TestImageBuilds(t *testing.T) {
	var tool string
	var why []string
	for _, c := range []string{"docker", "podman"} {
		p, err := exec.LookPath(c)
		if err != nil {
			why = append(why, c+" not installed")
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, p, "info").CombinedOutput()
		cancel()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			why = append(why, fmt.Sprintf("%s cannot build here (%s info: %v: %s)", c, c, err, strings.TrimSpace(lines[len(lines)-1])))
			continue
		}
		tool = p
		break
	}
	if tool == "" {
		t.Skip("no container tool to build the image with: " + strings.Join(why, "; "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	tag := "lockcell:deploy-test"
	if out, err := exec.CommandContext(ctx, tool, "build", "-t", tag, "..").CombinedOutput(); err != nil {
		t.Fatalf("%s build: %v\n%s", tool, err, out)
	}
	defer exec.Command(tool, "rmi", tag).Run()
	for _, args := range [][]string{{"run", "--rm", tag, "--version"}, {"run", "--rm", "--entrypoint", "/usr/local/bin/lockcell", tag, "--version"}} {
		out, err := exec.CommandContext(ctx, tool, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "version") {
			t.Errorf("%s %v: %v\n%s", tool, args, err, out)
		}
	}
}

func safeIndex(m []string, i int) string {
	if i < len(m) {
		return m[i]
	}
	return ""
}
