package lockctlcmd

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestAKeyOfAnotherRegionNamesTheContextThatServesIt: lockctl against
// eu-west's lockd, for a key of a namespace homed to us-east, exits 2
// and names the region, its lockd and the context for it.
func TestAKeyOfAnotherRegionNamesTheContextThatServesIt(t *testing.T) {
	classes := maps.Clone(lockdtest.Classes)
	classes["t/namespace.yaml"] = "apiVersion: locks.lockd.dev/v1alpha1\nkind: LockNamespace\nmetadata: {name: home, namespace: t}\nspec: {region: us-east}\n"
	classes["other/namespace.yaml"] = "apiVersion: locks.lockd.dev/v1alpha1\nkind: LockNamespace\nmetadata: {name: home, namespace: other}\nspec: {region: eu-west}\n"
	usAddr := lockdtest.FreeAddr(t)
	eu := lockdtest.Start(t, lockdtest.Options{Classes: classes, Region: "eu-west", RegionEndpoints: map[string]string{"us-east": usAddr}})

	for _, tt := range []struct {
		name     string
		contexts []clientconfig.Context
		args     []string
		want     string
	}{
		{"a context names the region", []clientconfig.Context{{Name: "eu", Server: eu.Addr, Region: "eu-west"}, {Name: "us-prod", Server: "lockd.us:7420", Region: "us-east"}},
			[]string{"inspect", "t/jobs/1"}, "region us-east is served by context us-prod: lockctl --context us-prod …"},
		{"a context's server is the endpoint", []clientconfig.Context{{Name: "eu", Server: eu.Addr}, {Name: "us", Server: usAddr}},
			[]string{"lock", "t/jobs/1", "--", "true"}, "region us-east is served by context us"},
		{"no context serves it", []clientconfig.Context{{Name: "eu", Server: eu.Addr}},
			[]string{"inspect", "t/jobs/1"}, "no context of yours serves region us-east: add one (server: its lockd, region: us-east)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, out, errOut := iostreams.Test()
			f := cmdutil.New()
			f.IOStreams = ios
			f.Config = func() (*clientconfig.Config, string, error) {
				return &clientconfig.Config{CurrentContext: "eu", Contexts: tt.contexts}, "lockctl.yaml", nil
			}
			f.Client = func() (*client.Client, error) {
				return client.New(client.WithTarget(eu.Addr), client.WithInsecureIdentity(lockdtest.Alice))
			}
			require.Equal(t, cli.ExitUsage, Run(f, tt.args), "stdout %q stderr %q", out.String(), errOut.String())
			for _, w := range []string{"namespace t is homed to region us-east, this lockd serves eu-west", "region us-east's lockd is " + usAddr, tt.want} {
				require.Contains(t, errOut.String(), w)
			}
			require.True(t, strings.HasPrefix(errOut.String(), "lockctl: "))
		})
	}
}
