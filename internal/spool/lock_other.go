//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package spool

import (
	"fmt"
	"os"
	"runtime"
)

// lockDir fails: the spool needs flock(2), which this system does not have.
func lockDir(dir string) (*os.File, error) {
	return nil, fmt.Errorf("spool: %s: not supported on %s (the spool's lock needs flock(2))", dir, runtime.GOOS)
}
