// Command bench measures lockd side by side with a raw etcd Txn lock,
// etcd's concurrency.Mutex and Redis redsync, and renewal at the seed's
// scale. See docs/performance.md.
//
//	go run ./ci/bench
package main

import (
	"fmt"
	"os"

	"github.com/lockd-dev/lockd/ci/bench/internal/bench"
	"github.com/lockd-dev/lockd/ci/internal/cluster"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "member" {
		if err := cluster.RunMember(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr))
}
