//go:build unix

package lock

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// signals lockctl forwards to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

var sigTerm, sigKill os.Signal = syscall.SIGTERM, syscall.SIGKILL

// setGroup puts the command in a process group of its own, so that
// signals reach its children too.
func setGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// signal sends sig to the command, or to its whole process group.
func signal(p *os.Process, sig os.Signal, group bool) error {
	if group {
		if s, ok := sig.(syscall.Signal); ok {
			return syscall.Kill(-p.Pid, s)
		}
	}
	return p.Signal(sig)
}

// exitCode is the command's exit code; a command killed by a signal
// gives 128+signal, as in a shell.
func exitCode(err error) (int, bool) {
	if err == nil {
		return 0, true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, false
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), true
	}
	return ee.ExitCode(), true
}

func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}
