package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/class"
)

// regionPeers is paymentsPeers plus the repository's LockNamespaces and the
// namespaces with classes.
type regionPeers struct {
	peerList
	homes       []class.Home
	withClasses []string
}

func (p regionPeers) Homes(context.Context) ([]class.Home, []string, error) {
	return p.homes, p.withClasses, nil
}

func lockNamespace(name, region string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"apiVersion":"locks.lockd.dev/v1alpha1","kind":"LockNamespace",`+
		`"metadata":{"name":%q,"namespace":"payments"},"spec":{"region":%q}}`, name, region))
}

func TestAdmissionNamespaceRegion(t *testing.T) {
	nsKind := GroupVersionKind{Group: Group, Version: "v1alpha1", Kind: class.KindLockNamespace}
	classKind := GroupVersionKind{Group: Group, Version: "v1alpha1", Kind: class.KindLockClass}
	home := func(ns, name, region string) class.Home { return class.Home{Namespace: ns, Name: name, Region: region} }
	billingEU := home("billing", "home", "eu-west")
	for _, tc := range []struct {
		name    string
		peers   Peers
		kind    GroupVersionKind
		object  json.RawMessage
		message string // "" admits
	}{
		{name: "the first region", peers: regionPeers{paymentsPeers, nil, []string{"payments", "billing"}},
			kind: nsKind, object: lockNamespace("home", "eu-west")},
		{name: "a second region once every namespace with classes is homed", peers: regionPeers{paymentsPeers, []class.Home{billingEU}, []string{"payments", "billing"}},
			kind: nsKind, object: lockNamespace("home", "us-east")},
		{name: "a second region while a namespace with classes has no home", peers: regionPeers{paymentsPeers, []class.Home{billingEU}, []string{"payments", "billing", "search"}},
			kind: nsKind, object: lockNamespace("home", "us-east"),
			message: "namespace-region: spec.region: with this, namespaces are homed to eu-west, us-east, and then every namespace with classes needs a LockNamespace; search has none: home it first"},
		{name: "a namespace homed twice", peers: regionPeers{paymentsPeers, []class.Home{home("payments", "home", "eu-west")}, []string{"payments"}},
			kind: nsKind, object: lockNamespace("again", "us-east"),
			message: "namespace-region: metadata.namespace: namespace payments is homed already, by LockNamespace home (region eu-west): a namespace has one region; change that one instead"},
		{name: "moving a namespace to another region is an update of its one home", peers: regionPeers{paymentsPeers, []class.Home{home("payments", "home", "eu-west"), billingEU}, []string{"payments", "billing"}},
			kind: nsKind, object: lockNamespace("home", "us-east")},
		{name: "a region that is not a DNS label", peers: regionPeers{paymentsPeers, nil, nil}, kind: nsKind, object: lockNamespace("home", "EU_West"),
			message: `schema: spec.region: must be a DNS label ([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?), got "EU_West"`},
		{name: "a class of a namespace without a home, with two regions", peers: regionPeers{paymentsPeers, []class.Home{billingEU, home("search", "home", "us-east")}, []string{"billing", "search"}},
			kind: classKind, object: lockClass("refunds", []string{"payments/refunds/"}),
			message: "namespace-region: metadata.namespace: namespace payments has no region: with namespaces homed to eu-west, us-east, every namespace needs a LockNamespace naming its region; add one first"},
		{name: "a class of a homed namespace", peers: regionPeers{paymentsPeers, []class.Home{billingEU, home("payments", "home", "us-east")}, []string{"billing", "payments"}},
			kind: classKind, object: lockClass("refunds", []string{"payments/refunds/"})},
		{name: "peers without homes leave the rule to class-lint check", peers: paymentsPeers, kind: nsKind, object: lockNamespace("again", "us-east")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHandler(func() time.Time { return testNow }, nil, WithPeers(tc.peers))
			resp := h.Validate(t.Context(), &Request{UID: "u", Operation: OperationCreate, Kind: tc.kind, Namespace: "payments", Object: tc.object})
			if tc.message == "" {
				require.True(t, resp.Allowed, "%+v", resp.Result)
				return
			}
			require.False(t, resp.Allowed)
			require.Equal(t, tc.message, resp.Result.Message)
		})
	}
}
