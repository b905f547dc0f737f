package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestExitCode(t *testing.T) {
	_, dialErr := net.Dial("tcp", closedAddr(t))
	require.Error(t, dialErr)
	_, httpErr := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + closedAddr(t))
	require.Error(t, httpErr)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, bindErr := net.Listen("tcp", l.Addr().String())
	require.Error(t, bindErr)

	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"plain", errors.New("boom"), ExitFailure},
		{"usage", Usagef("--x is required"), ExitUsage},
		{"wrapped usage", fmt.Errorf("check: %w", Usage(errors.New("bad"))), ExitUsage},
		{"exit error", &ExitError{Code: ExitLockLost}, ExitLockLost},
		{"exit wins over usage", Exit(ExitUnavailable, Usagef("x")), ExitUnavailable},
		{"deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), ExitTimeout},
		{"dial refused", fmt.Errorf("etcd: %w", dialErr), ExitUnavailable},
		{"http refused", fmt.Errorf("query: %w", httpErr), ExitUnavailable},
		{"dns", &net.DNSError{Err: "no such host", Name: "prometheus.invalid", IsNotFound: true}, ExitUnavailable},
		{"bind failed", fmt.Errorf("--listen: %w", bindErr), ExitFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, ExitCode(tt.err))
		})
	}
}

func TestPrintError(t *testing.T) {
	var w bytes.Buffer
	require.Equal(t, ExitUsage, Fail(&w, "lockd", "lockd dev-cert", Usagef("missing <spiffe-id>")))
	require.Equal(t, "lockd: missing <spiffe-id>\nRun 'lockd dev-cert --help' for usage.\n", w.String())

	w.Reset()
	require.Equal(t, ExitFailure, Fail(&w, "class-lint", "class-lint check", errors.New("boom")))
	require.Equal(t, "class-lint: boom\n", w.String(), "no help hint after a failure")

	w.Reset()
	require.Equal(t, 3, Fail(&w, "lockctl", "lockctl lock", &ExitError{Code: 3, Silent: true, Err: errors.New("x")}))
	require.Empty(t, w.String(), "a silent exit prints nothing")
	require.Equal(t, ExitLockLost, Fail(&w, "lockctl", "", &ExitError{Code: ExitLockLost}))
	require.Empty(t, w.String())
}

func TestExecuteUsageBeforeRun(t *testing.T) {
	newRoot := func(runErr error) *cobra.Command {
		root := &cobra.Command{Use: "x", SilenceErrors: true, SilenceUsage: true}
		sub := &cobra.Command{Use: "sub", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return runErr }}
		sub.Flags().String("need", "", "")
		_ = sub.MarkFlagRequired("need")
		root.AddCommand(sub)
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		return root
	}
	for _, args := range [][]string{{"nope"}, {"sub", "--bogus"}, {"sub"}, {"sub", "--need", "v", "extra"}} {
		root := newRoot(nil)
		root.SetArgs(args)
		_, err := Execute(context.Background(), root)
		require.Equal(t, ExitUsage, ExitCode(err), "%v: %v", args, err)
	}
	root := newRoot(errors.New("boom"))
	root.SetArgs([]string{"sub", "--need", "v"})
	_, err := Execute(context.Background(), root)
	require.Equal(t, ExitFailure, ExitCode(err), "an error from Run is not a usage error")
}
