package classlint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/cost"
	"github.com/lockd-dev/lockd/internal/gittest"
	"github.com/lockd-dev/lockd/internal/golden"
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
	r := gittest.New(t) // fixed commit dates: the comment shows the base commit's hash
	if err := os.CopyFS(filepath.Join(r.Dir, "classes"), os.DirFS(filepath.Join("testdata", "rules", "ttl-range", "pass"))); err != nil {
		t.Fatal(err)
	}
	r.Commit("classes")
	repo := r.Dir

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
  keys: ["payments/reports/"]
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
	goldenFile, err := filepath.Abs(filepath.Join("testdata", "comment.golden.md")) // before the test leaves the package directory
	if err != nil {
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
	golden.AssertFile(t, goldenFile, []byte(md))
}
