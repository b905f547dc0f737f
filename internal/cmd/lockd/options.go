package lockdcmd

import (
	"time"

	"github.com/lockd-dev/lockd/internal/lockd"
)

// Options is what the command builds a lockd from: the assembly's Config,
// filled from flags and LOCKD_* environment variables.
type Options = lockd.Config

// DefaultOptions returns the flag defaults.
func DefaultOptions() Options { return lockd.DefaultConfig() }

// DevSPIFFEID is the identity of the client SVID the dev PKI writes to
// <data-dir>/pki/dev.crt.
const DevSPIFFEID = lockd.DevSPIFFEID

// Log levels and formats accepted by --log-level and --log-format.
var (
	logLevels  = lockd.LogLevels
	auditModes = lockd.AuditModes
	logFormats = lockd.LogFormats
)

// now is the options' clock.
func now(o *Options) time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}
