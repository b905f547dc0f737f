package fencetest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/cli"
	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cmd/classlint"
	lockctlcmd "github.com/lockd-dev/lockd/internal/cmd/lockctl"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/fencetest"
	"github.com/lockd-dev/lockd/internal/kubetest"
	"github.com/lockd-dev/lockd/internal/pausetest"
	servers "github.com/lockd-dev/lockd/internal/testserver"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// These tests run `lockctl fence-test` end to end: a real lockd (class
// t/fast: fenced, TTL 5s, resource test-db), a real PostgreSQL or MinIO,
// and the paused holder as a child process (this test binary, re-executed;
// see TestMain).

// ranAt is the injected clock: the result's ranAt.
var ranAt = time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)

// lockctlConfig writes a lockctl config whose context reaches lockd as
// Alice, and returns its path.
func lockctlConfig(t *testing.T, env *lockdtest.Env) string {
	t.Helper()
	return lockctlConfigAt(t, env.Addr, lockdtest.Alice)
}

func lockctlConfigAt(t *testing.T, addr, id string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lockctl.yaml")
	body := fmt.Sprintf("current-context: test\ncontexts:\n- name: test\n  server: %s\n  insecure-identity: %s\n", addr, id)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// lockctl runs lockctl with args and returns its exit code, stdout and
// stderr.
func lockctl(t *testing.T, config string, args ...string) (int, string, string) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	f := cmdutil.New()
	f.IOStreams = ios
	f.Now = func() time.Time { return ranAt }
	code := lockctlcmd.Run(f, append([]string{"--config", config}, args...))
	return code, out.String(), errOut.String()
}

// fenceTest runs fence-test -o json on key and returns the exit code, the
// report and stderr.
func fenceTest(t *testing.T, config, key string, args ...string) (int, fencetest.ReportView, string) {
	t.Helper()
	start := time.Now()
	code, out, errOut := lockctl(t, config, append([]string{"fence-test", "--class", "fast", "--key", key, "--schema-version", "7", "-o", "json"}, args...)...)
	t.Logf("fence-test %s: exit %d in %s", key, code, time.Since(start).Round(time.Millisecond))
	var rep fencetest.ReportView
	require.NoError(t, json.Unmarshal([]byte(out), &rep), "stdout: %q\nstderr: %s", out, errOut)
	return code, rep, errOut
}

func statuses(rep fencetest.ReportView) map[string]string {
	m := map[string]string{}
	for _, s := range rep.Steps {
		m[s.Name] = s.Status
	}
	return m
}

// requirePsql fails the test when the PostgreSQL client is missing.
func requirePsql(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatal("psql not found: install it with `apt-get install -y postgresql` (or postgresql-client)")
	}
}

// psql returns a shell command that runs sql through psql against dsn
// with the psql variables key, tok and val from the kit's environment.
// A trailing "| grep -qx 1" turns "RETURNING 1" into the exit status.
func psql(dsn, sql string, checkRow bool) string {
	cmd := fmt.Sprintf(`psql '%s' -X -q -tA -v ON_ERROR_STOP=1 -v key="$LOCK_KEY" -v tok="${LOCK_TOKEN:-0}" -v val="${FENCE_TEST_VALUE:-}" <<'SQL'
%s
SQL`, dsn, sql)
	if checkRow {
		cmd = "(" + cmd + "\n) | grep -qx 1"
	}
	return cmd
}

// table makes a table with the reference layout and a row per key, fence 0.
func table(t *testing.T, pool *pgxpool.Pool, name string, keys ...string) {
	t.Helper()
	ctx := t.Context()
	_, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, value text NOT NULL DEFAULT '', fence numeric(20,0) NOT NULL DEFAULT 0)`, name))
	require.NoError(t, err)
	for _, k := range keys {
		_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id) VALUES ($1)`, name), k)
		require.NoError(t, err)
	}
}

