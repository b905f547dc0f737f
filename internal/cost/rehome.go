package cost

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/lockd-dev/lockd/internal/class"
)

// Owner is the class that owns some keys, as a rehome names it.
type Owner struct {
	// Class is "namespace/name".
	Class string `json:"class"`
	// Tier is the class's tier.
	Tier class.Tier `json:"tier"`
	// OnQuorumLoss is the class's quorum-loss policy.
	OnQuorumLoss class.QuorumLossPolicy `json:"on_quorum_loss"`
}

func owner(c *class.Class) Owner {
	return Owner{Class: c.Ref(), Tier: c.Tier, OnQuorumLoss: c.OnQuorumLoss}
}

// Rehome is a prefix whose keys, between the base and the work tree, move
// to a class of another tier, move to (or stay with) a class that is open
// on quorum loss where the base's was closed, or are left without a class.
// A class change applies to each key from its next grant: a hold made
// before keeps the class (and so the tier and cluster) it was granted under
// until it ends. Its JSON field names are stable.
type Rehome struct {
	// Namespace is the keys' namespace.
	Namespace string `json:"namespace"`
	// Prefix is a prefix some class owns at the base or in the work tree.
	Prefix string `json:"prefix"`
	// Except lists the prefixes inside Prefix whose keys do not make this
	// move (they have a class of their own on one side); empty when none.
	Except []string `json:"except"`
	// From is the keys' class at the base.
	From Owner `json:"from"`
	// To is the keys' class in the work tree; nil when no class owns them.
	To *Owner `json:"to"`
	// TierChanges is true when To's tier differs from From's: a rehome.
	TierChanges bool `json:"tier_changes"`
	// OpensOnQuorumLoss is true when From is closed on quorum loss and To
	// is open: the keys may from then on be granted unprotected.
	OpensOnQuorumLoss bool `json:"opens_on_quorum_loss"`
	// Messages say what the move means, one sentence per kind of move.
	Messages []string `json:"messages"`
}

// Rehomes compares which class owns each key at the base and in the work
// tree (the class owning its longest prefix, [class.Set.Owner]) and returns
// the moves that matter to holders, by namespace and prefix: keys that
// change tier, keys whose class turns open on quorum loss, and keys left
// without a class. The keys of every prefix either side lists are
// compared, so a class carved out of another (spec.nestedIn) and a class
// that gives its keys back to an outer one are both seen.
func Rehomes(base, head []*class.Class) []Rehome {
	before, after := class.NewSet(base, nil), class.NewSet(head, nil)
	prefixes := map[string][]string{} // namespace → prefixes either side lists
	for _, c := range slices.Concat(base, head) {
		for _, p := range c.Keys {
			if !slices.Contains(prefixes[c.Namespace], p) {
				prefixes[c.Namespace] = append(prefixes[c.Namespace], p)
			}
		}
	}
	out := []Rehome{}
	for ns, ps := range prefixes {
		slices.Sort(ps)
		for _, p := range ps {
			b, ok := before.Owner(p)
			if !ok {
				continue // not lockable before: nothing held moves
			}
			a, ok := after.Owner(p)
			r := Rehome{Namespace: ns, Prefix: p, Except: []string{}, From: owner(b)}
			if ok {
				to := owner(a)
				r.To = &to
				r.TierChanges = b.Tier != a.Tier
				r.OpensOnQuorumLoss = b.OnQuorumLoss == class.QuorumLossClosed && a.OnQuorumLoss == class.QuorumLossOpen
				if !r.TierChanges && !r.OpensOnQuorumLoss {
					continue
				}
			}
			r.Except = except(before, after, ps, p, r.From, r.To)
			r.Messages = r.messages()
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(x, y Rehome) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Prefix, y.Prefix))
	})
	return out
}

// except returns the outermost prefixes of ps inside p whose keys have
// another class than p's on either side.
func except(before, after *class.Set, ps []string, p string, from Owner, to *Owner) []string {
	name := func(s *class.Set, key string) string {
		if c, ok := s.Owner(key); ok {
			return c.Ref()
		}
		return ""
	}
	toName := ""
	if to != nil {
		toName = to.Class
	}
	out := []string{}
	for _, q := range ps { // sorted: an outer prefix comes before those inside it
		if len(q) <= len(p) || !strings.HasPrefix(q, p) || slices.ContainsFunc(out, func(o string) bool { return strings.HasPrefix(q, o) }) {
			continue
		}
		if name(before, q) != from.Class || name(after, q) != toName {
			out = append(out, q)
		}
	}
	return out
}

// messages says what the move means.
func (r Rehome) messages() []string {
	keys := "keys under " + r.Prefix
	if len(r.Except) > 0 {
		keys += " (but not under " + strings.Join(r.Except, ", ") + ")"
	}
	if r.To == nil {
		return []string{fmt.Sprintf("%s lose their class: no class owns them after this change (they were %s's, tier %s), "+
			"so acquiring one is refused with NO_CLASS; a hold made before keeps its class until it ends", keys, r.From.Class, r.From.Tier)}
	}
	var out []string
	if r.TierChanges {
		out = append(out, fmt.Sprintf("%s move from tier %s (class %s) to tier %s (class %s): a rehome, not an edit — "+
			"the change applies to each key from its next grant; a hold made before keeps its class (and cluster) until it ends",
			keys, r.From.Tier, r.From.Class, r.To.Tier, r.To.Class))
	}
	if r.OpensOnQuorumLoss {
		move := fmt.Sprintf("%s move from class %s, closed on quorum loss, to class %s, open on quorum loss", keys, r.From.Class, r.To.Class)
		if r.From.Class == r.To.Class {
			move = fmt.Sprintf("%s stay with class %s, which turns from closed to open on quorum loss", keys, r.From.Class)
		}
		out = append(out, move+": from this change on they may be granted unprotected (token 0) while etcd has no quorum, "+
			"and a hold made under the closed class before can then overlap an unprotected one")
	}
	return out
}

// RehomeReport is what changes for the keys between the class directory at
// a git base and in the work tree: the part of the review that needs no
// Prometheus. Its JSON field names are stable.
type RehomeReport struct {
	// Dir is the class directory, as given.
	Dir string `json:"dir"`
	// Base is what the work tree was compared with.
	Base Base `json:"base"`
	// Rehomes are the moves that matter to holders.
	Rehomes []Rehome `json:"rehomes"`
	// Notes say what was assumed (a fallback base) or left out (classes
	// that could not be read).
	Notes []string `json:"notes"`
}

// CompareRehomes reads the class directory o.Dir at o.Base and in the work
// tree, like [Compare], and returns the keys that change tier or posture or
// lose their class. It needs no Prometheus: o.Prometheus and o.Source are
// not used.
func CompareRehomes(ctx context.Context, o Options) (*RehomeReport, error) {
	t, err := readTrees(ctx, o.Dir, o.Base)
	if err != nil {
		return nil, err
	}
	r := &RehomeReport{Dir: o.Dir, Base: t.base, Rehomes: Rehomes(t.before, t.after), Notes: t.notes}
	if r.Notes == nil {
		r.Notes = []string{}
	}
	return r, nil
}
