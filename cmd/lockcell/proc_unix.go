//go:build unix

package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// forwardedSignals are passed on from lockcell to lock's command.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// child is lock's running command.
type child struct {
	cmd *exec.Cmd
	// group: the command leads its own process group, and signals go to
	// the whole group, so that stopping it on a lost lock also stops what
	// it started (sh -c 'a; b' would otherwise leave a running).
	group bool
}

// newChild prepares cmd to run as lock's command. It gets its own process
// group unless stdin is a terminal: a command outside the terminal's
// foreground group could not read it (SIGTTIN), and the terminal's own
// ^C already reaches every process of the foreground group.
func newChild(cmd *exec.Cmd, stdin io.Reader) *child {
	ch := &child{cmd: cmd, group: !isTerminal(stdin)}
	if ch.group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	return ch
}

// signal sends sig to the command (its whole process group, when it has
// one). A command that has already exited is not an error.
func (ch *child) signal(sig os.Signal) {
	p := ch.cmd.Process
	if p == nil {
		return
	}
	if s, ok := sig.(syscall.Signal); ok && ch.group {
		if err := syscall.Kill(-p.Pid, s); err == nil || !errors.Is(err, syscall.EPERM) {
			return
		}
	}
	_ = p.Signal(sig)
}

// exitCode is the shell's view of how a process ended: its exit status,
// or 128+N when signal N killed it.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signalNumber is sig's number (for the 128+N exit code).
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

// isTerminal reports whether r is a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	// Only terminals answer the get-attributes ioctl.
	_, err := getTermios(f.Fd())
	return err == nil
}