func TestFenceTestPostgres(t *testing.T) {
	requirePsql(t)
	dsn := servers.StartPostgres(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	env := lockdtest.Start(t, lockdtest.Options{})
	config := lockctlConfig(t, env)

	t.Run("reference writer by URL passes and class-lint accepts the result", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "result.yaml")
		code, rep, errOut := fenceTest(t, config, "t/fast/ft-url", "--resource", dsn+"&table=ft_url", "--out", out)
		require.Equal(t, 0, code, "%s\n%+v\n%s", rep.Message, rep.Steps, errOut)
		require.Equal(t, pausetest.OutcomePass, rep.Outcome)
		for _, s := range rep.Steps {
			require.Equal(t, pausetest.StatusOK, s.Status, "%s: %s", s.Name, s.Detail)
		}
		require.Equal(t, out, rep.ResultFile)
		require.Equal(t, "fenced", rep.Class.Enforcement)
		require.Contains(t, rep.Target, "postgres table ft_url on 127.0.0.1:")
		require.Contains(t, errOut, "Wrote "+out+": commit it next to class t/fast")
		requireResultAccepted(t, out, rep)
	})

	// Not parallel: it changes directory, to check no file is written.
	t.Run("reference writer by URL passes and the result goes to Kubernetes", func(t *testing.T) {
		api := kubetest.Start(t)
		api.ApplyCRDs(t, kubetest.CRDDir(t))
		dyn, err := dynamic.NewForConfig(api.RESTConfig())
		require.NoError(t, err)
		createNamespace(t, dyn, "t")
		// An earlier run's result, a year old: this run replaces it.
		earlier := pausetest.Result{Namespace: "t", Class: "fast", Resource: "test-db", ResourceSchemaVersion: "6",
			RanAt: ranAt.AddDate(-1, 0, 0), FirstToken: 1, SecondToken: 2}
		created, err := fencetest.WriteResult(t.Context(), dyn, earlier)
		require.NoError(t, err)
		require.True(t, created)

		t.Chdir(t.TempDir()) // where the default --out would land
		code, rep, errOut := fenceTest(t, config, "t/fast/ft-kube", "--resource", dsn+"&table=ft_kube", "--to-kubernetes", "--kubeconfig", api.Kubeconfig())
		require.Equal(t, 0, code, "%s\n%+v\n%s", rep.Message, rep.Steps, errOut)
		require.Equal(t, pausetest.OutcomePass, rep.Outcome)
		require.Equal(t, "t/fast", rep.ResultObject)
		require.Empty(t, rep.ResultFile, "no --out: no file")
		require.NoFileExists(t, "pausetest-fast.yaml")
		require.Contains(t, errOut, "Updated PauseTestResult t/fast in the cluster at "+api.URL())

		obj, err := dyn.Resource(pauseTestResults).Namespace("t").Get(t.Context(), "fast", metav1.GetOptions{})
		require.NoError(t, err)
		o, problems := class.ParseObject(obj.Object)
		require.Empty(t, problems)
		pt := o.PauseTest
		require.NotNil(t, pt)
		require.Equal(t, "fast", pt.Class)
		require.Equal(t, "test-db", pt.Resource)
		require.Equal(t, "7", pt.ResourceSchemaVersion, "the earlier run's spec is replaced")
		require.Equal(t, ranAt, pt.RanAt)
		require.Equal(t, strconv.FormatUint(rep.Tokens.A, 10), pt.FirstToken)
		require.Equal(t, strconv.FormatUint(rep.Tokens.B, 10), pt.SecondToken)

		// With --out as well, the file is written too: the same document.
		out := filepath.Join(t.TempDir(), "result.yaml")
		code, rep, errOut = fenceTest(t, config, "t/fast/ft-kube", "--resource", dsn+"&table=ft_kube", "--to-kubernetes", "--kubeconfig", api.Kubeconfig(), "--out", out)
		require.Equal(t, 0, code, "%s\n%s", rep.Message, errOut)
		require.Equal(t, out, rep.ResultFile)
		require.Equal(t, "t/fast", rep.ResultObject)
		requireResultAccepted(t, out, rep)
	})

	// Not parallel: it changes directory, to check the default --out.
	t.Run("reference SQL as commands passes", func(t *testing.T) {
		key := "t/fast/ft-cmd"
		table(t, pool, "ft_cmd", key, key+"-2")
		dir := t.TempDir()
		t.Chdir(dir) // the default --out is ./pausetest-<class>.yaml
		code, out, errOut := lockctl(t, config, "fence-test", "--class", "fast", "--key", key, "--schema-version", "7",
			"--write", psql(dsn, `UPDATE ft_cmd SET value = :'val', fence = :tok WHERE id = :'key' AND fence < :tok RETURNING 1;`, true),
			"--read", psql(dsn, `SELECT value FROM ft_cmd WHERE id = :'key';`, false))
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "outcome\tPASS\n", "piped: tab-separated fields")
		require.Contains(t, out, "resource\ttest-db, schema version \"7\": the owner's commands (--write, --read)\n")
		require.Contains(t, out, "stale-write\tok: holder A resumed and wrote")
		want := filepath.Join(dir, "pausetest-fast.yaml")
		require.Contains(t, errOut, "Wrote "+want)
		_, err := os.Stat(want)
		require.NoError(t, err)
	})

	broken := []struct {
		name, table string
		check       string // --check SQL, or ""
		write       string
		setup       string // more SQL
		message     []string
		failed      []string // steps that must fail; every other step but skipped ones is ok
	}{
		{
			name: "check then write", table: "ft_ctw",
			check:   `SELECT 1 FROM ft_ctw WHERE id = :'key' AND fence < :tok;`,
			write:   `UPDATE ft_ctw SET value = :'val', fence = :tok WHERE id = :'key' RETURNING 1;`,
			message: []string{"the resource accepted the paused holder's write with its old token %[1]d after holder B wrote with %[2]d: the fence does not compare tokens in the same statement as the write (--check passed before the pause"},
			failed:  []string{pausetest.StepStaleWrite, pausetest.StepReadBack},
		},
		{
			name: "less or equal", table: "ft_le",
			write:   `UPDATE ft_le SET value = :'val', fence = :tok WHERE id = :'key' AND fence <= :tok RETURNING 1;`,
			message: []string{"the resource accepted a second write with holder B's token %[2]d: the fence compares with <= instead of <"},
			failed:  []string{pausetest.StepReplay},
		},
		{
			name: "one fence per table", table: "ft_pt",
			setup: `CREATE TABLE ft_pt_fence (fence numeric(20,0) NOT NULL); INSERT INTO ft_pt_fence VALUES (0);`,
			write: `WITH f AS (UPDATE ft_pt_fence SET fence = :tok WHERE fence < :tok RETURNING 1)
UPDATE ft_pt SET value = :'val', fence = :tok FROM f WHERE id = :'key' RETURNING 1;`,
			message: []string{"the resource rejected holder C's write to its own record t/fast/ft-pt-2 with token %[3]d, older than holder B's %[2]d on another record: the fence is kept per table instead of per record, so holders of different keys fence each other out"},
			failed:  []string{pausetest.StepOtherRecord},
		},
	}
	for _, b := range broken {
		t.Run("broken fence fails: "+b.name, func(t *testing.T) {
			t.Parallel()
			key := "t/fast/" + strings.ReplaceAll(b.table, "_", "-")
			table(t, pool, b.table, key, key+"-2")
			if b.setup != "" {
				_, err := pool.Exec(t.Context(), b.setup)
				require.NoError(t, err)
			}
			args := []string{"--write", psql(dsn, b.write, true), "--read", psql(dsn, `SELECT value FROM `+b.table+` WHERE id = :'key';`, false)}
			if b.check != "" {
				args = append(args, "--check", psql(dsn, b.check, true))
			}
			out := filepath.Join(t.TempDir(), "result.yaml")
			code, rep, errOut := fenceTest(t, config, key, append(args, "--out", out)...)
			require.Equal(t, fencetest.ExitFailed, code, "%s\n%+v", rep.Message, rep.Steps)
			require.Equal(t, pausetest.OutcomeFail, rep.Outcome)
			for _, m := range b.message {
				require.Contains(t, rep.Message, fmt.Sprintf(m, rep.Tokens.A, rep.Tokens.B, rep.Tokens.C))
			}
			for name, st := range statuses(rep) {
				want := pausetest.StatusOK
				for _, f := range b.failed {
					if f == name {
						want = pausetest.StatusFailed
					}
				}
				require.Equal(t, want, st, "step %s", name)
			}
			require.Empty(t, rep.ResultFile)
			require.NoFileExists(t, out, "a failed run writes no result")
			require.Contains(t, errOut, "No result written")
		})
	}
}

