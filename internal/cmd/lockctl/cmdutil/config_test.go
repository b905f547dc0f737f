package cmdutil

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResolveConfigPath(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	work := filepath.Join(root, "work")
	flagFile := filepath.Join(root, "flag.yaml")
	envFile := filepath.Join(root, "env.yaml")
	userFile := filepath.Join(home, UserConfigPath)
	devFile := filepath.Join(work, DevConfigPath)

	write := func(p string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("current-context: dev\n"), 0o644))
	}
	lookup := func(flag string) ConfigLookup {
		l := SystemConfigLookup(flag)
		l.HomeDir = func() (string, error) { return home, nil }
		l.WorkDir = func() (string, error) { return work, nil }
		return l
	}

	// Nothing anywhere: the error says what to do.
	t.Setenv(EnvConfig, "")
	_, _, err := ResolveConfigPath(lookup(""))
	require.ErrorIs(t, err, ErrNoConfig)
	require.Contains(t, err.Error(), "start lockd")
	require.Contains(t, err.Error(), "--config")

	// Each source, added in reverse priority, takes over from the last.
	steps := []struct {
		name   string
		create string
		env    string
		flag   string
		want   string
		source ConfigSource
	}{
		{"dev file in the working directory", devFile, "", "", devFile, SourceDev},
		{"user config beats the dev file", userFile, "", "", userFile, SourceUser},
		{"LOCKCTL_CONFIG beats the user config", envFile, envFile, "", envFile, SourceEnv},
		{"--config beats LOCKCTL_CONFIG", flagFile, envFile, flagFile, flagFile, SourceFlag},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			write(s.create)
			t.Setenv(EnvConfig, s.env)
			got, src, err := ResolveConfigPath(lookup(s.flag))
			require.NoError(t, err)
			require.Equal(t, s.want, got)
			require.Equal(t, s.source, src)
		})
	}

	t.Run("an explicit path that does not exist is an error, not a fallback", func(t *testing.T) {
		t.Setenv(EnvConfig, filepath.Join(root, "missing-env.yaml"))
		_, src, err := ResolveConfigPath(lookup(""))
		require.Error(t, err)
		require.Equal(t, SourceEnv, src)
		require.Contains(t, err.Error(), "missing-env.yaml")
		require.True(t, errors.Is(err, os.ErrNotExist))

		_, src, err = ResolveConfigPath(lookup(filepath.Join(root, "missing-flag.yaml")))
		require.Error(t, err)
		require.Equal(t, SourceFlag, src)
	})
}

func TestFactoryClientConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("current-context: dev\ncontexts:\n- name: dev\n  server: 127.0.0.1:1\n  insecure-identity: spiffe://lockd.local/dev\n"), 0o644))

	f := New()
	f.ConfigFlag = cfg
	f.ContextName = "prod"
	_, err := f.Client()
	require.ErrorContains(t, err, `no context "prod"`)
	require.ErrorContains(t, err, "it has: dev")

	f = New()
	f.ConfigFlag = cfg
	c, err := f.Client()
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.Equal(t, "127.0.0.1:1", f.Target())
}
