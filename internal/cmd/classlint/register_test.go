package classlint

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/audit"
	"github.com/lockd-dev/lockd/internal/audit/clickhouse"
	"github.com/lockd-dev/lockd/internal/riskregister"
	"github.com/lockd-dev/lockd/internal/testserver"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
)

// registerClasses has advisory classes that are missing a waiver, lapsed,
// expiring and ok; internal/riskregister's golden files show them in full.
const registerClasses = "../../riskregister/testdata/classes"

func TestRegisterFormats(t *testing.T) {
	now := "--now=2026-03-01T12:00:00Z"
	tests := []struct {
		format string
		check  func(t *testing.T, out, errOut string)
	}{
		{"table", func(t *testing.T, out, _ string) {
			require.Contains(t, out, "NAMESPACE  CLASS")
			require.NotContains(t, out, "GRANTS 24H", "no --prometheus, no grants column")
			require.Contains(t, out, "legacy     cron           platform-team                    2026-02-26      -4         expired")
		}},
		{"markdown", func(t *testing.T, out, _ string) {
			require.True(t, strings.HasPrefix(out, "### Advisory risk register\n"), out)
			require.Contains(t, out, "| legacy | cron | platform-team | 2026-02-26 | -4 | **expired** |")
		}},
		{"csv", func(t *testing.T, out, errOut string) {
			require.True(t, strings.HasPrefix(out, "namespace,class,risk_owner,waiver_expires,days_left,status\nlegacy,sweeper,"), out)
			require.Contains(t, errOut, "class-lint register: ", "the notes go to stderr")
		}},
		{"json", func(t *testing.T, out, _ string) {
			var reg riskregister.Register
			require.NoError(t, json.Unmarshal([]byte(out), &reg))
			require.Len(t, reg.Rows, 6)
			require.Equal(t, riskregister.StatusMissing, reg.Rows[0].Status)
			require.Nil(t, reg.Rows[0].Grants24h)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main([]string{"register", registerClasses, now, "-o", tt.format}, &out, &errOut)
			require.Equal(t, ExitOK, code, "stderr: %s", errOut.String())
			tt.check(t, out.String(), errOut.String())
		})
	}
}

func TestRegisterUnreachablePrometheus(t *testing.T) {
	down := "http://" + lockdtest.FreeAddr(t)
	var out, errOut bytes.Buffer
	code := Main([]string{"register", registerClasses, "--prometheus", down}, &out, &errOut)
	require.Equal(t, ExitUnavailable, code, "stdout %q stderr %q", out.String(), errOut.String())
	require.Contains(t, errOut.String(), "query Prometheus at "+down)
	require.Empty(t, out.String())
}

func TestRegisterUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad output", []string{"register", registerClasses, "-o", "yaml"}, "-o must be table, markdown, csv or json"},
		{"bad --now", []string{"register", registerClasses, "--now", "2026-03-01"}, `"--now" flag: must be an RFC 3339 time`},
		{"no such directory", []string{"register", "testdata/does-not-exist"}, "does-not-exist"},
		{"too many args", []string{"register", "a", "b"}, "accepts at most 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(tt.args, &out, &errOut)
			require.Equal(t, ExitUsage, code, "stdout %q stderr %q", out.String(), errOut.String())
			require.Contains(t, errOut.String(), tt.want)
		})
	}
}

// TestRegisterGrantsFromTheHistory counts grants from a real ClickHouse
// audit history: the last 24 hours before --now, per class.
func TestRegisterGrantsFromTheHistory(t *testing.T) {
	url := testserver.StartClickHouse(t)
	sink, err := clickhouse.Open(t.Context(), url)
	require.NoError(t, err)
	defer sink.Close()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var rows []audit.Event
	for i := range 5 {
		rows = append(rows, audit.Event{ClusterID: 1, Epoch: 1, Revision: int64(10 + i), Key: "legacy/cron/x", Kind: audit.KindGrant,
			Class: "legacy/cron", ObservedAt: now.Add(-time.Duration(i+1) * time.Hour)})
	}
	rows = append(rows, audit.Event{ClusterID: 1, Epoch: 1, Revision: 9, Key: "legacy/cron/x", Kind: audit.KindGrant,
		Class: "legacy/cron", ObservedAt: now.Add(-30 * time.Hour)}) // before the window
	require.NoError(t, sink.Write(t.Context(), rows))

	var out, errOut bytes.Buffer
	code := Main([]string{"register", registerClasses, "--now=2026-03-01T12:00:00Z", "--history-clickhouse", url, "-o", "json"}, &out, &errOut)
	require.Equal(t, ExitOK, code, "stderr: %s", errOut.String())
	var reg riskregister.Register
	require.NoError(t, json.Unmarshal(out.Bytes(), &reg))
	found := false
	for _, r := range reg.Rows {
		require.NotNil(t, r.Grants24h, "every class has a count once the history is read: %s/%s", r.Namespace, r.Class)
		if r.Namespace == "legacy" && r.Class == "cron" {
			found = true
			require.EqualValues(t, 5, *r.Grants24h)
		}
	}
	require.True(t, found)

	down := "clickhouse://" + lockdtest.FreeAddr(t) + "/lockd_audit"
	out.Reset()
	errOut.Reset()
	code = Main([]string{"register", registerClasses, "--history-clickhouse", down}, &out, &errOut)
	require.Equal(t, ExitUnavailable, code, "stdout %q stderr %q", out.String(), errOut.String())
	require.Empty(t, out.String())
}