// requireResultAccepted checks the result file against class.Parse and
// class-lint's fenced-pause-test rule, in a class repository where t/fast
// is fenced with resource test-db and schema version 7.
func requireResultAccepted(t *testing.T, path string, rep fencetest.ReportView) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	f := class.Parse("t/pausetest-fast.yaml", data, "t", time.Time{})
	require.Empty(t, f.Problems)
	require.Len(t, f.Objects, 1)
	pt := f.Objects[0].PauseTest
	require.NotNil(t, pt)
	require.Equal(t, "fast", pt.Class)
	require.Equal(t, "test-db", pt.Resource)
	require.Equal(t, "7", pt.ResourceSchemaVersion)
	require.Equal(t, ranAt, pt.RanAt)
	require.Equal(t, ranAt.Add(class.PauseTestValidity), pt.Expires)
	require.Equal(t, strconv.FormatUint(rep.Tokens.A, 10), pt.FirstToken)
	require.Equal(t, strconv.FormatUint(rep.Tokens.B, 10), pt.SecondToken)

	check := func(schema, now string) (int, string) {
		dir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "t"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "CODEOWNERS"), []byte(".*  @platform-team\nt/.*  @t-team\n"), 0o644))
		classes := `apiVersion: locks.lockd.dev/v1alpha1
kind: LockClass
metadata: {name: fast, namespace: t}
spec:
  keys: ["t/fast/"]
  purpose: correctness
  enforcement: fenced
  ttl: 5s
  tier: entity
  resource: test-db
  resourceSchemaVersion: "` + schema + `"
---
apiVersion: locks.lockd.dev/v1alpha1
kind: LockGrant
metadata: {name: alice, namespace: t}
spec:
  spiffeID: ` + lockdtest.Alice + `
  prefixes: ["t/"]
`
		require.NoError(t, os.WriteFile(filepath.Join(dir, "t", "classes.yaml"), []byte(classes), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "t", "pausetest-fast.yaml"), data, 0o644))
		var out, errOut bytes.Buffer
		code := classlint.Main([]string{"check", dir, "--now", now}, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	day := func(d int) string { return ranAt.AddDate(0, 0, d).Format(time.RFC3339) }

	code, out := check("7", day(1))
	require.Equal(t, classlint.ExitOK, code, out)

	code, out = check("7", day(366))
	require.Equal(t, classlint.ExitViolations, code, out)
	require.Contains(t, out, "fenced-pause-test")
	require.Contains(t, out, "expired on 2027-06-01")

	code, out = check("8", day(1))
	require.Equal(t, classlint.ExitViolations, code, out)
	require.Contains(t, out, "fenced-pause-test")
	require.Contains(t, out, `tested schema version "7" of test-db, the class says "8"`)
}

// TestFenceTestExitCodes: a test that cannot run exits with lockctl's
// usual codes, and says why on stderr.
func TestFenceTestExitCodes(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{})
	args := []string{"fence-test", "--class", "fast", "--key", "t/fast/x", "--write", "true", "--read", "true"}
	tests := []struct {
		name, addr, id string
		args           []string
		want           int
		msg            string
	}{
		{"no grant", env.Addr, lockdtest.Carol, args, cli.ExitNoPerm, "holder C cannot lock t/fast/x-2"},
		{"no such class", env.Addr, lockdtest.Alice, append(args[:2:2], "nope", "--key", "t/fast/x", "--write", "true", "--read", "true"), cli.ExitFailure, "pausetest: class t/nope"},
		{"lockd unreachable", lockdtest.FreeAddr(t), lockdtest.Alice, args, cli.ExitUnavailable, "unreachable"},
		{"usage", env.Addr, lockdtest.Alice, args[:5], cli.ExitUsage, "no resource"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := lockctl(t, lockctlConfigAt(t, tt.addr, tt.id), tt.args...)
			require.Equal(t, tt.want, code, "stdout %q stderr %q", out, errOut)
			require.Contains(t, errOut, tt.msg)
			require.Empty(t, out)
		})
	}
}
