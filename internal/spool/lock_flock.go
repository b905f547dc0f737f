//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes flock(2) LOCK_EX|LOCK_NB on the directory's lock file and
// returns the file holding it: closing it releases the lock. The lock
// belongs to this open file, so a second lockDir fails even in the same
// process, and the kernel releases it when the process dies, however it dies.
func lockDir(dir string) (*os.File, error) {
	p := filepath.Join(dir, lockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: opening the lock file %s: %w", p, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("spool: lock file %s: %w", p, err)
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
			if ferr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		ferr = err
	}
	switch {
	case errors.Is(ferr, syscall.EWOULDBLOCK):
		f.Close()
		return nil, fmt.Errorf("%w: %s is open elsewhere (flock on %s is held)", ErrLocked, dir, p)
	case ferr != nil:
		f.Close()
		return nil, fmt.Errorf("spool: flock %s: %w", p, ferr)
	}
	return f, nil
}
