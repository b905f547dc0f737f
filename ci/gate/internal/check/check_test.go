package check

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockd-dev/lockd/ci/gate/internal/history"
)

// t1 returns the token of revision rev in epoch 1.
func t1(rev uint64) uint64 { return 1<<48 | rev }

// mk builds an op; Seq is the call time, unique enough for these histories.
func mk(w int, kind history.Kind, key string, out history.Outcome, call, ret int64) history.Op {
	if out == history.Unknown {
		ret = 0
	}
	return history.Op{Worker: w, Seq: call, Kind: kind, Key: key, Outcome: out, Call: call, Return: ret}
}

func acq(w int, key string, tok uint64, out history.Outcome, call, ret int64) history.Op {
	op := mk(w, history.Acquire, key, out, call, ret)
	if out == history.Ok {
		op.Token = tok
	}
	return op
}

func chk(w int, key string, tok uint64, out history.Outcome, call, ret int64) history.Op {
	op := mk(w, history.Check, key, out, call, ret)
	op.Token = tok
	return op
}

func rel(w int, key string, tok uint64, out history.Outcome, call, ret int64) history.Op {
	op := mk(w, history.Release, key, out, call, ret)
	op.Token = tok
	return op
}

func wr(w int, key string, tok uint64, v int64, out history.Outcome, call, ret int64) history.Op {
	op := mk(w, history.Write, key, out, call, ret)
	op.Token, op.Value = tok, v
	return op
}

func rd(w int, key string, fence uint64, v int64, out history.Outcome, call, ret int64) history.Op {
	op := mk(w, history.Read, key, out, call, ret)
	if out == history.Ok {
		op.Fence, op.Value = fence, v
	}
	return op
}

const (
	ok  = history.Ok
	bad = history.Fail
	unk = history.Unknown
)

