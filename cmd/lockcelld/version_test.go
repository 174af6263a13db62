package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// gitOut runs git in the module root and returns its trimmed output.
func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git %v: %v (not a checkout?)", args, err)
	}
	return strings.TrimSpace(string(out))
}

// Both binaries, built from a checkout as a release would be, say on
// --version which commit they are, whether the tree was modified, and the
// Go version; the module version is the pseudo-version of that commit.
func TestVersionFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	head := gitOut(t, "rev-parse", "HEAD")
	dirty := gitOut(t, "status", "--porcelain") != ""
	dir := t.TempDir()
	for _, name := range []string{"lockcelld", "lockcell"} {
		bin := filepath.Join(dir, name)
		// -buildvcs=true: the environment may turn VCS stamping off
		// (GOFLAGS), and a release build has it on.
		build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/"+name)
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
		if gitOut(t, "rev-parse", "HEAD") != head || (gitOut(t, "status", "--porcelain") != "") != dirty {
			t.Skip("the checkout changed while building; run again")
		}
		for _, flag := range []string{"--version", "-v"} {
			out, err := exec.Command(bin, flag).CombinedOutput()
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", name, flag, err, out)
			}
			line := strings.TrimSpace(string(out))
			if !strings.HasPrefix(line, name+" version ") {
				t.Errorf("%s %s printed %q, want it to start with %q", name, flag, line, name+" version ")
			}
			if !strings.Contains(line, "commit "+head) {
				t.Errorf("%s %s printed %q, want commit %s", name, flag, line, head)
			}
			if got := strings.Contains(line, "(modified)"); got != dirty {
				t.Errorf("%s %s printed %q: modified %v, want %v (git status)", name, flag, line, got, dirty)
			}
			if !strings.HasSuffix(line, " "+runtime.Version()) {
				t.Errorf("%s %s printed %q, want it to end with the Go version %s", name, flag, line, runtime.Version())
			}
			if fields := strings.Fields(line); len(fields) < 3 || !strings.Contains(fields[2], head[:12]) {
				t.Errorf("%s %s printed %q, want a module version naming commit %s", name, flag, line, head[:12])
			}
		}
	}
}
