package pausetest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill holder A if the kit dies first, so a
// stopped holder is never left behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
