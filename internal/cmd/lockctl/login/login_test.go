package login_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/forcerelease"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/login"
	"github.com/lockd-dev/lockd/internal/operator"
	"github.com/lockd-dev/lockd/internal/operator/operatortest"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

func factory(t *testing.T, config string) (*cmdutil.Factory, *strings.Builder, *strings.Builder) {
	ios, _, _, _ := iostreams.Test()
	out, errOut := &strings.Builder{}, &strings.Builder{}
	ios.Out, ios.ErrOut = out, errOut
	f := cmdutil.New()
	f.IOStreams, f.ConfigFlag, f.Output = ios, config, printer.FormatJSON
	return f, out, errOut
}

// TestLoginDeviceFlowThenOperatorCall: `lockctl login` runs the device flow
// against an issuer, saves the token (0600) and remembers the issuer in the
// context; the next call carries the token and lockd accepts the operator.
func TestLoginDeviceFlowThenOperatorCall(t *testing.T) {
	is := operatortest.New(t)
	v, err := operator.NewVerifier(t.Context(), operator.Config{Issuer: is.URL(), Audience: "lockd"})
	require.NoError(t, err)
	env := lockdtest.Start(t, lockdtest.Options{OperatorTokens: v})
	alice := env.Client(t, lockdtest.Alice)
	_, err = alice.Acquire(t.Context(), "t/login", "std", func(*client.Lock) {})
	require.NoError(t, err)

	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	require.NoError(t, clientconfig.Save(config, &clientconfig.Config{CurrentContext: "ops",
		Contexts: []clientconfig.Context{{Name: "ops", Server: env.Addr, InsecureIdentity: lockdtest.Bob}}}))

	// Without a token, lockd refuses and says how to sign in.
	f, _, _ := factory(t, config)
	cmd := forcerelease.NewCmdForceRelease(f)
	cmd.SetArgs([]string{"list"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	require.ErrorContains(t, cmd.ExecuteContext(t.Context()), "lockctl login")

	f, _, errOut := factory(t, config)
	cmd = login.NewCmdLogin(f, nil)
	cmd.SetArgs([]string{"--issuer", is.URL(), "--client-id", "lockctl"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	start := time.Now()
	require.NoError(t, cmd.ExecuteContext(t.Context()))
	require.Contains(t, errOut.String(), "WDJB-MJHT", "the user code is shown")
	require.Less(t, time.Since(start), 30*time.Second)

	cfg, err := clientconfig.Load(config)
	require.NoError(t, err)
	cx := cfg.Contexts[0]
	require.Equal(t, is.URL(), cx.OIDCIssuer)
	require.Equal(t, "lockctl", cx.OIDCClientID)
	st, err := os.Stat(cx.OperatorTokenFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	tok, _ := os.ReadFile(cx.OperatorTokenFile)
	require.NotContains(t, errOut.String(), strings.TrimSpace(string(tok)), "the token was printed")

	f, out, _ := factory(t, config)
	cmd = forcerelease.NewCmdForceRelease(f)
	cmd.SetArgs([]string{"request", "t/login", "--reason", "INC-5"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	require.NoError(t, cmd.ExecuteContext(t.Context()))
	var req struct{ Requester string }
	require.NoError(t, json.Unmarshal([]byte(out.String()), &req))
	require.Equal(t, "oidc:ann", req.Requester)
}
