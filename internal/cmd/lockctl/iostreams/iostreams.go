// Package iostreams forwards to internal/cli/iostreams, where lockctl's
// streams now live. It exists only because cmdutil/factory.go, which is
// being changed on another branch, still imports this path: once that file
// imports internal/cli/iostreams, delete this package.
package iostreams

import "github.com/lockd-dev/lockd/internal/cli/iostreams"

// IOStreams is iostreams.IOStreams.
type IOStreams = iostreams.IOStreams

// System is iostreams.System.
func System() *IOStreams { return iostreams.System() }
