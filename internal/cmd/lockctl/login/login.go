// Package login is `lockctl login`: an operator signs in with the OIDC
// device authorization flow, and the access token is kept for the context.
package login

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
)

// Options are `lockctl login`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Config  func() (*clientconfig.Config, string, error)
	Context string
	Timeout time.Duration

	Issuer   string
	ClientID string
}

// NewCmdLogin returns `lockctl login`.
func NewCmdLogin(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Config: f.Config, Timeout: 10 * time.Minute}
	cmd := &cobra.Command{
		Use:   "login [--issuer <url>] [--client-id <id>]",
		Short: "Sign in as an operator (OIDC device flow) for force-release and epoch advance",
		Long: cmdutil.Doc(`
			Sign in at your OIDC provider (Keycloak) with the device authorization flow.
			lockctl prints a URL and a code; open the URL anywhere, sign in with your
			second factor, and enter the code. The access token is saved next to the
			config file (mode 0600) and sent with every call of this context.

			lockd accepts it for force-release and epoch advance when the token carries
			the operator role and shows a second factor. --issuer and --client-id are
			remembered in the context, so the next login needs neither.
		`),
		Example: cmdutil.Example(`
			$ lockctl login --issuer https://keycloak.example.org/realms/ops --client-id lockctl
			$ lockctl force-release list

			# Another context
			$ lockctl --context prod login
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Context = f.ContextName
			if runF != nil {
				return runF(opts)
			}
			return run(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Issuer, "issuer", "", "OIDC issuer URL (default: the context's oidc-issuer)")
	cmd.Flags().StringVar(&opts.ClientID, "client-id", "", "OIDC client id for lockctl (default: the context's oidc-client-id)")
	return cmd
}

func run(ctx context.Context, opts *Options) error {
	cfg, path, err := opts.Config()
	if err != nil {
		return err
	}
	cx, err := cfg.Context(opts.Context)
	if err != nil {
		return err
	}
	if opts.Issuer == "" {
		opts.Issuer = cx.OIDCIssuer
	}
	if opts.ClientID == "" {
		opts.ClientID = cx.OIDCClientID
	}
	if opts.Issuer == "" || opts.ClientID == "" {
		return cli.Usagef("--issuer and --client-id are required the first time (context %q remembers them)", cx.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	p, err := oidc.NewProvider(ctx, opts.Issuer)
	if err != nil {
		return fmt.Errorf("OIDC discovery at %s: %w", opts.Issuer, err)
	}
	ep := p.Endpoint()
	if ep.DeviceAuthURL == "" {
		return fmt.Errorf("%s offers no device authorization endpoint: enable the OAuth 2.0 Device Authorization Grant for client %q", opts.Issuer, opts.ClientID)
	}
	oc := &oauth2.Config{ClientID: opts.ClientID, Endpoint: ep, Scopes: []string{oidc.ScopeOpenID}}
	da, err := oc.DeviceAuth(ctx)
	if err != nil {
		return fmt.Errorf("device authorization at %s: %w", ep.DeviceAuthURL, err)
	}
	uri := da.VerificationURIComplete
	if uri == "" {
		uri = da.VerificationURI
	}
	fmt.Fprintf(opts.IO.ErrOut, "Open %s and enter the code %s\nWaiting for you to sign in…\n", uri, da.UserCode)
	tok, err := oc.DeviceAccessToken(ctx, da)
	if err != nil {
		return fmt.Errorf("sign-in did not complete: %w", err)
	}
	file := filepath.Join(filepath.Dir(path), "tokens", cx.Name+".token")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(file, []byte(tok.AccessToken+"\n"), 0o600); err != nil {
		return err
	}
	for i := range cfg.Contexts {
		if cfg.Contexts[i].Name == cx.Name {
			cfg.Contexts[i].OIDCIssuer, cfg.Contexts[i].OIDCClientID, cfg.Contexts[i].OperatorTokenFile = opts.Issuer, opts.ClientID, file
		}
	}
	if err := clientconfig.Save(path, cfg); err != nil {
		return err
	}
	expiry := "unknown"
	if !tok.Expiry.IsZero() {
		expiry = tok.Expiry.Format(time.RFC3339)
	}
	fmt.Fprintf(opts.IO.ErrOut, "Signed in. Token saved to %s (expires %s) for context %q.\n", file, expiry, cx.Name)
	return nil
}
