package cost

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/gittest"
)

// classYAML is a LockClass document owning the keys under ns/name/, with
// ttl and tier entity: a fenced correctness class, or the spec lines given.
func classYAML(ns, name, ttl string, extra ...string) string {
	keys := fmt.Sprintf("keys: [%s/%s/]", ns, name)
	spec := []string{keys, "purpose: correctness", "enforcement: fenced", "ttl: " + ttl, "tier: entity", "resource: db"}
	if len(extra) > 0 {
		spec = append([]string{keys, "tier: entity", "ttl: " + ttl}, extra...)
	}
	return fmt.Sprintf("apiVersion: locks.lockd.dev/v1alpha1\nkind: LockClass\nmetadata: {name: %s, namespace: %s}\nspec:\n  %s\n",
		name, ns, strings.Join(spec, "\n  "))
}

func summary(r *Report) []string {
	var out []string
	for _, c := range r.Changes {
		out = append(out, c.Kind.Mark()+" "+c.Name()+" "+c.describe())
	}
	return out
}

func TestCompareWorkTreeWithRuleViolations(t *testing.T) {
	r := gittest.New(t)
	r.Write("classes/t/classes.yaml", classYAML("t", "std", "15s"))
	r.Commit("classes")
	// The work tree: a longer TTL, a durable class and an advisory class
	// whose waiver has lapsed (both refused by lockd, both priced here).
	r.Write("classes/t/classes.yaml", classYAML("t", "std", "30s")+"---\n"+
		classYAML("t", "queue", "15s", "purpose: correctness", "enforcement: fenced", "resource: db", "fairness: durable")+"---\n"+
		classYAML("t", "old", "30s", "purpose: efficiency", "enforcement: advisory", "riskOwner: team-a", `waiverExpires: "2001-01-01"`))

	rep, err := Compare(t.Context(), Options{Dir: filepath.Join(r.Dir, "classes"), Prometheus: "http://prometheus:9090",
		Source: &fakeSource{t: t, sessions: map[string]float64{"t": 3}, waits: map[Key]float64{{"t", "queue"}: 1}}})
	require.NoError(t, err)
	require.Equal(t, []string{
		"+ t/old added (ttl 30s)",
		"+ t/queue added (ttl 15s)",
		"~ t/std ttl 15s → 30s",
	}, summary(rep))
	require.Equal(t, "main", rep.Base.Ref, "origin/main does not exist: main is next")
	require.Equal(t, r.Git("rev-parse", "main"), rep.Base.Commit)
	require.Contains(t, rep.Notes, "origin/main not found: compared with main instead (pass --base to choose)")
	require.Equal(t, 2.0, rep.Changes[1].After.DurableWritesPerSecond)
	require.InDelta(t, 0.6, rep.Changes[2].Before.KeepalivesPerSecond, 1e-9)
	require.InDelta(t, 0.3, rep.Changes[2].After.KeepalivesPerSecond, 1e-9)
	require.Equal(t, "http://prometheus:9090", rep.Prometheus)
}

func TestCompareBase(t *testing.T) {
	t.Run("an explicit base that does not exist is an error", func(t *testing.T) {
		r := gittest.New(t)
		r.Write("classes/t/c.yaml", classYAML("t", "std", "15s"))
		r.Commit("classes")
		_, err := Compare(t.Context(), Options{Dir: filepath.Join(r.Dir, "classes"), Base: "origin/nope", Source: &fakeSource{t: t}})
		require.ErrorContains(t, err, "--base origin/nope is not a commit")
		require.ErrorContains(t, err, "git fetch")
	})
	t.Run("a class directory new since the base: every class is added", func(t *testing.T) {
		r := gittest.New(t)
		r.Write("README.md", "hello\n")
		r.Commit("readme")
		r.Write("classes/t/c.yaml", classYAML("t", "std", "15s"))
		rep, err := Compare(t.Context(), Options{Dir: filepath.Join(r.Dir, "classes"), Base: "HEAD",
			Source: &fakeSource{t: t, sessions: map[string]float64{}}})
		require.NoError(t, err)
		require.Equal(t, []string{"+ t/std added (ttl 15s)"}, summary(rep))
		require.Equal(t, []string{
			"classes/ does not exist at HEAD: every class is new",
			"no data for namespace t in Prometheus: assumed 0 sessions",
		}, rep.Notes)
	})
	t.Run("origin/main is preferred", func(t *testing.T) {
		r := gittest.New(t)
		r.Write("classes/t/c.yaml", classYAML("t", "std", "15s"))
		r.Commit("classes")
		r.Git("update-ref", "refs/remotes/origin/main", "HEAD")
		rep, err := Compare(t.Context(), Options{Dir: filepath.Join(r.Dir, "classes"), Source: &fakeSource{t: t, sessions: map[string]float64{}}})
		require.NoError(t, err)
		require.Equal(t, DefaultBase, rep.Base.Ref)
		require.Empty(t, rep.Notes)
		require.Empty(t, rep.Changes)
	})
	t.Run("the merge base: changes on main since the fork are not shown", func(t *testing.T) {
		r := gittest.New(t)
		r.Write("classes/t/c.yaml", classYAML("t", "std", "15s")+"---\n"+classYAML("t", "other", "15s"))
		r.Commit("classes")
		fork := r.Git("rev-parse", "HEAD")
		r.Git("checkout", "-q", "-b", "feature")
		r.Git("checkout", "-q", "main")
		r.Write("classes/t/c.yaml", classYAML("t", "std", "15s")+"---\n"+classYAML("t", "other", "20s"))
		r.Commit("other on main")
		r.Git("checkout", "-q", "feature")
		r.Write("classes/t/c.yaml", classYAML("t", "std", "30s")+"---\n"+classYAML("t", "other", "15s"))
		rep, err := Compare(t.Context(), Options{Dir: filepath.Join(r.Dir, "classes"), Base: "main",
			Source: &fakeSource{t: t, sessions: map[string]float64{"t": 1}}})
		require.NoError(t, err)
		require.Equal(t, fork, rep.Base.Commit)
		require.Equal(t, []string{"~ t/std ttl 15s → 30s"}, summary(rep))
	})
	t.Run("not a git work tree", func(t *testing.T) {
		_, err := Compare(t.Context(), Options{Dir: t.TempDir(), Source: &fakeSource{t: t}})
		require.ErrorContains(t, err, "is not in a git work tree")
	})
	t.Run("a bad Prometheus URL says what is wanted", func(t *testing.T) {
		_, err := Compare(t.Context(), Options{Dir: t.TempDir(), Prometheus: "prometheus:9090"})
		require.ErrorContains(t, err, "want an http(s) URL")
	})
}
