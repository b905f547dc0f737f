// Command lockctl is the SRE's terminal for lockd.
package main

import (
	"os"

	lockctlcmd "github.com/lockd-dev/lockd/internal/cmd/lockctl"
)

func main() { os.Exit(lockctlcmd.Main()) }
