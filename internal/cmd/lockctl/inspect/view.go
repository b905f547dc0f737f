package inspect

import (
	"fmt"
	"strconv"
	"time"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TokenView is a fencing token. Value is a decimal string in json and
// yaml: it does not fit a JSON number.
type TokenView struct {
	Value    uint64 `json:"value,string"`
	Epoch    uint32 `json:"epoch"`
	Revision int64  `json:"revision"`
}

// HoldView is one hold.
type HoldView struct {
	Key        string     `json:"key"`
	Holder     string     `json:"holder"`
	SessionID  int64      `json:"session_id,string"`
	Class      string     `json:"class"`
	AcquiredAt time.Time  `json:"acquired_at"`
	AgeSeconds float64    `json:"age_seconds"`
	Waiters    int32      `json:"waiters"`
	Token      *TokenView `json:"token,omitempty"`
}

// KeyView is `lockctl inspect <key>`.
type KeyView struct {
	Key     string    `json:"key"`
	Held    bool      `json:"held"`
	Waiters int32     `json:"waiters"`
	Hold    *HoldView `json:"hold,omitempty"`
}

// HoldsView is `lockctl inspect <prefix/>`.
type HoldsView struct {
	Prefix    string     `json:"prefix"`
	Holds     []HoldView `json:"holds"`
	Truncated bool       `json:"truncated"`
}

func holdView(h *lockv1.Hold) HoldView {
	v := HoldView{
		Key: h.GetKey(), Holder: h.GetHolder(), SessionID: h.GetSessionId(), Class: h.GetClass(),
		AcquiredAt: cmdutil.Time(h.GetAcquiredAt()), AgeSeconds: cmdutil.Seconds(h.GetAge()), Waiters: h.GetWaiters(),
	}
	if t := h.GetToken(); t != nil {
		v.Token = &TokenView{Value: t.GetValue(), Epoch: t.GetEpoch(), Revision: t.GetRevision()}
	}
	return v
}

// NewKeyView converts an InspectResponse.
func NewKeyView(key string, r *lockv1.InspectResponse) *KeyView {
	v := &KeyView{Key: key, Held: r.GetHeld(), Waiters: r.GetWaiters()}
	if r.GetHeld() && r.GetHold() != nil {
		h := holdView(r.GetHold())
		v.Hold = &h
	}
	return v
}

// NewHoldsView converts a ListHoldsResponse.
func NewHoldsView(prefix string, r *lockv1.ListHoldsResponse) *HoldsView {
	v := &HoldsView{Prefix: prefix, Holds: []HoldView{}, Truncated: r.GetTruncated()}
	for _, h := range r.GetHolds() {
		v.Holds = append(v.Holds, holdView(h))
	}
	return v
}

func (t *TokenView) String() string {
	return fmt.Sprintf("%d (epoch %d, revision %d)", t.Value, t.Epoch, t.Revision)
}

// WriteTable implements printer.Tabular.
func (v *KeyView) WriteTable(t *printer.Table) {
	t.Field("Key", printer.Cell{Text: v.Key})
	held := printer.Cell{Text: cmdutil.YesNo(v.Held)}
	if v.Held {
		held.Style = printer.Yellow
	} else {
		held.Style = printer.Green
	}
	t.Field("Held", held)
	if h := v.Hold; h != nil {
		t.Field("Holder", printer.Cell{Text: h.Holder})
		t.Field("Session", printer.Cell{Text: strconv.FormatInt(h.SessionID, 10)})
		t.Field("Class", printer.Cell{Text: h.Class})
		t.Field("Acquired", printer.Cell{Text: t.Time(h.AcquiredAt)})
		t.Field("Age", printer.Cell{Text: t.Duration(cmdutil.Duration(h.AgeSeconds))})
		if h.Token != nil {
			t.Field("Token", printer.Cell{Text: h.Token.String()})
		}
	}
	t.Field("Waiters", printer.Cell{Text: strconv.Itoa(int(v.Waiters))})
}

// WriteTable implements printer.Tabular.
func (v *HoldsView) WriteTable(t *printer.Table) {
	tokens := false
	for _, h := range v.Holds {
		tokens = tokens || h.Token != nil
	}
	header := []string{"KEY", "HOLDER", "SESSION", "CLASS", "ACQUIRED", "AGE", "WAITERS"}
	if tokens {
		header = append(header, "TOKEN")
	}
	t.Header(header...)
	for _, h := range v.Holds {
		row := []string{h.Key, h.Holder, strconv.FormatInt(h.SessionID, 10), h.Class,
			t.Time(h.AcquiredAt), t.Duration(cmdutil.Duration(h.AgeSeconds)), strconv.Itoa(int(h.Waiters))}
		if tokens {
			tok := ""
			if h.Token != nil {
				tok = strconv.FormatUint(h.Token.Value, 10)
			}
			row = append(row, tok)
		}
		t.Row(row...)
	}
	t.Empty("no holds under " + v.Prefix)
}

// Notes implements printer.Noter.
func (v *HoldsView) Notes() []string {
	if v.Truncated {
		return []string{fmt.Sprintf("only the first %d holds under %s are shown: raise --limit", len(v.Holds), v.Prefix)}
	}
	return nil
}
