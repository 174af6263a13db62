//go:build !unix

package main

import (
	"io"
	"os"
	"os/exec"
)

// forwardedSignals are passed on from lockcell to lock's command.
var forwardedSignals = []os.Signal{os.Interrupt}

// child is lock's running command. Without process groups, signals and
// kills reach the command itself only.
type child struct{ cmd *exec.Cmd }

func newChild(cmd *exec.Cmd, _ io.Reader) *child { return &child{cmd: cmd} }

func (ch *child) signal(sig os.Signal) {
	if p := ch.cmd.Process; p != nil {
		if sig != os.Kill && sig != os.Interrupt {
			sig = os.Kill // only Kill is deliverable everywhere
		}
		_ = p.Signal(sig)
	}
}

func exitCode(ps *os.ProcessState) int { return ps.ExitCode() }

func signalNumber(os.Signal) int { return 2 }

// isTerminal cannot tell here: nothing counts as a terminal, so rm -r
// wants --yes.
func isTerminal(io.Reader) bool { return false }
