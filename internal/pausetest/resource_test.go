package pausetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/pkg/fence"
)

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"url", Spec{URL: "postgres://x/y?table=t"}, ""},
		{"commands", Spec{Write: "true", Read: "echo"}, ""},
		{"commands with check", Spec{Write: "true", Read: "echo", Check: "true"}, ""},
		{"nothing", Spec{}, "no resource"},
		{"both", Spec{URL: "s3://b", Write: "true", Read: "echo"}, "not both"},
		{"check alone", Spec{Check: "true"}, "no resource"},
		{"write alone", Spec{Write: "true"}, "needs a read command"},
		{"read alone", Spec{Read: "echo"}, "needs a write command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
			require.True(t, strings.HasPrefix(err.Error(), "pausetest: "), err.Error())
		})
	}
}

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvHolder, "1") // must not reach the owner's commands
	t.Setenv(EnvToken, "inherited")
	c := &Commands{
		WriteCmd: `echo "$LOCK_KEY $LOCK_TOKEN $FENCE_TEST_VALUE ${` + EnvHolder + `:-unset}" > ` + dir + `/env; [ "$FENCE_TEST_VALUE" != bad ] || { echo "fence $LOCK_TOKEN refused" >&2; exit 1; }`,
		ReadCmd:  `[ "$LOCK_KEY" != missing ] || { echo no such record >&2; exit 4; }; printf '  %s\n\n' "$(cat ` + dir + `/env)"`,
		CheckCmd: `[ "$LOCK_TOKEN" != 13 ] || { echo "check refused" >&2; exit 1; }`,
	}
	ctx := t.Context()

	w, err := c.Prepare(ctx, "t/k", 12)
	require.NoError(t, err)
	require.NoError(t, w(ctx, "v1"), "exit 0: accepted")
	got, err := c.Read(ctx, "t/k")
	require.NoError(t, err)
	require.Equal(t, "t/k 12 v1 unset", got, "read output is trimmed; the kit's variables are replaced")

	err = w(ctx, "bad")
	require.ErrorIs(t, err, fence.ErrStale, "a non-zero exit is a rejection")
	require.ErrorContains(t, err, "write command exited 1 (stderr: fence 12 refused)")

	_, err = c.Prepare(ctx, "t/k", 13)
	require.ErrorIs(t, err, fence.ErrStale, "a refusing check is a rejection")
	require.ErrorContains(t, err, "check command exited 1 (stderr: check refused)")

	_, err = c.Read(ctx, "missing")
	require.Error(t, err)
	require.NotErrorIs(t, err, fence.ErrStale, "a failed read is not a rejection")
	require.ErrorContains(t, err, "pausetest: read command exited 4 (stderr: no such record)")

	require.Equal(t, "the owner's commands (--check, --write, --read)", c.Describe())
	require.NotContains(t, c.Describe(), dir, "commands may hold credentials: Describe does not show them")
}

func TestStderrTail(t *testing.T) {
	require.Equal(t, "a b c", stderrTail([]byte("  a\n b\t c \n")))
	long := strings.Repeat("x", stderrLimit+10) + "END"
	tail := stderrTail([]byte(long))
	require.True(t, strings.HasPrefix(tail, "…"))
	require.True(t, strings.HasSuffix(tail, "END"))
	require.Len(t, tail, len("…")+stderrLimit)
}

// fileFence returns commands implementing a fence in files under dir: a
// record is <dir>/<key with / as _>.value and .fence, written under flock.
// correct selects the reference rule; otherwise the check is a separate
// command and the write is unconditional (check then write).
func fileFence(t *testing.T, correct bool) Spec {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".keep"), nil, 0o644))
	rec := `f="` + dir + `/$(printf %s "$LOCK_KEY" | tr / _)"; `
	compare := `cur=$(cat "$f.fence" 2>/dev/null || echo 0); [ "$cur" -lt "$LOCK_TOKEN" ] || { echo "stale: fence $cur" >&2; exit 1; }; `
	store := `printf %s "$FENCE_TEST_VALUE" > "$f.value"; echo "$LOCK_TOKEN" > "$f.fence"`
	read := rec + `cat "$f.value" 2>/dev/null || true`
	if correct {
		return Spec{Write: rec + `exec 9>"$f.lock"; flock 9; ` + compare + store, Read: read}
	}
	return Spec{Check: rec + compare, Write: rec + store, Read: read}
}
