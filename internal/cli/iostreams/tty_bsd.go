//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package iostreams

import "golang.org/x/sys/unix"

func isTerminalFd(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TIOCGETA)
	return err == nil
}
