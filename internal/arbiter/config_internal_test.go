package arbiter

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockd-dev/lockd/internal/class"
)

// TestNewValidatesConfig: New refuses a Config it cannot run with, naming
// the field and the rule; zero values mean the defaults and are accepted.
// No etcd is needed: New does not call the store.
func TestNewValidatesConfig(t *testing.T) {
	policy := NewPolicy(class.NewSet(nil, nil))
	valid := func() Config {
		return Config{Client: &clientv3.Client{}, Leases: struct{ pb.LeaseClient }{}, KV: struct{ pb.KVClient }{}}
	}
	tests := []struct {
		name   string
		edit   func(*Config)
		policy *Policy
		want   []string // substrings of the error; none: valid
	}{
		{name: "zero values are the defaults", edit: func(*Config) {}},
		{name: "everything set", edit: func(c *Config) {
			c.Operators = []string{"spiffe://example.org/ops"}
			c.OIDCOperators = true
			c.RequestTimeout, c.PollInterval, c.EpochRefresh, c.MaxEpochAge = time.Second, time.Second, time.Second, 2*time.Second
			c.MaxSessionsPerIdentity, c.MaxWaitersPerIdentity, c.ValidateRate, c.ValidateBurst = 1, 1, 0.5, 1
		}},
		{name: "no client", edit: func(c *Config) { c.Client = nil }, want: []string{"Client: required"}},
		{name: "no lease client", edit: func(c *Config) { c.Leases = nil }, want: []string{"Leases: required"}},
		{name: "an in-process client without its raw KV client", edit: func(c *Config) {
			c.KV = nil
			c.Clusters = []Cluster{{Name: "entity-1", Client: &clientv3.Client{}, Tiers: []class.Tier{class.TierEntity}}}
		}, want: []string{"KV: required when Client has no connection of its own", `Clusters[0].KV: required when Client has no connection of its own (an in-process client of cluster "entity-1")`}},
		{name: "no policy", edit: func(*Config) {}, policy: &Policy{}, want: []string{"policy: required"}},
		{name: "negative request timeout", edit: func(c *Config) { c.RequestTimeout = -time.Second }, want: []string{"RequestTimeout: must be positive"}},
		{name: "negative poll interval", edit: func(c *Config) { c.PollInterval = -1 }, want: []string{"PollInterval: must be positive"}},
		{name: "negative epoch refresh", edit: func(c *Config) { c.EpochRefresh = -1 }, want: []string{"EpochRefresh: must be positive"}},
		{name: "negative epoch age", edit: func(c *Config) { c.MaxEpochAge = -1 }, want: []string{"MaxEpochAge: must be positive"}},
		{name: "refresh not shorter than the epoch age", edit: func(c *Config) { c.EpochRefresh = 3 * time.Second },
			want: []string{"EpochRefresh: 3s must be shorter than MaxEpochAge 3s"}},
		{name: "default refresh against a short epoch age", edit: func(c *Config) { c.MaxEpochAge = time.Second },
			want: []string{"EpochRefresh: 1s must be shorter than MaxEpochAge 1s"}},
		{name: "negative session quota", edit: func(c *Config) { c.MaxSessionsPerIdentity = -1 }, want: []string{"MaxSessionsPerIdentity: must be positive"}},
		{name: "negative waiter quota", edit: func(c *Config) { c.MaxWaitersPerIdentity = -1 }, want: []string{"MaxWaitersPerIdentity: must be positive"}},
		{name: "negative validate rate", edit: func(c *Config) { c.ValidateRate = -1 }, want: []string{"ValidateRate: must be a positive number"}},
		{name: "NaN validate rate", edit: func(c *Config) { c.ValidateRate = math.NaN() }, want: []string{"ValidateRate: must be a positive number"}},
		{name: "infinite validate rate", edit: func(c *Config) { c.ValidateRate = math.Inf(1) }, want: []string{"ValidateRate: must be a positive number"}},
		{name: "negative validate burst", edit: func(c *Config) { c.ValidateBurst = -1 }, want: []string{"ValidateBurst: must be positive"}},
		{name: "empty operator", edit: func(c *Config) { c.Operators = []string{"spiffe://example.org/ops", ""} },
			want: []string{`Operators[1]: "" is not a SPIFFE ID`}},
		{name: "operator not a SPIFFE ID", edit: func(c *Config) { c.Operators = []string{"ops"} }, want: []string{`Operators[0]: "ops" is not a SPIFFE ID`}},
		{name: "an entity cluster", edit: func(c *Config) {
			c.Clusters = []Cluster{{Name: "entity-1", Client: &clientv3.Client{}, KV: struct{ pb.KVClient }{}, Tiers: []class.Tier{class.TierEntity}}}
		}},
		{name: "clusters it cannot use", edit: func(c *Config) {
			c.Cluster = "coord"
			c.Clusters = []Cluster{
				{Name: "coord", Client: &clientv3.Client{}, KV: struct{ pb.KVClient }{}, Tiers: []class.Tier{class.TierCoord}},
				{Name: "Bad_Name", Tiers: []class.Tier{"bulk"}},
				{Name: "e1", Client: &clientv3.Client{}, KV: struct{ pb.KVClient }{}, Tiers: []class.Tier{class.TierEntity}},
				{Name: "e2", Client: &clientv3.Client{}, KV: struct{ pb.KVClient }{}, Tiers: []class.Tier{class.TierEntity}},
				{Name: "e3", Client: &clientv3.Client{}, KV: struct{ pb.KVClient }{}},
			}
		}, want: []string{
			`Clusters[0].Name: "coord" names two clusters`,
			"Clusters[0].Tiers: the coord tier stays on Client's cluster",
			`Clusters[1].Name: must be a DNS label`,
			`Clusters[1].Client: required`,
			`Clusters[1].Tiers: unknown tier "bulk"`,
			`Clusters[4].Tiers: must name the tiers cluster "e3" serves`,
		}},
		{name: "every violation at once", edit: func(c *Config) { c.Client, c.RequestTimeout, c.ValidateBurst = nil, -1, -1 },
			want: []string{"Client: required", "RequestTimeout: must be positive", "ValidateBurst: must be positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.edit(&cfg)
			p := policy
			if tt.policy != nil {
				p = tt.policy
			}
			a, err := New(cfg, p)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				a.Close()
				return
			}
			if err == nil {
				t.Fatal("New accepted the config")
			}
			if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalidConfig (an ErrInvalid)", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want it to say %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "arbiter: invalid config: "); n != len(tt.want) {
				t.Errorf("err = %q: %d violations, want %d", err, n, len(tt.want))
			}
		})
	}
}

// TestNewDefaults: zero values take the documented defaults.
func TestNewDefaults(t *testing.T) {
	a, err := New(Config{Client: &clientv3.Client{}, Leases: struct{ pb.LeaseClient }{}, KV: struct{ pb.KVClient }{}}, NewPolicy(class.NewSet(nil, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.home.timeout != 5*time.Second || a.home.poll != time.Second || a.home.refresh != time.Second || a.home.maxEpochAge != 3*time.Second {
		t.Errorf("timeout %s poll %s refresh %s max epoch age %s", a.home.timeout, a.home.poll, a.home.refresh, a.home.maxEpochAge)
	}
	if a.maxSess != DefaultMaxSessionsPerIdentity || a.waiters.max != DefaultMaxWaitersPerIdentity ||
		a.validate.rate != DefaultValidateRate || a.validate.burst != DefaultValidateBurst {
		t.Errorf("quotas %d %d %v %d", a.maxSess, a.waiters.max, a.validate.rate, a.validate.burst)
	}
}
