//go:build linux

package iostreams

import "golang.org/x/sys/unix"

// isTerminalFd asks the terminal driver, so /dev/null (a character device)
// is not taken for a terminal.
func isTerminalFd(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}
