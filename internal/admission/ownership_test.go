package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/class"
)

// peerList serves the classes of each namespace; a namespace without an
// entry has none.
type peerList map[string][]*class.Class

func (p peerList) Classes(_ context.Context, ns string) ([]*class.Class, error) { return p[ns], nil }

// brokenPeers cannot read the classes, and counts the calls.
type brokenPeers struct{ calls *int }

func (b brokenPeers) Classes(context.Context, string) ([]*class.Class, error) {
	*b.calls++
	return nil, errors.New("open /classes/payments: no such file or directory")
}

// peer is a class of namespace payments as the class repository holds it.
func peer(name string, line int, keys []string, nestedIn ...string) *class.Class {
	return &class.Class{Namespace: "payments", Name: name, Tier: class.TierEntity, Keys: keys, NestedIn: nestedIn,
		Source: "payments/classes.yaml", Line: line}
}

// paymentsPeers: ledger-writes owns payments/ledger/, report-export
// payments/reports/.
var paymentsPeers = peerList{"payments": {
	peer("ledger-writes", 1, []string{"payments/ledger/"}),
	peer("report-export", 14, []string{"payments/reports/"}),
}}

// lockClass is a LockClass of namespace payments as the API server sends
// it: a fenced class owning keys, with spec fields added by extra (JSON
// members, such as `"ttl":"2s"`).
func lockClass(name string, keys []string, extra ...string) json.RawMessage {
	k, _ := json.Marshal(keys)
	spec := append([]string{`"keys":` + string(k), `"purpose":"correctness"`, `"enforcement":"fenced"`, `"tier":"entity"`,
		`"resource":"ledger-db"`}, extra...)
	return json.RawMessage(fmt.Sprintf(`{"apiVersion":"locks.lockd.dev/v1alpha1","kind":"LockClass",`+
		`"metadata":{"name":%q,"namespace":"payments","uid":"9b2d","resourceVersion":"7"},"spec":{%s}}`, name, strings.Join(spec, ",")))
}

