package kubetest

import "syscall"

// sysProcAttr has the kernel kill the server when the thread that started
// it exits. Go does not end its threads while the process runs unless a
// goroutine exits locked to one, which this package never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
