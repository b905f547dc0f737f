package spool_test

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel SIGKILL cmd if this test process dies first,
// so that no child outlives the test, even one killed before its cleanup.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
