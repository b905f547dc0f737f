package toolcache

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LOCKD_TOOLS", dir)
	t.Setenv("PATH", t.TempDir())
	t.Setenv("LOCKD_X", "")
	if _, err := Find("x", "LOCKD_X"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), filepath.Join(dir, "bin", "x")) {
		t.Fatalf("nothing built: %v", err)
	}
	bin := filepath.Join(dir, "bin", "x")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := Find("x", "LOCKD_X"); err != nil || p != bin {
		t.Fatalf("cached: %q, %v", p, err)
	}
	t.Setenv("LOCKD_X", filepath.Join(dir, "nope"))
	if _, err := Find("x", "LOCKD_X"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "LOCKD_X=") {
		t.Fatalf("a named binary that is not there: %v", err)
	}
}
