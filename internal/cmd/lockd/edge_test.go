package lockdcmd

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEdgeIdentityFlag(t *testing.T) {
	const (
		envoy  = "spiffe://example.org/ns/lockd/sa/envoy"
		canary = "spiffe://example.org/ns/lockd/sa/envoy-canary"
	)
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		want       []string
		wantCode   int
		wantStderr string
	}{
		{name: "unset", want: nil},
		{name: "repeated", args: []string{"--edge-identity", envoy, "--edge-identity", canary}, want: []string{envoy, canary}},
		{name: "comma-separated", args: []string{"--edge-identity", envoy + "," + canary}, want: []string{envoy, canary}},
		{name: "from the environment", env: map[string]string{"LOCKD_EDGE_IDENTITY": envoy + "," + canary}, want: []string{envoy, canary}},
		{name: "the flag wins over the environment", args: []string{"--edge-identity", canary},
			env: map[string]string{"LOCKD_EDGE_IDENTITY": envoy}, want: []string{canary}},
		{name: "not a SPIFFE ID", args: []string{"--edge-identity", "envoy"}, wantCode: ExitUsage, wantStderr: `--edge-identity "envoy": must be a SPIFFE ID`},
		{name: "bad in the environment", env: map[string]string{"LOCKD_EDGE_IDENTITY": "https://envoy"}, wantCode: ExitUsage,
			wantStderr: `--edge-identity "https://envoy": must be a SPIFFE ID`},
		{name: "with insecure loopback", args: []string{"--edge-identity", envoy, "--insecure-loopback"}, wantCode: ExitUsage,
			wantStderr: "--edge-identity: cannot be combined with --insecure-loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, o, stderr := parse(t, tt.args, tt.env)
			require.Equal(t, tt.wantCode, code, stderr)
			require.Contains(t, stderr, tt.wantStderr)
			if tt.wantCode == ExitOK {
				require.Equal(t, tt.want, o.EdgeIdentities)
			}
		})
	}
}
