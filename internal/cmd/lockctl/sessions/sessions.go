// Package sessions is `lockctl sessions`: the caller's sessions, or every
// session for an operator.
package sessions

import (
	"context"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl sessions`' inputs.
type Options struct {
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Timeout time.Duration
}

// NewCmdSessions returns `lockctl sessions`.
func NewCmdSessions(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{Client: f.Client, Printer: f.Printer, Timeout: 10 * time.Second}
	return &cobra.Command{
		Use:   "sessions",
		Short: "List lock sessions",
		Long: cmdutil.Doc(`
			List sessions: each is one etcd lease that the holds on it share. You see
			your own identity's sessions; an operator identity sees all of them.

			LAST KEEPALIVE is the last one the answering lockd saw ("-" when it saw
			none: the client may be talking to another lockd). REMAINING is the TTL
			left now; a session at zero is about to expire with all its holds.
		`),
		Example: cmdutil.Example(`
			$ lockctl sessions

			# Sessions with holds, for a script
			$ lockctl sessions -o json | jq '.sessions[] | select(.holds > 0)'
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return sessionsRun(cmd.Context(), opts)
		},
	}
}

func sessionsRun(ctx context.Context, opts *Options) error {
	return cmdutil.Call(ctx, opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
		resp, err := c.LockService().ListSessions(ctx, &lockv1.ListSessionsRequest{})
		if err != nil {
			return err
		}
		return opts.Printer().Print(NewView(resp))
	})
}

// SessionView is one session.
type SessionView struct {
	SessionID        int64      `json:"session_id,string"`
	Identity         string     `json:"identity"`
	TTLSeconds       float64    `json:"ttl_seconds"`
	Holds            int32      `json:"holds"`
	OpenedAt         time.Time  `json:"opened_at"`
	LastKeepalive    *time.Time `json:"last_keepalive,omitempty"`
	RemainingSeconds float64    `json:"remaining_seconds"`
}

// View is `lockctl sessions`.
type View struct {
	Sessions []SessionView `json:"sessions"`
}

// NewView converts a ListSessionsResponse.
func NewView(r *lockv1.ListSessionsResponse) *View {
	v := &View{Sessions: []SessionView{}}
	for _, s := range r.GetSessions() {
		v.Sessions = append(v.Sessions, SessionView{
			SessionID: s.GetSessionId(), Identity: s.GetIdentity(), TTLSeconds: cmdutil.Seconds(s.GetTtl()),
			Holds: s.GetHolds(), OpenedAt: cmdutil.Time(s.GetOpenedAt()), LastKeepalive: cmdutil.TimePtr(s.GetLastKeepalive()),
			RemainingSeconds: cmdutil.Seconds(s.GetRemaining()),
		})
	}
	return v
}

// WriteTable implements printer.Tabular.
func (v *View) WriteTable(t *printer.Table) {
	t.Header("SESSION", "IDENTITY", "TTL", "HOLDS", "OPENED", "LAST KEEPALIVE", "REMAINING")
	for _, s := range v.Sessions {
		var last time.Time
		if s.LastKeepalive != nil {
			last = *s.LastKeepalive
		}
		remaining := printer.Cell{Text: t.Duration(cmdutil.Duration(s.RemainingSeconds))}
		if s.RemainingSeconds < s.TTLSeconds/3 {
			remaining.Style = printer.Red
		}
		t.RowCells(
			printer.Cell{Text: strconv.FormatInt(s.SessionID, 10)},
			printer.Cell{Text: s.Identity},
			printer.Cell{Text: t.Duration(cmdutil.Duration(s.TTLSeconds))},
			printer.Cell{Text: strconv.Itoa(int(s.Holds))},
			printer.Cell{Text: t.Time(s.OpenedAt)},
			printer.Cell{Text: t.Time(last)},
			remaining,
		)
	}
	t.Empty("no sessions")
}
