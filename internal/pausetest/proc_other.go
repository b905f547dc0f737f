//go:build !unix

package pausetest

import (
	"errors"
	"os"
)

var errNoStop = errors.New("pausetest: pausing a process needs SIGSTOP: run the kit on Linux or another Unix")

func stop(*os.Process) error   { return errNoStop }
func resume(*os.Process) error { return errNoStop }
