package cost

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockd-dev/lockd/internal/class"
)

// owning is a class of namespace p owning keys, with its tier, quorum-loss
// policy and nestedIn set by mods.
func owning(name string, keys []string, mods ...func(*class.Class)) *class.Class {
	c := cls("p", name, 15*time.Second, mods...)
	c.Keys = keys
	return c
}

func coord(c *class.Class) { c.Tier = class.TierCoord }

func open(c *class.Class) {
	advisory(c)
	c.OnQuorumLoss = class.QuorumLossOpen
}

func nested(outer string) func(*class.Class) {
	return func(c *class.Class) { c.NestedIn = []string{outer} }
}

// rehomeSummary is "prefix: from → to [tier] [opens] [except …]".
func rehomeSummary(rs []Rehome) []string {
	var out []string
	for _, r := range rs {
		to := "(none)"
		if r.To != nil {
			to = fmt.Sprintf("%s %s %s", r.To.Class, r.To.Tier, r.To.OnQuorumLoss)
		}
		s := fmt.Sprintf("%s: %s %s %s → %s", r.Prefix, r.From.Class, r.From.Tier, r.From.OnQuorumLoss, to)
		if r.TierChanges {
			s += " tier"
		}
		if r.OpensOnQuorumLoss {
			s += " opens"
		}
		if len(r.Except) > 0 {
			s += " except " + strings.Join(r.Except, ",")
		}
		out = append(out, s)
	}
	return out
}

func TestRehomes(t *testing.T) {
	all := []string{"p/"}
	ledger := []string{"p/ledger/"}
	tests := []struct {
		name       string
		base, head []*class.Class
		want       []string
		// messages are substrings of the messages, in order.
		messages []string
	}{
		{name: "nothing changes", base: []*class.Class{owning("a", all)}, head: []*class.Class{owning("a", all)}},
		{name: "a class changes its tier", base: []*class.Class{owning("a", all)}, head: []*class.Class{owning("a", all, coord)},
			want: []string{"p/: p/a entity closed → p/a coord closed tier"},
			messages: []string{"keys under p/ move from tier entity (class p/a) to tier coord (class p/a): a rehome, not an edit — " +
				"the change applies to each key from its next grant; a hold made before keeps its class (and cluster) until it ends"}},
		{name: "keys carved out to a class of another tier",
			base:     []*class.Class{owning("a", all)},
			head:     []*class.Class{owning("a", all), owning("b", ledger, coord, nested("a"))},
			want:     []string{"p/ledger/: p/a entity closed → p/b coord closed tier"},
			messages: []string{"keys under p/ledger/ move from tier entity (class p/a) to tier coord (class p/b): a rehome"}},
		{name: "keys carved out to a class of the same tier",
			base: []*class.Class{owning("a", all)},
			head: []*class.Class{owning("a", all), owning("b", ledger, nested("a"))}},
		{name: "a nested class removed gives its keys back to the outer one",
			base: []*class.Class{owning("a", all), owning("b", ledger, coord, nested("a"))},
			head: []*class.Class{owning("a", all)},
			want: []string{"p/ledger/: p/b coord closed → p/a entity closed tier"}},
		{name: "an outer class changes tier, an inner one keeps its keys",
			base:     []*class.Class{owning("a", all), owning("b", []string{"p/ledger/", "p/ledger/x/", "p/z/"}, nested("a"))},
			head:     []*class.Class{owning("a", all, coord), owning("b", []string{"p/ledger/", "p/ledger/x/", "p/z/"}, nested("a"))},
			want:     []string{"p/: p/a entity closed → p/a coord closed tier except p/ledger/,p/z/"},
			messages: []string{"keys under p/ (but not under p/ledger/, p/z/) move from tier entity"}},
		{name: "a prefix moves to another class of the same tier",
			base: []*class.Class{owning("a", ledger), owning("b", []string{"p/b/"})},
			head: []*class.Class{owning("a", nil), owning("b", []string{"p/b/", "p/ledger/"})}},
		{name: "keys move to a class open on quorum loss",
			base: []*class.Class{owning("a", []string{"p/a/", "p/cache/"}), owning("c", []string{"p/c/"}, open)},
			head: []*class.Class{owning("a", []string{"p/a/"}), owning("c", []string{"p/c/", "p/cache/"}, open)},
			want: []string{"p/cache/: p/a entity closed → p/c entity open opens"},
			messages: []string{"keys under p/cache/ move from class p/a, closed on quorum loss, to class p/c, open on quorum loss: " +
				"from this change on they may be granted unprotected (token 0) while etcd has no quorum, " +
				"and a hold made under the closed class before can then overlap an unprotected one"}},
		{name: "a class turns open on quorum loss",
			base: []*class.Class{owning("c", all, advisory)}, head: []*class.Class{owning("c", all, open)},
			want:     []string{"p/: p/c entity closed → p/c entity open opens"},
			messages: []string{"keys under p/ stay with class p/c, which turns from closed to open on quorum loss: from this change on"}},
		{name: "a class turning closed is not reported",
			base: []*class.Class{owning("c", all, open)}, head: []*class.Class{owning("c", all, advisory)}},
		{name: "tier and posture change at once",
			base: []*class.Class{owning("a", all)}, head: []*class.Class{owning("a", all, open, coord)},
			want:     []string{"p/: p/a entity closed → p/a coord open tier opens"},
			messages: []string{"move from tier entity (class p/a) to tier coord (class p/a)", "stay with class p/a, which turns from closed to open"}},
		{name: "keys left without a class", base: []*class.Class{owning("a", all), owning("b", ledger, nested("a"))},
			head: []*class.Class{owning("b", ledger)},
			want: []string{"p/: p/a entity closed → (none) except p/ledger/"},
			messages: []string{"keys under p/ (but not under p/ledger/) lose their class: no class owns them after this change (they were p/a's, tier entity), " +
				"so acquiring one is refused with NO_CLASS; a hold made before keeps its class until it ends"}},
		{name: "keys no class owned before have nothing to move", head: []*class.Class{owning("a", all, coord)}},
		{name: "namespaces are apart",
			base: []*class.Class{owning("a", all), {Namespace: "q", Name: "a", Tier: class.TierEntity, OnQuorumLoss: class.QuorumLossClosed, Keys: []string{"q/"}}},
			head: []*class.Class{owning("a", all), {Namespace: "q", Name: "a", Tier: class.TierCoord, OnQuorumLoss: class.QuorumLossClosed, Keys: []string{"q/"}}},
			want: []string{"q/: q/a entity closed → q/a coord closed tier"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Rehomes(tt.base, tt.head)
			require.NotNil(t, got, "an empty list, not null, in JSON")
			require.Equal(t, tt.want, rehomeSummary(got))
			var msgs []string
			for _, r := range got {
				msgs = append(msgs, r.Messages...)
			}
			require.Len(t, msgs, max(len(tt.messages), len(got)), "%q", msgs)
			for i, m := range tt.messages {
				require.Contains(t, msgs[i], m)
			}
		})
	}
}
