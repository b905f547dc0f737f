package class

import (
	"testing"
	"time"
)

func TestAClassIsServedFencedOnlyWhileAPauseTestProvesIt(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := &Class{Namespace: "payments", Name: "ledger", Enforcement: EnforcementFenced, Resource: "db", ResourceSchemaVersion: "3"}
	good := PauseTest{Namespace: "payments", Name: "ledger-1", Class: "ledger", Resource: "db", ResourceSchemaVersion: "3",
		Outcome: PauseTestOutcomePass, RanAt: now.AddDate(0, -1, 0), Expires: now.AddDate(0, 11, 0), Source: "f.yaml", Line: 1}
	with := func(f func(*PauseTest)) PauseTest { pt := good; f(&pt); return pt }
	expired := with(func(p *PauseTest) { p.Expires = now.Add(-time.Hour); p.RanAt = now.AddDate(-1, 0, 1) })
	schema := with(func(p *PauseTest) { p.ResourceSchemaVersion = "2"; p.RanAt = now.AddDate(0, 0, -2) })
	tests := []struct {
		name   string
		class  *Class
		tests  []PauseTest
		reason string
		until  time.Time
	}{
		{"current", c, []PauseTest{good}, ReasonPauseTestCurrent, good.Expires},
		{"current until a year after it ran", c, []PauseTest{with(func(p *PauseTest) { p.Expires = now.AddDate(3, 0, 0) })},
			ReasonPauseTestCurrent, good.RanAt.Add(PauseTestValidity)},
		{"declared advisory", &Class{Namespace: "payments", Name: "ledger", Enforcement: EnforcementAdvisory, Resource: "db"},
			[]PauseTest{good}, ReasonNotDeclaredFenced, time.Time{}},
		{"no resource", &Class{Namespace: "payments", Name: "ledger", Enforcement: EnforcementFenced}, []PauseTest{good}, ReasonNoResource, time.Time{}},
		{"none", c, nil, ReasonNoPauseTest, time.Time{}},
		{"another class's", c, []PauseTest{with(func(p *PauseTest) { p.Class = "other" })}, ReasonNoPauseTest, time.Time{}},
		{"another resource", c, []PauseTest{with(func(p *PauseTest) { p.Resource = "cache" })}, ReasonResourceMismatch, time.Time{}},
		{"schema version changed", c, []PauseTest{schema}, ReasonSchemaVersionChanged, time.Time{}},
		{"expired", c, []PauseTest{expired}, ReasonPauseTestExpired, time.Time{}},
		{"no expiry", c, []PauseTest{with(func(p *PauseTest) { p.Expires = time.Time{} })}, ReasonPauseTestExpired, time.Time{}},
		{"in the future", c, []PauseTest{with(func(p *PauseTest) { p.RanAt = now.Add(time.Hour) })}, ReasonPauseTestInFuture, time.Time{}},
		{"the newest failure names the reason", c, []PauseTest{expired, schema}, ReasonSchemaVersionChanged, time.Time{}},
		{"one current among failures", c, []PauseTest{expired, good, schema}, ReasonPauseTestCurrent, good.Expires},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ProveFenced(tt.class, tt.tests, now)
			if p.Reason != tt.reason || p.Proven != (tt.reason == ReasonPauseTestCurrent) || !p.Until.Equal(tt.until) {
				t.Fatalf("got %+v, want reason %s until %v", p, tt.reason, tt.until)
			}
			if p.Message == "" {
				t.Fatal("no message")
			}
			if p.HoldsAt(now) != p.Proven {
				t.Fatalf("HoldsAt(now) = %v for %+v", p.HoldsAt(now), p)
			}
			if p.Proven && p.HoldsAt(p.Until) {
				t.Fatalf("a proof holds at its own end: %+v", p)
			}
		})
	}
}

func TestASetServesFencedUntilTheProofEnds(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := &Class{Namespace: "payments", Name: "ledger", Enforcement: EnforcementFenced, Resource: "db"}
	pt := PauseTest{Namespace: "payments", Name: "ledger", Class: "ledger", Resource: "db", Outcome: PauseTestOutcomePass,
		RanAt: now.AddDate(0, -1, 0), Expires: now.Add(time.Hour)}
	fromDir := NewSet([]*Class{c}, nil).WithPauseTests([]PauseTest{pt})
	fromStatus := NewSet([]*Class{c}, nil).WithFenceProofs(map[string]FenceProof{c.Ref(): ProveFenced(c, []PauseTest{pt}, now)})
	noStatus := NewSet([]*Class{c}, nil).WithFenceProofs(nil)
	for name, s := range map[string]*Set{"directory": fromDir, "status": fromStatus} {
		if got := s.Served(c, now); got != EnforcementFenced {
			t.Errorf("%s: served %s before the result expires", name, got)
		}
		if got := s.Served(c, now.Add(time.Hour)); got != EnforcementAdvisory {
			t.Errorf("%s: served %s once the result expired", name, got)
		}
		if p := s.Proof(c, now.Add(time.Hour)); p.Reason != ReasonPauseTestExpired || p.Proven {
			t.Errorf("%s: proof after expiry %+v", name, p)
		}
	}
	if p := noStatus.Proof(c, now); p.Reason != ReasonNoStatus || noStatus.Served(c, now) != EnforcementAdvisory {
		t.Errorf("no status written: %+v", p)
	}
}