func TestAdmissionKeyOwnership(t *testing.T) {
	classKind := GroupVersionKind{Group: Group, Version: "v1alpha1", Kind: class.KindLockClass}
	grantKind := GroupVersionKind{Group: Group, Version: "v1alpha1", Kind: class.KindLockGrant}
	grant := json.RawMessage(`{"apiVersion":"locks.lockd.dev/v1alpha1","kind":"LockGrant","metadata":{"name":"w","namespace":"payments"},` +
		`"spec":{"spiffeID":"spiffe://lockd.local/ns/payments/sa/w","prefixes":["payments/ledger/"]}}`)
	ledger := []string{"payments/ledger/"}
	var brokenCalls int
	for _, tc := range []struct {
		name      string
		peers     Peers // nil: a handler without peers
		operation Operation
		kind      GroupVersionKind
		object    json.RawMessage
		old       json.RawMessage
		allowed   bool
		message   string
		warnings  []string
		// brokenCalls is how many times brokenPeers must have been asked.
		brokenCalls int
	}{
		{name: "a prefix no class owns", peers: paymentsPeers, object: lockClass("refunds", []string{"payments/refunds/"}), allowed: true},
		{name: "two classes claiming one prefix", peers: paymentsPeers, object: lockClass("ledger-copy", ledger),
			message: `key-ownership: spec.keys[0]: "payments/ledger/" is also claimed by LockClass ledger-writes (payments/classes.yaml:1): ` +
				`a key has exactly one class; give the prefix to one of them`},
		{name: "nested without nestedIn", peers: paymentsPeers, object: lockClass("ledger-hot", []string{"payments/ledger/hot/"}),
			message: `key-ownership: spec.keys[0]: "payments/ledger/hot/" is inside "payments/ledger/", owned by LockClass ledger-writes (payments/classes.yaml:1): ` +
				`keys under it would move to this class from ledger-writes; if that is meant, say so with spec.nestedIn: [ledger-writes]`},
		{name: "nested with nestedIn", peers: paymentsPeers, object: lockClass("ledger-hot", []string{"payments/ledger/hot/"}, `"nestedIn":["ledger-writes"]`),
			allowed: true},
		{name: "an outer class over classes that do not name it", peers: paymentsPeers, object: lockClass("all", []string{"payments/"}),
			message: `key-ownership: spec.keys[0]: "payments/" contains "payments/ledger/", owned by LockClass ledger-writes (payments/classes.yaml:1): ` +
				`keys under "payments/ledger/" would stay with ledger-writes; if that is meant, say so with spec.nestedIn: [all] on ledger-writes; ` +
				`key-ownership: spec.keys[0]: "payments/" contains "payments/reports/", owned by LockClass report-export (payments/classes.yaml:14): ` +
				`keys under "payments/reports/" would stay with report-export; if that is meant, say so with spec.nestedIn: [all] on report-export`},
		{name: "an outer class the others name", peers: peerList{"payments": {
			peer("ledger-writes", 1, ledger, "all"), peer("report-export", 14, []string{"payments/reports/"}, "all"),
		}}, object: lockClass("all", []string{"payments/"}), allowed: true},
		{name: "nestedIn a class not there yet is a warning", peers: paymentsPeers, operation: OperationUpdate,
			object: lockClass("ledger-writes", ledger, `"nestedIn":["all"]`), old: lockClass("ledger-writes", ledger),
			allowed: true, warnings: []string{`key-ownership: spec.nestedIn[0]: names "all", which is not a LockClass of namespace payments`}},
		{name: "nestedIn a class it is not inside", peers: paymentsPeers, object: lockClass("refunds", []string{"payments/refunds/"}, `"nestedIn":["ledger-writes"]`),
			message: `key-ownership: spec.nestedIn[0]: names LockClass ledger-writes (payments/classes.yaml:1), but none of this class's spec.keys is inside one of its: remove it`},
		{name: "an update is not a clash with the object's own stored version", peers: paymentsPeers, operation: OperationUpdate,
			object: lockClass("ledger-writes", ledger, `"ttl":"30s"`), old: lockClass("ledger-writes", ledger), allowed: true},
		{name: "an update claiming another class's prefix", peers: paymentsPeers, operation: OperationUpdate,
			object: lockClass("ledger-writes", []string{"payments/ledger/", "payments/reports/"}), old: lockClass("ledger-writes", ledger),
			message: `key-ownership: spec.keys[1]: "payments/reports/" is also claimed by LockClass report-export (payments/classes.yaml:14): ` +
				`a key has exactly one class; give the prefix to one of them`},
		{name: "clashes among the other classes are not the object's", peers: peerList{"payments": {
			peer("a", 1, []string{"payments/x/"}), peer("b", 10, []string{"payments/x/"}),
		}}, object: lockClass("refunds", []string{"payments/refunds/"}), allowed: true},
		{name: "a class of another namespace is not a peer", peers: peerList{"payments": {
			{Namespace: "billing", Name: "ledger", Keys: []string{"payments/ledger/"}, Source: "billing/classes.yaml", Line: 1},
		}}, object: lockClass("ledger-writes", ledger), allowed: true},
		{name: "a per-object problem and a clash are both said", peers: paymentsPeers, object: lockClass("ledger-copy", ledger, `"ttl":"2s"`),
			message: `ttl-range: spec.ttl: must be between 5s and 300s, got 2s; key-ownership: spec.keys[0]: "payments/ledger/" is also claimed by ` +
				`LockClass ledger-writes (payments/classes.yaml:1): a key has exactly one class; give the prefix to one of them`},
		{name: "peers that cannot be read deny", peers: brokenPeers{&brokenCalls}, object: lockClass("refunds", []string{"payments/refunds/"}),
			message: "key-ownership: spec.keys: cannot read the other LockClasses of namespace payments to check that no other class owns these keys: " +
				"open /classes/payments: no such file or directory (the webhook fails closed; try again once they can be read)",
			brokenCalls: 1},
		{name: "an update of metadata only claims nothing new: peers are not asked", peers: brokenPeers{&brokenCalls}, operation: OperationUpdate,
			object: lockClass("ledger-writes", ledger), old: lockClass("ledger-writes", ledger), allowed: true},
		{name: "a grant does not ask the peers", peers: brokenPeers{&brokenCalls}, kind: grantKind, object: grant, allowed: true},
		{name: "without peers a class is admitted with a warning", object: lockClass("ledger-copy", ledger), allowed: true,
			warnings: []string{WarningOwnershipNotChecked}},
		{name: "without peers a grant has no warning", kind: grantKind, object: grant, allowed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokenCalls = 0
			var opts []Option
			if tc.peers != nil {
				opts = append(opts, WithPeers(tc.peers))
			}
			h := NewHandler(func() time.Time { return testNow }, nil, opts...)
			req := Request{UID: "u", Operation: tc.operation, Kind: tc.kind, Namespace: "payments", Object: tc.object, OldObject: tc.old}
			if req.Operation == "" {
				req.Operation = OperationCreate
			}
			if req.Kind == (GroupVersionKind{}) {
				req.Kind = classKind
			}
			resp := h.Validate(t.Context(), &req)
			require.Equal(t, tc.brokenCalls, brokenCalls, "calls to the peers that cannot be read")
			require.Equal(t, tc.warnings, resp.Warnings)
			if tc.allowed {
				require.True(t, resp.Allowed, "%+v", resp.Result)
				require.Nil(t, resp.Result)
				return
			}
			require.False(t, resp.Allowed)
			require.Equal(t, tc.message, resp.Result.Message)
		})
	}
}
