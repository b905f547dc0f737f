package arbiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/authz"
	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/keyspace"
	"github.com/lockd-dev/lockd/pkg/lockkey"
	"github.com/lockd-dev/lockd/pkg/token"
)

// HoldInfo describes one hold. Token is set only for operators.
type HoldInfo struct {
	Key        string
	Holder     string
	Session    int64
	Class      string
	AcquiredAt time.Time
	Age        time.Duration
	Token      uint64 // zero unless the caller is an operator
	Epoch      uint32
	Revision   int64
	Waiters    int
	// SessionTTLLeft is how long the holder's session has left by the
	// store's clock: its lease's remaining TTL when the arbiter read it,
	// zero when the lease is gone. Only Inspect sets it.
	SessionTTLLeft time.Duration
	// HomeSession is the session the holder opened when Session is its
	// lease on a cluster other than the coord cluster's; zero when Session
	// is the session itself or no record names the lease any more. Only
	// Inspect sets it.
	HomeSession int64
	// Cluster is the etcd cluster the hold is on, as operators name it;
	// empty when the arbiter fronts one cluster.
	Cluster string
}

// WaiterInfo is one waiter queued for a key.
type WaiterInfo struct {
	Identity string
	Session  int64
	// Waited is how long it has been queued, by the arbiter's clock.
	Waited time.Duration
	// Position is its place in line: 1 is next.
	Position int
	// Durable: the waiter is in the key's durable line, kept in etcd and
	// served by any arbiter; the others wait on this arbiter only.
	Durable bool
}

// mayRead reports whether caller may inspect key: operators read
// everything, others what they may lock.
func (a *Arbiter) mayRead(caller identity.Caller, key string) bool {
	return a.IsOperator(caller) || a.policy.Load().Authz.Allow(caller.String(), key)
}

// MayRead reports whether caller may read key's state and history: an
// operator, or an identity the policy served now lets lock it.
func (a *Arbiter) MayRead(caller identity.Caller, key string) bool { return a.mayRead(caller, key) }

// MayReadHistory reports whether caller may ask for the history of key, or
// of a prefix (ending in "/") under which it may lock some key; the rows of
// keys it may not lock are left out by the caller of this.
func (a *Arbiter) MayReadHistory(caller identity.Caller, keyOrPrefix string) bool {
	if strings.HasSuffix(keyOrPrefix, "/") {
		return a.IsOperator(caller) || a.policy.Load().Authz.AllowPrefix(caller.String(), keyOrPrefix)
	}
	return a.mayRead(caller, keyOrPrefix)
}

// Inspection is the answer of Inspect.
type Inspection struct {
	// Hold is the hold, with only Key and Waiters set when nobody holds
	// the key.
	Hold HoldInfo
	// Held reports whether anybody holds the key.
	Held bool
	// Queue are the waiters queued for the key on this arbiter, in arrival
	// (grant) order; len(Queue) == Hold.Waiters.
	Queue []WaiterInfo
	// Class is the key's class now ("namespace/name"), held or not: the
	// class its next grant is made under; empty when no class owns it.
	// Hold.Class is the class the hold was granted under.
	Class string
	// Tier is the tier of Class (empty with it), and Cluster the etcd
	// cluster the key was read from: the one its tier is served by.
	Tier, Cluster string
	// Range and ShardMapVersion, for a key of an entity tier split across
	// shards, are its range and the map version it was routed by.
	Range           string
	ShardMapVersion int64
}

