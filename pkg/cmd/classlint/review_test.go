package classlint

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/golden"
	"github.com/lockd-dev/lockd/pkg/cost"
)

// fixedLoad is a cost.Source with fixed figures: the golden test checks the
// comment's layout; TestCostAndRegisterAgainstRealPrometheus checks the
// figures against a real Prometheus and lockd.
type fixedLoad struct{}

func (fixedLoad) Sessions(context.Context) (map[string]float64, error) {
	return map[string]float64{"payments": 1200}, nil
}

func (fixedLoad) WaitRates(context.Context) (map[cost.Key]float64, error) {
	return map[cost.Key]float64{}, nil
}

// TestCommentMarkdownGolden renders the whole review a pull request gets:
// a class repository committed on main, a work tree that shortens a TTL,
// breaks a rule and adds a waiver that lapses soon.
func TestCommentMarkdownGolden(t *testing.T) {
	repo := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=test", "-c", "user.email=test@example.com",
			"-c", "commit.gpgsign=false"}, args...)...)
		// Fixed dates make the base commit's hash, which the comment shows, stable.
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null",
			"GIT_AUTHOR_DATE=2026-11-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-11-01T00:00:00Z")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	copyTree(t, filepath.Join("testdata", "rules", "ttl-range", "pass"), filepath.Join(repo, "classes"))
	git("init", "-q", "-b", "main")
	git("add", "-A")
	git("commit", "-q", "-m", "classes")

	classes := filepath.Join(repo, "classes", "payments", "classes.yaml")
	data, err := os.ReadFile(classes)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(string(data), "ttl: 5s", "ttl: 2s", 1) + `---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: report-export, namespace: payments}
spec:
  purpose: correctness
  enforcement: advisory
  ttl: 45s
  tier: entity
  riskOwner: payments-oncall
  waiverExpires: "2026-12-20"
`
	if err := os.WriteFile(classes, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(repo)
	now, _ := time.Parse(time.RFC3339, fixtureNow)
	md, failed, err := review(t.Context(), reviewOptions{
		Dir: "classes", Base: "main", PrometheusURL: "http://prometheus.example:9090", Now: func() time.Time { return now }, costSource: fixedLoad{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("a TTL of 2s did not fail the review")
	}
	golden.AssertFile(t, goldenPath(t, "comment.golden.md"), []byte(md))
}

// goldenPath returns testdata/name in the package directory, whatever the
// test's working directory is now.
func goldenPath(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(pkgDir, "testdata", name)
}

var pkgDir = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return wd
}()

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
