package clientconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lockd-dev/lockd/pkg/client/clientconfig"
)

// FuzzLoadNamesTheFileAndRoundTrips: Load never panics on any bytes; every
// error wraps ErrConfig and names the file; what it loads has every path
// absolute, and saving it and loading that again gives the same config
// (what lockctl login writes back is what was read).
func FuzzLoadNamesTheFileAndRoundTrips(f *testing.F) {
	f.Add([]byte("current-context: dev\ncontexts:\n  - name: dev\n    server: 127.0.0.1:7420\n    ca: pki/ca.crt\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "lockctl.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientconfig.Load(path)
		if err != nil {
			if !errors.Is(err, clientconfig.ErrConfig) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Load: %v: does not wrap ErrConfig and name %s", err, path)
			}
			return
		}
		for _, cx := range cfg.Contexts {
			for field, p := range map[string]string{"ca": cx.CA, "cert": cx.Cert, "key": cx.Key, "operator-token-file": cx.OperatorTokenFile} {
				if p != "" && !filepath.IsAbs(p) {
					t.Fatalf("context %q: %s %q is not absolute after Load", cx.Name, field, p)
				}
			}
		}
		again := filepath.Join(dir, "again.yaml")
		if err := clientconfig.Save(again, cfg); err != nil {
			t.Fatalf("Save of what Load read: %v", err)
		}
		back, err := clientconfig.Load(again)
		if err != nil {
			saved, _ := os.ReadFile(again)
			t.Fatalf("Load of what Save wrote: %v\nsaved:\n%s", err, saved)
		}
		if !reflect.DeepEqual(normal(back), normal(cfg)) {
			t.Fatalf("saved and loaded again:\n%#v\nwant:\n%#v", back, cfg)
		}
	})
}

// normal treats an empty context list and none alike (YAML writes both as
// null or []).
func normal(c *clientconfig.Config) clientconfig.Config {
	out := *c
	if len(out.Contexts) == 0 {
		out.Contexts = nil
	}
	return out
}
