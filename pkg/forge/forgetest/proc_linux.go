package forgetest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes cmd get SIGKILL when the test binary dies, even when a
// test timeout kills that before the cleanup runs.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
