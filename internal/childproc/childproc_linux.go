// Package childproc holds what helper processes started by lockctl and by
// tests need from the operating system.
package childproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes the kernel send cmd SIGKILL when the process that
// started it dies, so a child (a stopped pause-test holder, a test's
// server) is never left behind, even when the parent is killed before its
// cleanup runs. Call it before cmd.Start.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
