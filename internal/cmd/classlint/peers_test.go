package classlint

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDirPeers: the webhook's view of the class repository is read again
// once it is maxAge old, a read that fails is not kept, and each class is
// named by its file in the repository.
func TestDirPeers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "classes")
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := &dirPeers{dir: dir, maxAge: 2 * time.Second, now: func() time.Time { return clock }}
	names := func(ns string) []string {
		t.Helper()
		cs, err := p.Classes(t.Context(), ns)
		require.NoError(t, err)
		var out []string
		for _, c := range cs {
			out = append(out, c.Source+" "+c.Name)
		}
		return out
	}

	_, err := p.Classes(t.Context(), "payments")
	require.ErrorContains(t, err, "--classes "+dir, "a directory not synced yet")

	require.NoError(t, os.CopyFS(dir, os.DirFS(webhookPeers)))
	require.Equal(t, []string{"payments/classes.yaml ledger-writes", "payments/classes.yaml report-export"}, names("payments"),
		"a failed read is not kept: the next one reads the directory")
	require.Empty(t, names("billing"))

	refunds := "apiVersion: locks.lockd.dev/v1alpha1\nkind: LockClass\nmetadata: {name: refunds, namespace: payments}\n" +
		"spec: {keys: [payments/refunds/], purpose: correctness, enforcement: fenced, tier: entity, resource: refunds-db}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "payments", "refunds.yaml"), []byte(refunds), 0o644))
	clock = clock.Add(time.Second)
	require.Len(t, names("payments"), 2, "read less than maxAge ago: not read again")
	clock = clock.Add(time.Second)
	require.Equal(t, []string{"payments/classes.yaml ledger-writes", "payments/classes.yaml report-export", "payments/refunds.yaml refunds"},
		names("payments"))

	require.NoError(t, os.RemoveAll(dir))
	clock = clock.Add(2 * time.Second)
	_, err = p.Classes(t.Context(), "payments")
	require.ErrorContains(t, err, "no such file or directory", "a checkout gone is an error, not the last read")
}
