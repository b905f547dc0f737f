package fencetest_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/pausetest"
	servers "github.com/lockd-dev/lockd/internal/testserver"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// TestFenceTestS3 runs the kit against the reference S3 fence on a real
// MinIO (conditional PUT on the ETag). The credentials reach fence.Open,
// in the kit and in the paused holder, through the environment only.
func TestFenceTestS3(t *testing.T) {
	m := servers.StartMinIO(t)
	m.SetEnv(t)
	env := lockdtest.Start(t, lockdtest.Options{})
	config := lockctlConfig(t, env)

	out := filepath.Join(t.TempDir(), "result.yaml")
	code, rep, errOut := fenceTest(t, config, "t/fast/ft-s3", "--resource", m.URL(), "--out", out)
	require.Equal(t, 0, code, "%s\n%+v\n%s", rep.Message, rep.Steps, errOut)
	require.Equal(t, pausetest.OutcomePass, rep.Outcome)
	for _, s := range rep.Steps {
		require.Equal(t, pausetest.StatusOK, s.Status, "%s: %s", s.Name, s.Detail)
	}
	require.Contains(t, rep.Target, "s3 bucket "+m.Bucket+" at "+m.Endpoint)
	require.NotContains(t, errOut+rep.Message, m.SecretKey)
	requireResultAccepted(t, out, rep)
}