// Inspect describes key.
func (a *Arbiter) Inspect(ctx context.Context, caller identity.Caller, key string) (Inspection, error) {
	if err := lockkey.Validate(key); err != nil {
		return Inspection{}, fmt.Errorf("%w: key: %w", ErrInvalid, err)
	}
	if !a.mayRead(caller, key) {
		return Inspection{}, authz.ErrDenied
	}
	if err := a.homeCheck(key); err != nil {
		return Inspection{}, err
	}
	// A key no class owns cannot be locked; a hold of it is from before a
	// class change, read from the home cell.
	in, c := Inspection{}, a.home
	if cls, ok := a.policy.Load().Classes.Owner(key); ok {
		in.Class, in.Tier, c = cls.Ref(), string(cls.Tier), a.cellFor(cls, key)
	}
	in.Cluster = c.name
	if c.shardOf != nil && in.Tier == string(class.TierEntity) {
		_, f := c.shardOf(key)
		in.Range, in.ShardMapVersion = f.Range, f.Version
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.Txn(cctx).Then(clientv3.OpGet(holdKey(key)), clientv3.OpGet(keyspace.QueueRange(key),
		clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(maxLineShown))).Commit()
	if err != nil {
		return Inspection{}, storeErr(ctx, err)
	}
	if _, err := c.checkHeader(resp.Header); err != nil && !errors.Is(err, ErrSealed) {
		return Inspection{}, err
	}
	holds := resp.Responses[0].GetResponseRange().Kvs
	line := a.lineInfo(resp.Responses[1].GetResponseRange().Kvs)
	if len(holds) == 0 {
		in.Queue = append(line, c.memory.queueInfo(key, 0, len(line))...)
		in.Hold = HoldInfo{Key: key, Waiters: len(in.Queue)}
		return in, nil
	}
	h, err := decodeHold(holds[0])
	if err != nil {
		return Inspection{}, err
	}
	in.Queue = append(line, c.memory.queueInfo(key, h.Session, len(line))...)
	in.Held, in.Hold = true, HoldInfo{Key: key, Waiters: len(in.Queue)}
	a.fillHold(&in.Hold, caller, c, h, holds[0].ModRevision)
	if in.Hold.SessionTTLLeft, err = c.ttlLeft(ctx, holds[0].Lease); err != nil {
		return Inspection{}, err
	}
	if c != a.home {
		if in.Hold.HomeSession, err = a.homeOf(ctx, c, holds[0].Lease); err != nil {
			return Inspection{}, err
		}
	}
	return in, nil
}

// maxLineShown bounds the durable waiters Inspect lists.
const maxLineShown = 1000

// lineInfo describes a key's durable waiters, read in create-revision
// order: the order they are granted in.
func (a *Arbiter) lineInfo(kvs []*mvccpb.KeyValue) []WaiterInfo {
	now := a.now()
	out := make([]WaiterInfo, 0, len(kvs))
	for _, kv := range kvs {
		w, err := keyspace.DecodeWaiter(kv.Value)
		if err != nil {
			a.log.Warn("undecodable durable waiter", "key", string(kv.Key), "err", err)
		}
		wi := WaiterInfo{Identity: w.Identity, Session: kv.Lease, Position: len(out) + 1, Durable: true}
		if w.QueuedAt != 0 {
			wi.Waited = now.Sub(time.Unix(0, w.QueuedAt))
		}
		out = append(out, wi)
	}
	return out
}

// ttlLeft is the remaining TTL of lease by the store's clock, zero when the
// lease is gone (the hold goes with it).
func (c *cell) ttlLeft(ctx context.Context, lease int64) (time.Duration, error) {
	if lease == 0 {
		return 0, nil
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.cli.TimeToLive(cctx, clientv3.LeaseID(lease))
	if isLeaseNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, storeErr(ctx, err)
	}
	return time.Duration(max(resp.TTL, 0)) * time.Second, nil
}

// fillHold describes hold h of cell c; an operator sees its token.
func (a *Arbiter) fillHold(info *HoldInfo, caller identity.Caller, c *cell, h holdRecord, modRev int64) {
	info.Holder, info.Session, info.Class = h.Identity, h.Session, h.Class
	if len(a.cells) > 1 {
		info.Cluster = c.name
	}
	info.AcquiredAt = time.Unix(0, h.AcquiredAt)
	info.Age = a.now().Sub(info.AcquiredAt)
	if a.IsOperator(caller) {
		st := c.epoch.Load()
		if tok, err := token.Pack(st.epoch, modRev); err == nil {
			info.Token, info.Epoch, info.Revision = tok, st.epoch, modRev
		}
	}
}

// HoldList is the answer of ListHolds.
type HoldList struct {
	// Holds are the holds the caller may see, at most the limit asked.
	Holds []HoldInfo
	// Truncated reports that more holds the caller may see were left out.
	Truncated bool
}

// ListHolds lists the holds under prefix (ending in "/") that the caller may
// see, at most limit. The caller must be an operator or be granted some of
// the prefix (the one denial otherwise, before anything is read);
// Truncated counts only holds the caller may see.
func (a *Arbiter) ListHolds(ctx context.Context, caller identity.Caller, prefix string, limit int) (HoldList, error) {
	who := caller.String()
	if err := lockkey.ValidatePrefix(prefix); err != nil {
		return HoldList{}, fmt.Errorf("%w: prefix: %w", ErrInvalid, err)
	}
	if !a.IsOperator(caller) && !a.policy.Load().Authz.AllowPrefix(who, prefix) {
		return HoldList{}, authz.ErrDenied
	}
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	var out []HoldInfo
	for _, c := range a.cells {
		hs, err := a.listHoldsIn(ctx, c, caller, prefix, limit)
		if err != nil {
			return HoldList{}, err
		}
		out = append(out, hs...)
	}
	slices.SortFunc(out, func(x, y HoldInfo) int { return strings.Compare(x.Key, y.Key) })
	truncated := len(out) > limit
	if truncated {
		out = out[:limit]
	}
	return HoldList{Holds: out, Truncated: truncated}, nil
}

// listHoldsIn lists at most limit+1 holds under prefix in cell c that the
// caller may see, read at one revision.
func (a *Arbiter) listHoldsIn(ctx context.Context, c *cell, caller identity.Caller, prefix string, limit int) ([]HoldInfo, error) {
	var out []HoldInfo
	key, end, rev := holdKey(prefix), clientv3.GetPrefixRangeEnd(holdKey(prefix)), int64(0)
	for len(out) <= limit {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(limit) + 1)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev)) // every page at one revision
		}
		cctx, cancel := c.callCtx(ctx)
		resp, err := c.cli.Get(cctx, key, opts...)
		cancel()
		if err != nil {
			return nil, storeErr(ctx, err)
		}
		if _, err := c.checkHeader(resp.Header); err != nil && !errors.Is(err, ErrSealed) {
			return nil, err
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			k := strings.TrimPrefix(string(kv.Key), holdPrefix)
			if !a.mayRead(caller, k) {
				continue
			}
			h, err := decodeHold(kv)
			if err != nil {
				return nil, err
			}
			info := HoldInfo{Key: k, Waiters: c.waiting(k)}
			a.fillHold(&info, caller, c, h, kv.ModRevision)
			out = append(out, info)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return out, nil
}

