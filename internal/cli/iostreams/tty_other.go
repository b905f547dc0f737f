//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package iostreams

import "os"

func isTerminalFd(fd uintptr) bool {
	fi, err := os.NewFile(fd, "").Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
