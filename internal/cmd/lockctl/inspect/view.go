package inspect

import (
	"fmt"
	"strconv"
	"time"

	"github.com/lockd-dev/lockd/internal/cli/printer"
	"github.com/lockd-dev/lockd/internal/cmd/lockctl/cmdutil"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TokenView is a fencing token (cmdutil.TokenView).
type TokenView = cmdutil.TokenView

// HoldView is one hold.
type HoldView struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	SessionID int64  `json:"session_id,string"`
	// HomeSessionID is the session the holder opened, when SessionID is
	// its lease on a cluster other than the coord cluster's: what
	// `force-release --revoke-session` ends, on every cluster. Only
	// `inspect <key>` has it.
	HomeSessionID int64 `json:"home_session_id,string,omitempty"`
	// SessionTTLLeftSeconds is how long the holder's session has left by
	// the store's clock (0: its lease is gone). Only `inspect <key>` has it.
	SessionTTLLeftSeconds *float64   `json:"session_ttl_left_seconds,omitempty"`
	Class                 string     `json:"class"`
	AcquiredAt            time.Time  `json:"acquired_at"`
	AgeSeconds            float64    `json:"age_seconds"`
	Waiters               int32      `json:"waiters"`
	Token                 *TokenView `json:"token,omitempty"`
}

// WaiterView is one waiter in line for the key: in its durable line, or on
// the answering lockd.
type WaiterView struct {
	// Position is its place in line: 1 is next.
	Position      int32   `json:"position"`
	Identity      string  `json:"identity"`
	SessionID     int64   `json:"session_id,string"`
	WaitedSeconds float64 `json:"waited_seconds"`
	// Durable: in the key's durable line (kept in etcd, served by any lockd).
	Durable bool `json:"durable"`
}

// KeyView is `lockctl inspect <key>`.
type KeyView struct {
	Key string `json:"key"`
	// Class is the key's class now ("namespace/name"), held or not: the
	// class its next grant is made under. Empty when no class owns the key.
	// A hold keeps the class it was granted under (hold.class).
	Class string `json:"class"`
	// Tier is the tier of Class, and Cluster the etcd cluster its tier is
	// served by: where the key was read (empty from an older lockd).
	Tier    string `json:"tier,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	// Range and ShardMapVersion: for an entity tier split across shards,
	// the key's range and the shard map version that homed it to Cluster.
	Range           string    `json:"range,omitempty"`
	ShardMapVersion int64     `json:"shardMapVersion,omitempty"`
	Held            bool      `json:"held"`
	Waiters         int32     `json:"waiters"`
	Hold            *HoldView `json:"hold,omitempty"`
	// Queue are the waiters in the order they will be granted; absent when
	// nobody waits.
	Queue []WaiterView `json:"queue,omitempty"`
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
		HomeSessionID: h.GetHomeSessionId(),
	}
	if d := h.GetSessionTtlLeft(); d != nil {
		s := cmdutil.Seconds(d)
		v.SessionTTLLeftSeconds = &s
	}
	v.Token = cmdutil.NewTokenView(h.GetToken())
	return v
}

// NewKeyView converts an InspectResponse.
func NewKeyView(key string, r *lockv1.InspectResponse) *KeyView {
	v := &KeyView{Key: key, Class: r.GetClass(), Tier: r.GetTier(), Cluster: r.GetCluster(), Range: r.GetRange(), ShardMapVersion: r.GetShardMapVersion(), Held: r.GetHeld(), Waiters: r.GetWaiters()}
	if r.GetHeld() && r.GetHold() != nil {
		h := holdView(r.GetHold())
		v.Hold = &h
	}
	for _, w := range r.GetQueue() {
		v.Queue = append(v.Queue, WaiterView{
			Position: w.GetPosition(), Identity: w.GetIdentity(), SessionID: w.GetSessionId(), WaitedSeconds: cmdutil.Seconds(w.GetWaited()),
			Durable: w.GetDurable(),
		})
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

// WriteTable implements printer.Tabular.
func (v *KeyView) WriteTable(t *printer.Table) {
	t.Field("Key", printer.Cell{Text: v.Key})
	if v.Class != "" {
		t.Field("Class", printer.Cell{Text: v.Class})
	} else {
		t.Field("Class", printer.Cell{Text: "none: no class owns this key, so it cannot be locked", Style: printer.Red})
	}
	if v.Tier != "" {
		t.Field("Tier", printer.Cell{Text: v.Tier})
	}
	if v.Cluster != "" {
		t.Field("Cluster", printer.Cell{Text: v.Cluster})
	}
	if v.Range != "" {
		t.Field("Shard", printer.Cell{Text: fmt.Sprintf("range %s, homed by shard map version %d", v.Range, v.ShardMapVersion)})
	}
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
		if h.HomeSessionID != 0 {
			// Session is the lease standing for it on this cluster.
			t.Field("Home session", printer.Cell{Text: strconv.FormatInt(h.HomeSessionID, 10)})
		}
		if h.SessionTTLLeftSeconds != nil {
			t.Field("Session TTL left", printer.Cell{Text: t.Duration(cmdutil.Duration(*h.SessionTTLLeftSeconds))})
		}
		if h.Class != v.Class {
			// A class change moved the key; the hold keeps its class.
			t.Field("Granted under", printer.Cell{Text: h.Class, Style: printer.Yellow})
		}
		t.Field("Acquired", printer.Cell{Text: t.Time(h.AcquiredAt)})
		t.Field("Age", printer.Cell{Text: t.Duration(cmdutil.Duration(h.AgeSeconds))})
		if h.Token != nil {
			t.Field("Token", printer.Cell{Text: h.Token.String()})
		}
	}
	t.Field("Waiters", printer.Cell{Text: strconv.Itoa(int(v.Waiters))})
	// One line per waiter, in grant order: "Queue 1:  identity  session N
	// waited D  durable" on a terminal; "queue_1<TAB>identity<TAB>N<TAB>D
	// <TAB>durable|memory" piped.
	for _, w := range v.Queue {
		session, waited := strconv.FormatInt(w.SessionID, 10), t.Duration(cmdutil.Duration(w.WaitedSeconds))
		cells := []printer.Cell{{Text: "Queue " + strconv.Itoa(int(w.Position))}, {Text: w.Identity}}
		switch {
		case !t.IsTTY() && w.Durable:
			cells = append(cells, printer.Cell{Text: session}, printer.Cell{Text: waited}, printer.Cell{Text: "durable"})
		case !t.IsTTY():
			cells = append(cells, printer.Cell{Text: session}, printer.Cell{Text: waited}, printer.Cell{Text: "memory"})
		case w.Durable:
			cells = append(cells, printer.Cell{Text: "session " + session}, printer.Cell{Text: "waited " + waited}, printer.Cell{Text: "durable"})
		default: // the usual kind says nothing more on a terminal
			cells = append(cells, printer.Cell{Text: "session " + session}, printer.Cell{Text: "waited " + waited})
		}
		t.RowCells(cells...)
	}
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
