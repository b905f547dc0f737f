//go:build !unix

package lock

import (
	"errors"
	"os"
	"os/exec"
)

var forwarded = []os.Signal{os.Interrupt}

var sigTerm, sigKill os.Signal = os.Interrupt, os.Kill

func setGroup(*exec.Cmd) {}

func signal(p *os.Process, sig os.Signal, _ bool) error { return p.Signal(sig) }

func exitCode(err error) (int, bool) {
	if err == nil {
		return 0, true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, false
	}
	return ee.ExitCode(), true
}

func signalNumber(os.Signal) int { return 2 }
