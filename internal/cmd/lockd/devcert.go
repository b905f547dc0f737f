package lockdcmd

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/devpki"
)

func newDevCertCmd(opts *Options, stdout io.Writer) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "dev-cert <spiffe-id> --out DIR",
		Short: "Issue a client certificate (X.509 SVID) from the development CA",
		Long: `dev-cert issues a client X.509 SVID for <spiffe-id>, signed by the development
CA that lockd created in <data-dir>/pki, and writes DIR/svid.crt, DIR/svid.key
(mode 0600) and a copy of the CA certificate as DIR/ca.crt. Existing svid.crt
and svid.key in DIR are replaced. The certificate is valid for one year.

Start lockd once (with the same --data-dir) to create the CA. The dev CA signs
any SPIFFE ID in any trust domain: use it for development only.

--data-dir may also be set with LOCKD_DATA_DIR; --out is a flag only.

Exit status: 0 issued, 1 no development CA or the files cannot be written,
2 usage error (such as an invalid <spiffe-id>).`,
		Example: `  # A certificate for a payments worker, using the CA in ./.lockd/pki
  lockd dev-cert spiffe://lockd.local/payments/worker --out ./worker-svid

  # With a data directory elsewhere
  lockd dev-cert spiffe://lockd.local/ops/oncall --data-dir /var/lib/lockd --out ./oncall`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			caDir := filepath.Join(opts.DataDir, "pki")
			certPath, keyPath, err := devpki.IssueSVID(caDir, args[0], out, now(opts))
			switch {
			case errors.Is(err, devpki.ErrInvalidSPIFFEID):
				return &cli.UsageError{Err: fmt.Errorf("<spiffe-id>: %w", err)}
			case errors.Is(err, devpki.ErrNoCA):
				return fmt.Errorf("%w\nno development CA in %s: start lockd once with --data-dir %s to create it", err, caDir, opts.DataDir)
			case err != nil:
				return err
			}
			caPath := filepath.Join(filepath.Dir(certPath), "ca.crt")
			for _, p := range []*string{&certPath, &keyPath, &caPath} {
				if abs, err := filepath.Abs(*p); err == nil {
					*p = abs
				}
			}
			fmt.Fprintf(stdout, "certificate: %s\nkey:         %s\nca:          %s\n", certPath, keyPath, caPath)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write svid.crt, svid.key and ca.crt to, created if missing (required)")
	_ = cmd.MarkFlagRequired("out")
	_ = cmd.MarkFlagDirname("out")
	return cmd
}
