// Command lockd is the lock service: a gRPC arbiter on etcd.
package main

import (
	"os"

	lockdcmd "github.com/lockd-dev/lockd/internal/cmd/lockd"
)

func main() { os.Exit(lockdcmd.Main()) }