// cleanHistory is two workers taking turns on k1 while a third works on k2,
// doing read-modify-write under each grant.
func cleanHistory() []history.Op {
	return []history.Op{
		acq(1, "k1", t1(1), ok, 0, 10),
		acq(3, "k2", t1(2), ok, 1, 11),
		chk(1, "k1", t1(1), ok, 12, 13),
		rd(1, "k1", 0, 0, ok, 14, 15),
		wr(1, "k1", t1(1), 1, ok, 16, 17),
		chk(3, "k2", t1(2), ok, 16, 18),
		rd(3, "k2", 0, 0, ok, 19, 20),
		wr(3, "k2", t1(2), 7, ok, 21, 22),
		rel(1, "k1", t1(1), ok, 18, 19),
		acq(2, "k1", 0, bad, 5, 20), // waited while w1 held k1
		acq(2, "k1", t1(3), ok, 21, 25),
		chk(2, "k1", t1(3), ok, 26, 27),
		rd(2, "k1", t1(1), 1, ok, 28, 29),
		wr(2, "k1", t1(3), 2, ok, 30, 31),
		rel(2, "k1", t1(3), ok, 32, 33),
		rel(3, "k2", t1(2), ok, 23, 24),
	}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		ops        []history.Op
		lock, reg  porcupine.CheckResult
		violations int
		dups       int
	}{
		{name: "clean history", ops: cleanHistory(), lock: porcupine.Ok, reg: porcupine.Ok},
		{name: "empty history", lock: porcupine.Ok, reg: porcupine.Ok},

		// Lock model.
		{
			name: "two holders: older holder's check true after newer grant",
			ops: []history.Op{
				acq(1, "k1", t1(1), ok, 0, 10),
				acq(2, "k1", t1(2), ok, 20, 30),
				chk(1, "k1", t1(1), ok, 40, 50),
			},
			lock: porcupine.Illegal, reg: porcupine.Ok, violations: 1,
		},
		{
			name: "older holder's check concurrent with newer grant",
			ops: []history.Op{
				acq(1, "k1", t1(1), ok, 0, 10),
				acq(2, "k1", t1(2), ok, 20, 30),
				chk(1, "k1", t1(1), ok, 25, 50),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "older holder's check false after newer grant",
			ops: []history.Op{
				acq(1, "k1", t1(1), ok, 0, 10),
				acq(2, "k1", t1(2), ok, 20, 30),
				chk(1, "k1", t1(1), bad, 40, 50),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "acquire over a held key (lease expired unseen)",
			ops: []history.Op{
				acq(1, "k1", t1(1), ok, 0, 10),
				chk(1, "k1", t1(1), ok, 11, 12),
				acq(2, "k1", t1(2), ok, 20, 30),
				chk(2, "k1", t1(2), ok, 31, 32),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "release ok after newer grant",
			ops: []history.Op{
				acq(1, "k1", t1(1), ok, 0, 10),
				acq(2, "k1", t1(2), ok, 20, 30),
				rel(1, "k1", t1(1), ok, 40, 50),
			},
			lock: porcupine.Illegal, reg: porcupine.Ok, violations: 1,
		},
		{
			name: "stale release refused after newer grant",
			ops: []history.Op{
				acq(1, "k1", t1(1), ok, 0, 10),
				acq(2, "k1", t1(2), ok, 20, 30),
				rel(1, "k1", t1(1), bad, 40, 50),
				rel(2, "k1", t1(2), ok, 60, 70),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "released twice",
			ops: []history.Op{
				acq(1, "k1", t1(1), ok, 0, 10),
				rel(1, "k1", t1(1), ok, 20, 30),
				rel(1, "k1", t1(1), ok, 40, 50),
			},
			lock: porcupine.Illegal, reg: porcupine.Ok, violations: 1,
		},
		{
			name: "token goes backwards in real time",
			ops: []history.Op{
				acq(1, "k1", 10, ok, 0, 10),
				acq(2, "k1", 5, ok, 20, 30),
			},
			lock: porcupine.Illegal, reg: porcupine.Ok, violations: 1,
		},
		{
			name: "concurrent grants may return out of token order",
			ops: []history.Op{
				acq(1, "k1", 10, ok, 0, 30),
				acq(2, "k1", 5, ok, 10, 20),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "unknown lock operations impose nothing",
			ops: []history.Op{
				acq(1, "k1", t1(1), ok, 0, 10),
				acq(2, "k1", 0, unk, 5, 0),
				chk(1, "k1", t1(1), unk, 20, 0),
				rel(1, "k1", t1(1), unk, 30, 0),
				acq(3, "k1", t1(4), ok, 40, 50),
				chk(3, "k1", t1(4), ok, 51, 52),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},

		// Fenced store model.
		{
			name: "stale write accepted",
			ops: []history.Op{
				wr(1, "k1", 9, 90, ok, 0, 10),
				wr(2, "k1", 5, 50, ok, 20, 30),
			},
			lock: porcupine.Ok, reg: porcupine.Illegal, violations: 1,
		},
		{
			name: "stale write rejected",
			ops: []history.Op{
				wr(1, "k1", 9, 90, ok, 0, 10),
				wr(2, "k1", 5, 50, bad, 20, 30),
				rd(2, "k1", 9, 90, ok, 31, 32),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "fresh write rejected",
			ops: []history.Op{
				wr(1, "k1", 9, 90, ok, 0, 10),
				wr(2, "k1", 12, 120, bad, 20, 30),
			},
			lock: porcupine.Ok, reg: porcupine.Illegal, violations: 1,
		},
		{
			name: "same token written twice: second rejected",
			ops: []history.Op{
				wr(1, "k1", 9, 90, ok, 0, 10),
				wr(1, "k1", 9, 91, bad, 20, 30),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "read returns a value never written",
			ops: []history.Op{
				wr(1, "k1", 9, 90, ok, 0, 10),
				rd(2, "k1", 9, 91, ok, 20, 30),
			},
			lock: porcupine.Ok, reg: porcupine.Illegal, violations: 1,
		},
		{
			name: "read returns an overwritten value",
			ops: []history.Op{
				wr(1, "k1", 9, 90, ok, 0, 10),
				wr(2, "k1", 12, 120, ok, 20, 30),
				rd(3, "k1", 9, 90, ok, 40, 50),
			},
			lock: porcupine.Ok, reg: porcupine.Illegal, violations: 1,
		},
		{
			name: "failed and unknown reads impose nothing",
			ops: []history.Op{
				wr(1, "k1", 9, 90, ok, 0, 10),
				rd(2, "k1", 0, 0, bad, 20, 30),
				rd(2, "k1", 0, 0, unk, 40, 0),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "unknown write that applied",
			ops: []history.Op{
				wr(1, "k1", 9, 90, unk, 0, 0),
				rd(2, "k1", 9, 90, ok, 20, 30),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "unknown write that did not apply",
			ops: []history.Op{
				wr(1, "k1", 9, 90, unk, 0, 0),
				rd(2, "k1", 0, 0, ok, 20, 30),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "unknown write that applied late",
			ops: []history.Op{
				wr(1, "k1", 9, 90, unk, 0, 0),
				rd(2, "k1", 0, 0, ok, 20, 30),
				rd(2, "k1", 9, 90, ok, 40, 50),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "unknown write cannot be undone",
			ops: []history.Op{
				wr(1, "k1", 9, 90, unk, 0, 0),
				rd(2, "k1", 9, 90, ok, 20, 30),
				rd(2, "k1", 0, 0, ok, 40, 50),
			},
			lock: porcupine.Ok, reg: porcupine.Illegal, violations: 1,
		},
		{
			name: "unknown write explains a later rejection",
			ops: []history.Op{
				wr(1, "k1", 9, 90, unk, 0, 0),
				wr(2, "k1", 5, 50, bad, 20, 30),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "unknown write after a later acceptance",
			ops: []history.Op{
				wr(1, "k1", 9, 90, unk, 0, 0),
				wr(2, "k1", 5, 50, ok, 20, 30),
				rd(2, "k1", 9, 90, ok, 40, 50),
			},
			lock: porcupine.Ok, reg: porcupine.Ok,
		},
		{
			name: "unknown stale write cannot apply",
			ops: []history.Op{
				wr(1, "k1", 12, 120, ok, 0, 10),
				wr(2, "k1", 9, 90, unk, 20, 0),
				rd(3, "k1", 9, 90, ok, 30, 40),
			},
			lock: porcupine.Ok, reg: porcupine.Illegal, violations: 1,
		},

		// Token uniqueness.
		{
			// lockd's group commit grants the keys of one batch at one
			// revision: tokens are unique per key only.
			name: "one token on two keys (one batch)",
			ops: []history.Op{
				acq(1, "k1", t1(7), ok, 0, 10),
				acq(2, "k2", t1(7), ok, 5, 15),
			},
			lock: porcupine.Ok, reg: porcupine.Ok, violations: 0, dups: 0,
		},
		{
			name: "duplicate token on one key",
			ops: []history.Op{
				acq(1, "k1", t1(7), ok, 0, 10),
				acq(2, "k1", t1(7), ok, 20, 30),
			},
			lock: porcupine.Illegal, reg: porcupine.Ok, violations: 2, dups: 1,
		},
		{
			name: "illegal keys counted separately",
			ops: []history.Op{
				acq(1, "k1", 10, ok, 0, 10),
				acq(2, "k1", 5, ok, 20, 30),
				acq(1, "k2", 11, ok, 0, 10),
				acq(2, "k2", 6, ok, 20, 30),
				acq(3, "k3", 12, ok, 0, 10),
			},
			lock: porcupine.Illegal, reg: porcupine.Ok, violations: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(tc.ops, Options{Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if res.LockModel != string(tc.lock) || res.StoreModel != string(tc.reg) {
				t.Errorf("lock %s store %s, want %s %s", res.LockModel, res.StoreModel, tc.lock, tc.reg)
			}
			if res.Violations != tc.violations {
				t.Errorf("violations %d, want %d", res.Violations, tc.violations)
			}
			if len(res.DuplicateTokens) != tc.dups {
				t.Errorf("duplicate tokens %v, want %d", res.DuplicateTokens, tc.dups)
			}
			if res.Inconclusive != 0 {
				t.Errorf("inconclusive %d", res.Inconclusive)
			}
			if len(res.Details) != res.Violations {
				t.Errorf("details %q, want %d lines", res.Details, res.Violations)
			}
			if res.Passed() != (tc.violations == 0) {
				t.Errorf("passed %v", res.Passed())
			}
			if len(res.Visualizations) != 0 {
				t.Errorf("visualizations written without ArtifactsDir: %v", res.Visualizations)
			}
		})
	}
}

func TestDuplicateReport(t *testing.T) {
	res, err := Run([]history.Op{
		acq(1, "k1", t1(7), ok, 0, 10),
		acq(2, "k1", t1(7), ok, 20, 25),
		acq(3, "k1", t1(7), ok, 30, 36),
		acq(4, "k2", t1(7), ok, 5, 15),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Duplicate{
		{Token: t1(7), First: Grant{Worker: 1, Seq: 0, Key: "k1", Call: 0, Return: 10}, Second: Grant{Worker: 2, Seq: 20, Key: "k1", Call: 20, Return: 25}},
		{Token: t1(7), First: Grant{Worker: 1, Seq: 0, Key: "k1", Call: 0, Return: 10}, Second: Grant{Worker: 3, Seq: 30, Key: "k1", Call: 30, Return: 36}},
	}
	if len(res.DuplicateTokens) != len(want) {
		t.Fatalf("duplicates %+v, want %+v", res.DuplicateTokens, want)
	}
	for i := range want {
		if res.DuplicateTokens[i] != want[i] {
			t.Errorf("duplicate %d: %+v, want %+v", i, res.DuplicateTokens[i], want[i])
		}
	}
	// Two duplicates and the lock model's verdict on k1; k2's grant of the
	// same token is no duplicate.
	if res.Violations != 3 || !strings.Contains(res.Details[0], "1:7") || !strings.Contains(res.Details[0], "w2 acquire") {
		t.Errorf("violations %d details %q", res.Violations, res.Details)
	}
}

func TestDetails(t *testing.T) {
	res, err := Run([]history.Op{
		acq(1, "k1", t1(1), ok, 0, 10),
		acq(2, "k1", t1(2), ok, 20, 30),
		chk(1, "k1", t1(1), ok, 40, 50),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Details) != 1 {
		t.Fatalf("details %q", res.Details)
	}
	d := res.Details[0]
	for _, want := range []string{`lock model, key "k1"`, "2 of 3", "w2 acquire k1 → 1:2", "holder=1:2", "w1 check k1 1:1 → true"} {
		if !strings.Contains(d, want) {
			t.Errorf("detail %q lacks %q", d, want)
		}
	}
}

func TestVisualization(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "artifacts")
	ops := []history.Op{
		acq(1, "k1", t1(1), ok, 0, 10),
		wr(1, "k1", t1(1), 1, unk, 11, 0), // overlaps w1's later ops
		acq(2, "k1", t1(2), ok, 20, 30),
		wr(2, "k1", t1(2), 2, ok, 31, 35),
		chk(1, "k1", t1(1), ok, 40, 50),
		wr(1, "k1", t1(1), 3, ok, 51, 60),
		acq(3, "k2", t1(3), ok, 0, 10), // a clean key, left out of the files
	}
	res, err := Run(ops, Options{Timeout: 5 * time.Second, ArtifactsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.LockModel != string(porcupine.Illegal) || res.StoreModel != string(porcupine.Illegal) {
		t.Fatalf("lock %s store %s, want Illegal Illegal", res.LockModel, res.StoreModel)
	}
	want := []string{filepath.Join(dir, "lock.html"), filepath.Join(dir, "store.html")}
	if strings.Join(res.Visualizations, ",") != strings.Join(want, ",") {
		t.Fatalf("visualizations %v, want %v", res.Visualizations, want)
	}
	for _, p := range want {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Errorf("%s is empty", p)
		}
		if !strings.Contains(string(b), "w1 check k1 1:1") && !strings.Contains(string(b), "w1 write k1 1:1 v=3") {
			t.Errorf("%s lacks the operations' descriptions", p)
		}
	}
}

func TestNoVisualizationWhenOk(t *testing.T) {
	dir := t.TempDir()
	res, err := Run(cleanHistory(), Options{ArtifactsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed() || len(res.Visualizations) != 0 {
		t.Fatalf("result %+v", res)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files written for a clean history: %v", ents)
	}
}

// TestTimeout: many concurrent unknown writes and an impossible read make
// the search exponential; a short timeout makes the result inconclusive,
// and the visualisation is still written.
func TestTimeout(t *testing.T) {
	var ops []history.Op
	for i := range 40 {
		ops = append(ops, wr(i, "k1", uint64(i+1), int64(i), unk, int64(i), 0))
	}
	ops = append(ops, rd(99, "k1", 999, 0, ok, 100, 110))
	dir := t.TempDir()
	res, err := Run(ops, Options{Timeout: 50 * time.Millisecond, ArtifactsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.StoreModel != string(porcupine.Unknown) || res.Inconclusive != 1 || res.Violations != 0 || res.Passed() {
		t.Fatalf("store %s inconclusive %d violations %d", res.StoreModel, res.Inconclusive, res.Violations)
	}
	if len(res.Details) != 1 || !strings.Contains(res.Details[0], "timed out") {
		t.Errorf("details %q", res.Details)
	}
	if len(res.Visualizations) != 1 {
		t.Errorf("visualizations %v", res.Visualizations)
	}
}

func TestCounts(t *testing.T) {
	ops := append(cleanHistory(),
		wr(4, "k3", 1, 1, bad, 100, 110),
		wr(4, "k3", 1, 1, unk, 120, 0),
	)
	res, err := Run(ops, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Result{
		Ops: 18, Acquires: 4, Grants: 3, Checks: 3, Writes: 5, Accepted: 3, Rejected: 1, Unknown: 1, Keys: 3,
	}
	got := Result{
		Ops: res.Ops, Acquires: res.Acquires, Grants: res.Grants, Checks: res.Checks, Writes: res.Writes,
		Accepted: res.Accepted, Rejected: res.Rejected, Unknown: res.Unknown, Keys: res.Keys,
	}
	if got.Ops != want.Ops || got.Acquires != want.Acquires || got.Grants != want.Grants ||
		got.Checks != want.Checks || got.Writes != want.Writes || got.Accepted != want.Accepted ||
		got.Rejected != want.Rejected || got.Unknown != want.Unknown || got.Keys != want.Keys {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	// The rejected write with a fresh token is a violation.
	if res.StoreModel != string(porcupine.Illegal) {
		t.Errorf("store %s", res.StoreModel)
	}
}

func TestMalformed(t *testing.T) {
	for name, op := range map[string]history.Op{
		"unknown kind":           {Worker: 1, Kind: "lock", Key: "k1", Outcome: ok, Call: 1, Return: 2},
		"unknown outcome":        {Worker: 1, Kind: history.Read, Key: "k1", Outcome: "maybe", Call: 1, Return: 2},
		"no key":                 {Worker: 1, Kind: history.Read, Outcome: ok, Call: 1, Return: 2},
		"ok without return":      {Worker: 1, Kind: history.Read, Key: "k1", Outcome: ok, Call: 1},
		"return before its call": {Worker: 1, Kind: history.Read, Key: "k1", Outcome: ok, Call: 5, Return: 2},
	} {
		if _, err := Run([]history.Op{op}, Options{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestResultJSON(t *testing.T) {
	res, err := Run([]history.Op{
		acq(1, "k1", t1(7), ok, 0, 10),
		acq(2, "k1", t1(7), ok, 20, 30),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ops", "grants", "keys", "lock_model", "store_model", "duplicate_tokens", "violations", "inconclusive", "details"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON %s lacks %q", b, k)
		}
	}
	for k := range m {
		if strings.ToLower(k) != k {
			t.Errorf("JSON key %q is not lower-case", k)
		}
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || back.DuplicateTokens[0] != res.DuplicateTokens[0] {
		t.Errorf("round trip: %v %+v", err, back)
	}
}

func TestFormatToken(t *testing.T) {
	for tok, want := range map[uint64]string{0: "0:0", 42: "0:42", 1<<48 | 42: "1:42", 3<<48 | (1<<48 - 1): "3:281474976710655"} {
		if got := FormatToken(tok); got != want {
			t.Errorf("FormatToken(%#x) = %s, want %s", tok, got, want)
		}
	}
}

func TestAssignClients(t *testing.T) {
	var ops []porcupine.Operation
	for _, op := range []history.Op{
		wr(7, "k1", 1, 1, ok, 0, 10),
		wr(3, "k1", 2, 2, unk, 5, 0),
		wr(7, "k1", 3, 3, ok, 11, 20),
		wr(3, "k1", 4, 4, ok, 12, 30),
		wr(7, "k1", 5, 5, ok, 15, 25), // overlaps w7's previous op
	} {
		ops = append(ops, operation(op))
	}
	assignClients(ops)
	var got []int
	for _, op := range ops {
		got = append(got, op.ClientId)
	}
	want := []int{1, 2, 1, 0, 3}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("client ids %v, want %v", got, want)
		}
	}
}
