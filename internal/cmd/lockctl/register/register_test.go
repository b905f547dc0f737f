package register

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/internal/golden"
	"github.com/lockd-dev/lockd/pkg/client"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func TestPrintRegister(t *testing.T) {
	class := func(ns, name, enf, owner string, exp time.Time) *lockv1.LockClass {
		return &lockv1.LockClass{Namespace: ns, Name: name, Purpose: "efficiency", Enforcement: enf, RiskOwner: owner, WaiverExpires: timestamppb.New(exp)}
	}
	v := NewView(golden.Now, &lockv1.ListClassesResponse{Classes: []*lockv1.LockClass{
		class("payments", "report-export", "advisory", "payments-team", golden.Now.Add(200*24*time.Hour)),
		class("search", "reindex", "advisory", "search-team", golden.Now.Add(10*24*time.Hour)),
		class("legacy", "cron", "advisory", "platform-team", golden.Now.Add(-3*24*time.Hour)),
		class("payments", "ledger-writes", "fenced", "", time.Time{}),
	}}, &lockv1.HistoryStatsResponse{Classes: []*lockv1.ClassHistory{{Namespace: "search", Class: "reindex", Grants: 1440}}})
	require.Len(t, v.Advisory, 3, "fenced classes are not in the register")
	require.Equal(t, -3, v.Advisory[2].DaysLeft)
	require.Equal(t, int64(1440), *v.Advisory[1].Grants24h)
	require.Equal(t, int64(0), *v.Advisory[0].Grants24h, "no grants in the history: 0, not unknown")
	golden.AssertPrinted(t, "register", v)
	golden.AssertPrinted(t, "register-no-history", NewView(golden.Now, &lockv1.ListClassesResponse{Classes: []*lockv1.LockClass{
		class("search", "reindex", "advisory", "search-team", golden.Now.Add(10*24*time.Hour))}}, nil))
}

// TestRegisterFromLockd: the register comes from lockd's loaded classes; a
// caller sees the namespaces it has grants in, an operator all of them.
func TestRegisterFromLockd(t *testing.T) {
	env := lockdtest.Start(t, lockdtest.Options{Audit: true})
	other := env.Client(t, "spiffe://test.local/other")
	l, err := other.Acquire(t.Context(), "other/cache/x", "cache", func(*client.Lock) {})
	require.NoError(t, err)
	require.NoError(t, l.Release(t.Context()))
	raw, _ := env.Raw(t, lockdtest.Operator)
	require.Eventually(t, func() bool {
		h, err := raw.HistoryStats(t.Context(), &lockv1.HistoryStatsRequest{})
		return err == nil && len(h.GetClasses()) == 1
	}, 10*time.Second, 50*time.Millisecond)
	run := func(id string) *View {
		ios, _, out, _ := iostreams.Test()
		f := &cmdutil.Factory{IOStreams: ios, Now: time.Now, Output: printer.FormatJSON}
		f.Client = func() (*client.Client, error) {
			return client.New(client.WithTarget(env.Addr), client.WithInsecureIdentity(id))
		}
		cmd := NewCmdRegister(f, nil)
		cmd.SetArgs(nil)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		require.NoError(t, cmd.ExecuteContext(t.Context()))
		var v View
		require.NoError(t, json.Unmarshal(out.Bytes(), &v))
		return &v
	}
	op := run(lockdtest.Operator)
	require.Len(t, op.Advisory, 2)
	one, none := int64(1), int64(0)
	require.Equal(t, Entry{Namespace: "other", Class: "cache", Purpose: "efficiency", RiskOwner: "other-team",
		WaiverExpires: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), DaysLeft: op.Advisory[0].DaysLeft, Grants24h: &one}, op.Advisory[0],
		"the grant counted from the audit history")
	// other/std declares fenced and names no resource, so no pause test can
	// prove it: it is served, and registered, as advisory, saying why. The
	// fenced classes of namespace t have current pause tests and are not.
	require.Equal(t, Entry{Namespace: "other", Class: "std", Purpose: "correctness", Grants24h: &none,
		Unproven: "a fenced class must name its spec.resource: the pause test proves that resource rejects stale tokens"}, op.Advisory[1])
	require.Empty(t, run(lockdtest.Alice).Advisory, "alice has no grant in namespace other")
}
