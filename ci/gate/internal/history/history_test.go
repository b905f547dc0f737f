package history

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestRecorderRoundTripAndOpenInvocations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.jsonl")
	r, err := Create(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	a := r.Begin(Acquire, "gate/k0", 0, 0)
	a.Token = 1<<48 | 7
	r.End(a, Ok)
	w := r.Begin(Write, "gate/k0", 1<<48|7, 42)
	r.End(w, Unknown)
	r.Begin(Release, "gate/k0", 1<<48|7, 0) // never completes: the process died
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	ops, err := ParseFiles([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 3 {
		t.Fatalf("got %d ops, want 3: %+v", len(ops), ops)
	}
	if ops[0].Kind != Acquire || ops[0].Outcome != Ok || ops[0].Token != 1<<48|7 || ops[0].Return < ops[0].Call || ops[0].Worker != 3 {
		t.Fatalf("acquire = %+v", ops[0])
	}
	if ops[1].Outcome != Unknown || ops[1].Return != 0 {
		t.Fatalf("unknown write = %+v", ops[1])
	}
	if ops[2].Kind != Release || ops[2].Outcome != Unknown || ops[2].Return != 0 {
		t.Fatalf("open invocation = %+v", ops[2])
	}
}

func TestParseTornLastLineIsAnOpenInvocation(t *testing.T) {
	in := `{"worker":0,"seq":1,"kind":"acquire","key":"k","outcome":"","call":5,"done":false}
{"worker":0,"seq":1,"kind":"acq`
	ops, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0].Outcome != Unknown {
		t.Fatalf("ops = %+v", ops)
	}
}

func TestNowIsMonotonicAcrossCalls(t *testing.T) {
	a := Now()
	b := Now()
	if a <= 0 || b < a {
		t.Fatalf("Now() = %d then %d", a, b)
	}
}