// ListSessions lists the caller's sessions, or every session for an
// operator, with their hold counts and remaining TTL. It scans the session
// and hold prefixes: an operator tool, not a hot path.
func (a *Arbiter) ListSessions(ctx context.Context, caller identity.Caller) ([]SessionInfo, error) {
	who := caller.String()
	home := a.home // sessions' leases are the home cell's
	cctx, cancel := home.callCtx(ctx)
	defer cancel()
	sresp, err := home.cli.Get(cctx, sessionPrefix, clientv3.WithPrefix(), clientv3.WithLimit(10000))
	if err != nil {
		return nil, storeErr(ctx, err)
	}
	op := a.IsOperator(caller)
	byID := map[int64]*SessionInfo{}
	var out []*SessionInfo
	for _, kv := range sresp.Kvs {
		s, err := decodeSession(kv)
		if err != nil {
			return nil, err
		}
		if !op && s.identity != who {
			continue
		}
		si := &SessionInfo{ID: s.id, Identity: s.identity, TTL: s.ttl, OpenedAt: s.openedAt}
		if v, ok := a.sessions.Load(s.id); ok {
			if ka := v.(*sessionInfo).lastKA.Load(); ka != 0 {
				si.LastKeepAlive = time.Unix(0, ka)
			}
		}
		byID[s.id] = si
		out = append(out, si)
	}
	for _, c := range a.cells {
		hresp, err := c.cli.Get(cctx, holdPrefix, clientv3.WithPrefix(), clientv3.WithLimit(100000))
		if err != nil {
			return nil, storeErr(ctx, err)
		}
		for _, kv := range hresp.Kvs {
			if si := byID[kv.Lease]; si != nil {
				si.Holds++
			}
		}
	}
	for _, si := range out {
		ttl, err := home.cli.TimeToLive(cctx, clientv3.LeaseID(si.ID))
		if err == nil && ttl.TTL > 0 {
			si.Remaining = time.Duration(ttl.TTL) * time.Second
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	res := make([]SessionInfo, len(out))
	for i, si := range out {
		res[i] = *si
	}
	return res, nil
}

// ListClasses returns the loaded classes of the namespaces the caller has
// grants in (all of them for an operator), optionally of one namespace.
func (a *Arbiter) ListClasses(caller identity.Caller, namespace string) []ServedClass {
	who := caller.String()
	pol := a.policy.Load()
	var mine []string
	op := a.IsOperator(caller)
	if !op {
		mine = pol.Authz.NamespacesOf(who)
	}
	now := a.now()
	var out []ServedClass
	for _, c := range pol.Classes.Classes() {
		if (namespace == "" || c.Namespace == namespace) && (op || slices.Contains(mine, c.Namespace)) {
			out = append(out, pol.served(c, now))
		}
	}
	return out
}

// DescribeClass returns class namespace/name if the caller has grants in that
// namespace (or is an operator); otherwise the same denial as for an absent
// namespace.
func (a *Arbiter) DescribeClass(caller identity.Caller, namespace, name string) (ServedClass, error) {
	who := caller.String()
	pol := a.policy.Load()
	if !a.IsOperator(caller) && !slices.Contains(pol.Authz.NamespacesOf(who), namespace) {
		return ServedClass{}, authz.ErrDenied
	}
	c, ok := pol.Classes.Class(namespace, name)
	if !ok {
		return ServedClass{}, fmt.Errorf("%w: class: no class %q in namespace %q", ErrInvalid, name, namespace)
	}
	return pol.served(c, a.now()), nil
}

// ServedClass is a class as lockd serves it at one moment: its
// enforcement is fenced only while a pause test proves it (Proof).
type ServedClass struct {
	*class.Class
	// Served is the enforcement served: Class.Enforcement (what the class
	// declares) when that is advisory or proven fenced, else advisory.
	Served class.Enforcement
	// Proof says whether a class declared fenced is proven, and why.
	Proof class.FenceProof
}

func (p *Policy) served(c *class.Class, now time.Time) ServedClass {
	proof := p.Classes.Proof(c, now)
	sc := ServedClass{Class: c, Served: class.EnforcementAdvisory, Proof: proof}
	if proof.HoldsAt(now) {
		sc.Served = class.EnforcementFenced
	}
	return sc
}
