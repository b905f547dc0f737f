//go:build !linux

package kubetest

import "syscall"

// sysProcAttr is empty where there is no parent-death signal.
func sysProcAttr() *syscall.SysProcAttr { return nil }
