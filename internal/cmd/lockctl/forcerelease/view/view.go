// Package view prints force-release requests for the lockctl force-release
// commands.
package view

import (
	"strconv"
	"time"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// Request is one force-release request.
type Request struct {
	ID             string    `json:"id"`
	Key            string    `json:"key"`
	Holder         string    `json:"holder"`
	SessionID      int64     `json:"session_id,string"`
	HoldRevision   int64     `json:"hold_revision"`
	HoldAcquiredAt time.Time `json:"hold_acquired_at"`
	Class          string    `json:"class"`
	Enforcement    string    `json:"enforcement"`
	Requester      string    `json:"requester"`
	Reason         string    `json:"reason"`
	RevokeSession  bool      `json:"revoke_session"`
	RequestedAt    time.Time `json:"requested_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	Approver       string    `json:"approver,omitempty"`
	RecordKey      string    `json:"record_key,omitempty"`
}

// New converts a ForceRelease.
func New(f *lockv1.ForceRelease) *Request {
	return &Request{ID: f.GetId(), Key: f.GetKey(), Holder: f.GetHolder(), SessionID: f.GetSessionId(),
		HoldRevision: f.GetHoldRevision(), HoldAcquiredAt: cmdutil.Time(f.GetHoldAcquiredAt()), Class: f.GetClass(),
		Enforcement: f.GetEnforcement(), Requester: f.GetRequester(), Reason: f.GetReason(),
		RevokeSession: f.GetRevokeSession(), RequestedAt: cmdutil.Time(f.GetRequestedAt()), ExpiresAt: cmdutil.Time(f.GetExpiresAt())}
}

// Enforcement styles the class's enforcement: advisory in red.
func Enforcement(e string) printer.Cell {
	c := printer.Cell{Text: e}
	if e != "fenced" {
		c.Style = printer.Red
	}
	return c
}

// Warning is what an operator must read before releasing a hold of a class
// whose resource does not check tokens; empty for a fenced class.
func Warning(enforcement string) string {
	if enforcement == "fenced" {
		return ""
	}
	return "WARNING: class enforcement is " + enforcement + ": the resource does not check fencing tokens. " +
		"If the holder is still running, releasing its lock may let two writers in at once."
}

// WriteTable implements printer.Tabular.
func (r *Request) WriteTable(t *printer.Table) {
	t.Field("Enforcement", Enforcement(r.Enforcement))
	t.Field("Request", printer.Cell{Text: r.ID})
	t.Field("Key", printer.Cell{Text: r.Key})
	t.Field("Class", printer.Cell{Text: r.Class})
	t.Field("Holder", printer.Cell{Text: r.Holder})
	t.Field("Session", printer.Cell{Text: strconv.FormatInt(r.SessionID, 10)})
	t.Field("Held since", printer.Cell{Text: t.Time(r.HoldAcquiredAt)})
	t.Field("Requester", printer.Cell{Text: r.Requester})
	t.Field("Reason", printer.Cell{Text: r.Reason})
	t.Field("Revoke session", printer.Cell{Text: cmdutil.YesNo(r.RevokeSession)})
	t.Field("Expires", printer.Cell{Text: t.Time(r.ExpiresAt)})
	if r.Approver != "" {
		t.Field("Approved by", printer.Cell{Text: r.Approver})
		t.Field("Record", printer.Cell{Text: r.RecordKey})
	}
}

// Notes implements printer.Noter: the advisory warning.
func (r *Request) Notes() []string {
	if w := Warning(r.Enforcement); w != "" {
		return []string{w}
	}
	return nil
}

// List is `lockctl force-release list`.
type List struct {
	Requests []*Request `json:"requests"`
}

// WriteTable implements printer.Tabular.
func (l *List) WriteTable(t *printer.Table) {
	t.Header("REQUEST", "KEY", "ENFORCEMENT", "HOLDER", "REQUESTER", "REASON", "EXPIRES")
	for _, r := range l.Requests {
		t.RowCells(printer.Cell{Text: r.ID}, printer.Cell{Text: r.Key}, Enforcement(r.Enforcement),
			printer.Cell{Text: r.Holder}, printer.Cell{Text: r.Requester}, printer.Cell{Text: r.Reason},
			printer.Cell{Text: t.Time(r.ExpiresAt)})
	}
	t.Empty("no pending force-release requests")
}
