//go:build unix

package pausetest

import (
	"os"
	"syscall"
)

// stop pauses the process, as a GC pause or a VM freeze would.
func stop(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// resume continues a stopped process.
func resume(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
