// Command class-lint checks lock-class definitions.
package main

import (
	"os"

	"github.com/lockd-dev/lockd/internal/cmd/classlint"
)

func main() { os.Exit(classlint.Main(os.Args[1:], os.Stdout, os.Stderr)) }
