package lockctlcmd

// Registers -update, so `go test ./internal/cmd/lockctl/... -update` works in
// every package.
import _ "github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
