package cmdutil

// Registers -update, so `go test ./pkg/cmd/lockctl/... -update` works in
// every package.
import _ "github.com/lockd-dev/lockd/pkg/cmd/lockctl/internal/golden"
