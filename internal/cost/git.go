package cost

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DefaultBase is the ref compared with when none is given. When it does
// not exist, main and then HEAD are tried, and the report says so.
const DefaultBase = "origin/main"

// Base says what the work tree was compared with.
type Base struct {
	// Ref is the ref used: the one asked for, or the fallback.
	Ref string `json:"ref"`
	// Commit is the commit compared with: the merge base of Ref and HEAD
	// (so that changes made on Ref since the branch forked do not show up
	// as reverted), or Ref's commit when they share no history.
	Commit string `json:"commit"`
	// Note says why Ref is not the one asked for, or that the class
	// directory did not exist there; empty otherwise.
	Note string `json:"note,omitempty"`
}

// Short is Ref with Commit's first 12 hex digits.
func (b Base) Short() string {
	c := b.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	return fmt.Sprintf("%s (%s)", b.Ref, c)
}

// checkoutBase writes the class directory dir as it was at ref into tmp and
// returns its path there ("" when dir did not exist at ref). An empty ref
// means DefaultBase with fallbacks. Git runs in the repository that
// contains dir.
func checkoutBase(ctx context.Context, dir, ref, tmp string) (Base, string, error) {
	top, err := git(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return Base{}, "", fmt.Errorf("cost: %s is not in a git work tree (cost compares the class directory with a git ref): %w", dir, err)
	}
	prefix, err := git(ctx, dir, "rev-parse", "--show-prefix")
	if err != nil {
		return Base{}, "", fmt.Errorf("cost: find %s in its repository: %w", dir, err)
	}
	prefix = strings.TrimSuffix(prefix, "/")

	b, err := resolveBase(ctx, top, ref)
	if err != nil {
		return Base{}, "", err
	}
	if prefix != "" {
		ls, err := git(ctx, top, "ls-tree", b.Commit, "--", prefix)
		if err != nil {
			return Base{}, "", fmt.Errorf("cost: list %s at %s: %w", prefix, b.Ref, err)
		}
		if ls == "" {
			b.Note = join(b.Note, fmt.Sprintf("%s/ does not exist at %s: every class is new", prefix, b.Ref))
			return b, "", nil
		}
	}
	args := []string{"archive", "--format=tar", b.Commit}
	if prefix != "" {
		args = append(args, "--", prefix)
	}
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", top}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Base{}, "", fmt.Errorf("cost: git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	if err := untar(bytes.NewReader(out), tmp); err != nil {
		return Base{}, "", fmt.Errorf("cost: extract %s at %s: %w", prefix, b.Ref, err)
	}
	return b, filepath.Join(tmp, filepath.FromSlash(prefix)), nil
}

// resolveBase finds the commit to compare with.
func resolveBase(ctx context.Context, top, ref string) (Base, error) {
	candidates := []string{ref}
	if ref == "" {
		candidates = []string{DefaultBase, "main", "HEAD"}
	}
	var b Base
	for _, c := range candidates {
		commit, err := git(ctx, top, "rev-parse", "--verify", "--quiet", c+"^{commit}")
		if err == nil {
			b = Base{Ref: c, Commit: commit}
			break
		}
	}
	switch {
	case b.Commit == "" && ref != "":
		return Base{}, fmt.Errorf("cost: --base %s is not a commit in %s: fetch it (git fetch origin) or pass a ref that exists", ref, top)
	case b.Commit == "":
		return Base{}, fmt.Errorf("cost: %s has no %s, main or HEAD commit to compare with: commit the class directory first or pass --base", top, DefaultBase)
	case b.Ref != candidates[0]:
		b.Note = fmt.Sprintf("%s not found: compared with %s instead (pass --base to choose)", DefaultBase, b.Ref)
	}
	if mb, err := git(ctx, top, "merge-base", b.Commit, "HEAD"); err == nil && mb != "" {
		b.Commit = mb
	}
	return b, nil
}

// git runs git -C dir args and returns its trimmed output.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, msg)
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// untar writes the folders and regular files of a tar stream under dir.
// Other entries (git's pax header, symlinks) are skipped.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.FromSlash(strings.TrimSuffix(h.Name, "/"))
		if !filepath.IsLocal(name) {
			continue
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
