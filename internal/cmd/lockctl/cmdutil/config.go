package cmdutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Config file locations.
const (
	// EnvConfig names the config file, like --config.
	EnvConfig = "LOCKCTL_CONFIG"
	// EnvContext names the context, like --context.
	EnvContext = "LOCKCTL_CONTEXT"
	// EnvOutput sets the output format, like -o.
	EnvOutput = "LOCKCTL_OUTPUT"
	// EnvOperatorToken is an OIDC operator access token, sent with every
	// call when set: force-release and epoch advance need it when lockd
	// runs with --oidc-issuer.
	EnvOperatorToken = "LOCKCTL_OPERATOR_TOKEN"
	// UserConfigPath is the per-user config, relative to $HOME.
	UserConfigPath = ".config/lockctl/config.yaml"
	// DevConfigPath is what a dev lockd writes in its working directory.
	DevConfigPath = ".lockd/lockctl.yaml"
)

// ErrNoConfig: no config file was found anywhere lockctl looks.
var ErrNoConfig = errors.New("no lockctl config found: start lockd (it writes ./" + DevConfigPath + ") or pass --config")

// ConfigSource says where a config path came from.
type ConfigSource string

// Config sources, in the order they are tried.
const (
	SourceFlag ConfigSource = "--config"
	SourceEnv  ConfigSource = "$" + EnvConfig
	SourceUser ConfigSource = "~/" + UserConfigPath
	SourceDev  ConfigSource = "./" + DevConfigPath
)

// ConfigLookup is what config resolution may consult; each field is
// injectable for tests.
type ConfigLookup struct {
	// Flag is the --config value ("" when not given).
	Flag string
	// Getenv reads the environment.
	Getenv func(string) string
	// HomeDir returns the user's home directory.
	HomeDir func() (string, error)
	// WorkDir is the directory ./.lockd is looked up in.
	WorkDir func() (string, error)
	// Stat checks that a file exists.
	Stat func(string) (fs.FileInfo, error)
}

// SystemConfigLookup consults the real environment and file system.
func SystemConfigLookup(flag string) ConfigLookup {
	return ConfigLookup{Flag: flag, Getenv: os.Getenv, HomeDir: os.UserHomeDir, WorkDir: os.Getwd, Stat: os.Stat}
}

// ResolveConfigPath finds the config file: --config, then $LOCKCTL_CONFIG,
// then ~/.config/lockctl/config.yaml, then ./.lockd/lockctl.yaml. A path
// named explicitly (flag or env) must exist: lockctl never silently falls
// back from a file the user asked for.
func ResolveConfigPath(l ConfigLookup) (string, ConfigSource, error) {
	explicit := func(p string, src ConfigSource) (string, ConfigSource, error) {
		if _, err := l.Stat(p); err != nil {
			return "", src, fmt.Errorf("lockctl config %s (from %s): %w", p, src, unwrapPathErr(err))
		}
		return p, src, nil
	}
	if l.Flag != "" {
		return explicit(l.Flag, SourceFlag)
	}
	if p := l.Getenv(EnvConfig); p != "" {
		return explicit(p, SourceEnv)
	}
	if home, err := l.HomeDir(); err == nil && home != "" {
		p := filepath.Join(home, UserConfigPath)
		if _, err := l.Stat(p); err == nil {
			return p, SourceUser, nil
		}
	}
	if wd, err := l.WorkDir(); err == nil {
		p := filepath.Join(wd, DevConfigPath)
		if _, err := l.Stat(p); err == nil {
			return p, SourceDev, nil
		}
	}
	return "", "", ErrNoConfig
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
