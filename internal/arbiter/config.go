package arbiter

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/lockd-dev/lockd/internal/class"
	"github.com/lockd-dev/lockd/internal/etcdop"
	"github.com/lockd-dev/lockd/pkg/lockkey"
)

// ErrInvalidConfig is wrapped by New's errors for a Config (or policy) it
// cannot run with; each names the field and the rule. It is an ErrInvalid.
var ErrInvalidConfig error = invalidConfig{}

type invalidConfig struct{}

func (invalidConfig) Error() string { return "arbiter: invalid config" }

// Is makes ErrInvalidConfig match ErrInvalid, which New returned before.
func (invalidConfig) Is(target error) bool { return target == ErrInvalid }

// Zero-value defaults of Config.
const (
	defaultRequestTimeout = 5 * time.Second
	defaultPollInterval   = time.Second
	defaultEpochRefresh   = time.Second
	defaultMaxEpochAge    = 3 * time.Second
)

// validate checks cfg and policy and returns every violation at once. Zero
// values mean the default and are valid.
func (cfg *Config) validate(policy *Policy) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...)))
	}
	if cfg.Client == nil {
		add("Client", "required (the etcd client)")
	}
	if cfg.Leases == nil {
		add("Leases", "required (the raw lease client keepalives are forwarded on)")
	}
	if cfg.Client != nil && etcdop.Raw(cfg.Client, cfg.KV) == nil {
		add("KV", "required when Client has no connection of its own (an in-process client): the raw KV client grants are sent on")
	}
	if policy == nil || policy.Classes == nil || policy.Authz == nil {
		add("policy", "required (NewPolicy)")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"RequestTimeout", cfg.RequestTimeout}, {"PollInterval", cfg.PollInterval}, {"EpochRefresh", cfg.EpochRefresh}, {"MaxEpochAge", cfg.MaxEpochAge}} {
		if d.v < 0 {
			add(d.name, "must be positive, or zero for the default; got %s", d.v)
		}
	}
	if refresh, age := orDefault(cfg.EpochRefresh, defaultEpochRefresh), orDefault(cfg.MaxEpochAge, defaultMaxEpochAge); refresh > 0 && age > 0 && refresh >= age {
		add("EpochRefresh", "%s must be shorter than MaxEpochAge %s", refresh, age)
	}
	if cfg.MaxBatch < 0 {
		add("MaxBatch", "must be positive (1 turns group commit off), or zero for the default; got %d", cfg.MaxBatch)
	}
	if cfg.MaxTxnOps != 0 && cfg.MaxTxnOps < MinMaxTxnOps {
		add("MaxTxnOps", "must be at least %d (a grant's own transaction needs that much of etcd's --max-txn-ops), or zero for etcd's default; got %d", MinMaxTxnOps, cfg.MaxTxnOps)
	}
	if cfg.MaxSessionsPerIdentity < 0 {
		add("MaxSessionsPerIdentity", "must be positive, or zero for the default; got %d", cfg.MaxSessionsPerIdentity)
	}
	if cfg.MaxWaitersPerIdentity < 0 {
		add("MaxWaitersPerIdentity", "must be positive, or zero for the default; got %d", cfg.MaxWaitersPerIdentity)
	}
	if r := cfg.ValidateRate; r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		add("ValidateRate", "must be a positive number of calls per second, or zero for the default; got %v", r)
	}
	if cfg.ValidateBurst < 0 {
		add("ValidateBurst", "must be positive, or zero for the default; got %d", cfg.ValidateBurst)
	}
	switch {
	case cfg.SpoolDir != "" && cfg.ArbiterID == "":
		add("ArbiterID", "required with SpoolDir (unprotected grants are shipped under it)")
	case cfg.OpenAfter != 0 && cfg.OpenAfter < MinOpenAfter:
		add("OpenAfter", "must be at least %s (longer than an etcd election), or zero for the default; got %s", MinOpenAfter, cfg.OpenAfter)
	}
	if cfg.Region != "" && !lockkey.IsDNSLabel(cfg.Region) {
		add("Region", "must be a DNS label (as a LockNamespace's spec.region), got %q", cfg.Region)
	}
	if cfg.Cluster != "" && !lockkey.IsDNSLabel(cfg.Cluster) {
		add("Cluster", "must be a DNS label (as a topology's cluster name), got %q", cfg.Cluster)
	}
	names := map[string]bool{cmp.Or(cfg.Cluster, DefaultCluster): true}
	for i, cl := range cfg.Clusters {
		f := fmt.Sprintf("Clusters[%d]", i)
		switch {
		case !lockkey.IsDNSLabel(cl.Name):
			add(f+".Name", "must be a DNS label (as a topology's cluster name), got %q", cl.Name)
		case names[cl.Name]:
			add(f+".Name", "%q names two clusters (Cluster is the coord cluster's name)", cl.Name)
		}
		names[cl.Name] = true
		if cl.Client == nil {
			add(f+".Client", "required (the etcd client of cluster %q)", cl.Name)
		} else if etcdop.Raw(cl.Client, cl.KV) == nil {
			add(f+".KV", "required when Client has no connection of its own (an in-process client of cluster %q)", cl.Name)
		}
		if len(cl.Tiers) == 0 {
			add(f+".Tiers", "must name the tiers cluster %q serves", cl.Name)
		}
		for _, t := range cl.Tiers {
			switch {
			case t == class.TierCoord:
				add(f+".Tiers", "the coord tier stays on Client's cluster (it keeps the sessions and the epoch counter)")
			case t != class.TierEntity:
				add(f+".Tiers", "unknown tier %q (one of: entity)", t)
			}
			// Several clusters may serve the entity tier: its shards,
			// homed to by the shard map (shards.go).
		}
	}
	for r := range cfg.RegionEndpoints {
		if !lockkey.IsDNSLabel(r) {
			add("RegionEndpoints", "%q is not a region name (a DNS label)", r)
		}
	}
	for i, op := range cfg.Operators {
		if _, err := spiffeid.FromString(op); err != nil {
			add(fmt.Sprintf("Operators[%d]", i), "%q is not a SPIFFE ID: %v", op, err)
		}
	}
	return errors.Join(errs...)
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
