// Command gate is the release gate: zero double grants under real faults,
// checked by Porcupine. See docs/release-gate.md.
//
//	go run ./ci/gate --duration 60s --faults all
package main

import (
	"fmt"
	"os"

	"github.com/lockd-dev/lockd/ci/gate/internal/gate"
	"github.com/lockd-dev/lockd/ci/gate/internal/worker"
	"github.com/lockd-dev/lockd/ci/internal/cluster"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "member":
		err = cluster.RunMember(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "worker":
		err = worker.Run(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "child":
		err = worker.RunChild(os.Args[2:])
	default:
		os.Exit(gate.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
