package main

import (
	"os"
	"os/exec"
	"testing"

	"lockcell/fixtures"
)

// A replica whose output pipe was closed by its reader is not killed by
// the next line it writes: here `lockcelld serve --help` writes its help
// into a pipe nobody reads, as `lockcelld serve --help | grep -q` does once
// grep has matched, and still exits 0 (it died of SIGPIPE before).
func TestClosedOutputPipeDoesNotKillTheDaemon(t *testing.T) {
	bin := fixtures.BuildLockcelld(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before the first byte
	cmd := exec.Command(bin, "serve", "--help")
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Run()
	w.Close()
	if err != nil {
		t.Fatalf("lockcelld serve --help into a closed pipe: %v (state %v); want exit 0", err, cmd.ProcessState)
	}
}
