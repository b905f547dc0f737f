//go:build !linux

package spool_test

import "os/exec"

// dieWithParent does nothing outside Linux, which has no Pdeathsig: the
// tests kill their children themselves.
func dieWithParent(*exec.Cmd) {}
