package clientconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

func TestConfigFileContexts(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	path := filepath.Join(t.TempDir(), "lockctl.yaml")
	body := "current-context: a\ncontexts:\n  - name: a\n    server: " + env.Addr + "\n    insecure-identity: " + lockdtest.Alice + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := clientconfig.FromFile(path, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(t.Context(), "t/cfg", "std", func(*client.Lock) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := clientconfig.FromFile(path, "missing"); err == nil || !strings.Contains(err.Error(), `no context "missing"`) {
		t.Fatalf("missing context: %v", err)
	}
	if err := os.WriteFile(path, []byte("current-context: a\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := clientconfig.FromFile(path, ""); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown field: %v", err)
	}
}

func TestSaveThenLoadResolvesRelativePaths(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lockctl.yaml")
	in := &clientconfig.Config{CurrentContext: "dev", Contexts: []clientconfig.Context{{
		Name: "dev", Server: "127.0.0.1:7420", CA: "pki/ca.crt", Cert: "/abs/dev.crt", Key: "pki/dev.key"}}}
	if err := clientconfig.Save(path, in); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved config mode: %v %v; want 0600 (contexts name credentials)", fi, err)
	}
	out, err := clientconfig.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cx, err := out.Context("")
	if err != nil {
		t.Fatal(err)
	}
	if cx.CA != filepath.Join(dir, "pki/ca.crt") || cx.Cert != "/abs/dev.crt" || cx.Key != filepath.Join(dir, "pki/dev.key") {
		t.Fatalf("paths: %+v", cx)
	}
	if _, err := (&clientconfig.Context{Name: "x"}).Options(); !errors.Is(err, clientconfig.ErrConfig) || !strings.Contains(err.Error(), "server: required") {
		t.Fatalf("context without a server: %v", err)
	}
}
