// Package toolcache finds the servers `bash ci/tools.sh` builds for the
// tests (Gitea, MinIO, kube-apiserver): a binary named by its environment
// variable, else in the tools cache, else on PATH.
package toolcache

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ErrNotFound is wrapped by Find's error when the binary is nowhere.
var ErrNotFound = errors.New("toolcache: not found")

// Dir is the tools cache: $LOCKD_TOOLS, or $HOME/.cache/lockd-tools.
func Dir() string {
	if d := os.Getenv("LOCKD_TOOLS"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "lockd-tools")
}

// Find returns the binary name: $env if set (it must be an executable
// file), else Dir()/bin/name, else name on PATH. Its error names where it
// looked and wraps ErrNotFound; the caller adds how to build it.
func Find(name, env string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if !executable(p) {
			return "", fmt.Errorf("%w: %s=%s is not an executable file", ErrNotFound, env, p)
		}
		return p, nil
	}
	cached := filepath.Join(Dir(), "bin", name)
	if executable(cached) {
		return cached, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: %s is not at $%s, %s or on PATH", ErrNotFound, name, env, cached)
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
