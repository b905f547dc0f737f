// Package register is `lockctl register`: the advisory risk register.
package register

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lockd-dev/lockd/internal/cli/iostreams"
	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	"github.com/lockd-dev/lockd/internal/riskregister"
	"github.com/lockd-dev/lockd/pkg/client"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Options are `lockctl register`'s inputs.
type Options struct {
	IO      *iostreams.IOStreams
	Client  func() (*client.Client, error)
	Printer func() *printer.Printer
	Now     func() time.Time
	Timeout time.Duration

	Namespace string
}

// NewCmdRegister returns `lockctl register`.
func NewCmdRegister(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Client: f.Client, Printer: f.Printer, Now: f.Now, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "register [--namespace <ns>]",
		Short: "The advisory risk register: advisory classes, their risk owners and waivers",
		Long: cmdutil.Doc(`
			List the advisory classes lockd has loaded: classes whose resource does not
			check fencing tokens, so a paused or partitioned holder can overlap the
			next one. For each, it shows who owns that risk, when the waiver lapses and
			how many days are left. A waiver lapsing within 30 days shows in yellow; a
			lapsed one shows in red (the rule class-lint register and lockd apply).

			A class that declares fenced is listed too, as NOT FENCED, while no current
			pause-test result proves its resource rejects a stale holder's write: lockd
			serves it as advisory until one does, and a note says why.

			You see the namespaces you have grants in; operators see all of them.
		`),
		Example: cmdutil.Example(`
			$ lockctl register
			$ lockctl register --namespace payments -o json
		`),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return cmdutil.Call(cmd.Context(), opts.Client, opts.Timeout, func(ctx context.Context, c *client.Client) error {
				resp, err := c.LockService().ListClasses(ctx, &lockv1.ListClassesRequest{Namespace: opts.Namespace})
				if err != nil {
					return err
				}
				// Grants per class come from the audit history, when lockd
				// keeps one; the register stands without them.
				now := opts.Now()
				hist, err := c.LockService().HistoryStats(ctx, &lockv1.HistoryStatsRequest{Since: timestamppb.New(now.Add(-24 * time.Hour))})
				if err != nil {
					hist = nil
				}
				return opts.Printer().Print(NewView(now, resp, hist))
			})
		},
	}
	cmd.Flags().StringVar(&opts.Namespace, "namespace", "", "only this namespace")
	return cmd
}

// Entry is one advisory class.
type Entry struct {
	Namespace     string    `json:"namespace"`
	Class         string    `json:"class"`
	Purpose       string    `json:"purpose"`
	RiskOwner     string    `json:"risk_owner"`
	WaiverExpires time.Time `json:"waiver_expires"`
	DaysLeft      int       `json:"days_left"`
	// Grants24h counts the class's grants in the last 24 hours, from the
	// audit history; absent when lockd keeps none.
	Grants24h *int64 `json:"grants_24h,omitempty"`
	// Unproven, for a class that declares fenced and is served as advisory
	// because no current pause test proves it, says why; such a class has
	// no risk owner or waiver of its own.
	Unproven string `json:"unproven,omitempty"`
}

// View is the register.
type View struct {
	Advisory []Entry `json:"advisory"`

	now       time.Time // what DaysLeft and the table's colours count from
	noHistory bool
}

// NewView keeps the advisory classes of a ListClassesResponse, with their
// grants from hist (nil: lockd keeps no history).
func NewView(now time.Time, r *lockv1.ListClassesResponse, hist *lockv1.HistoryStatsResponse) *View {
	v := &View{Advisory: []Entry{}, now: now, noHistory: hist == nil}
	grants := map[string]int64{}
	for _, c := range hist.GetClasses() {
		grants[c.GetNamespace()+"/"+c.GetClass()] = c.GetGrants()
	}
	for _, c := range r.GetClasses() {
		if c.GetEnforcement() != "advisory" {
			continue
		}
		exp := cmdutil.Time(c.GetWaiverExpires())
		e := Entry{Namespace: c.GetNamespace(), Class: c.GetName(), Purpose: c.GetPurpose(),
			RiskOwner: c.GetRiskOwner(), WaiverExpires: exp, DaysLeft: riskregister.DaysLeft(exp, now)}
		if c.GetDeclaredEnforcement() == "fenced" {
			e.WaiverExpires, e.DaysLeft = time.Time{}, 0
			e.Unproven = c.GetFenceProof().GetMessage()
		}
		v.Advisory = append(v.Advisory, e)
		if hist != nil {
			n := grants[c.GetNamespace()+"/"+c.GetName()]
			v.Advisory[len(v.Advisory)-1].Grants24h = &n
		}
	}
	return v
}

// Notes implements printer.Noter.
func (v *View) Notes() []string {
	var n []string
	for _, e := range v.Advisory {
		if e.Unproven != "" {
			n = append(n, fmt.Sprintf("%s/%s declares fenced and is served as advisory: %s", e.Namespace, e.Class, e.Unproven))
		}
	}
	if v.noHistory && len(v.Advisory) > 0 {
		n = append(n, "GRANTS 24H comes from the audit history, which this lockd does not keep (--audit)")
	}
	return n
}

// WriteTable implements printer.Tabular.
func (v *View) WriteTable(t *printer.Table) {
	t.Header("NAMESPACE", "CLASS", "PURPOSE", "RISK OWNER", "WAIVER EXPIRES", "DAYS LEFT", "GRANTS 24H")
	for _, e := range v.Advisory {
		if e.Unproven != "" {
			t.RowCells(printer.Cell{Text: e.Namespace}, printer.Cell{Text: e.Class}, printer.Cell{Text: e.Purpose},
				printer.Cell{Text: "-"}, printer.Cell{Text: "NOT FENCED", Style: printer.Red}, printer.Cell{Text: "-", Style: printer.Red},
				printer.Cell{Text: grants24h(e.Grants24h)})
			continue
		}
		left := printer.Cell{Text: strconv.Itoa(e.DaysLeft)}
		switch riskregister.WaiverStatus(e.WaiverExpires, v.now) {
		case riskregister.StatusExpired:
			left.Style = printer.Red
		case riskregister.StatusExpiring:
			left.Style = printer.Yellow
		}
		t.RowCells(printer.Cell{Text: e.Namespace}, printer.Cell{Text: e.Class}, printer.Cell{Text: e.Purpose},
			printer.Cell{Text: e.RiskOwner}, printer.Cell{Text: e.WaiverExpires.Format("2006-01-02")}, left, printer.Cell{Text: grants24h(e.Grants24h)})
	}
	t.Empty("no advisory classes")
}

func grants24h(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}
