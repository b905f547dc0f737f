package arbiter

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestValidateLimitsPerIdentity: each identity has its own bucket, and the
// bucket refills with time (an injected clock).
func TestValidateLimitsPerIdentity(t *testing.T) {
	l := validateLimits{rate: rate.Limit(10), burst: 3}
	now := time.Unix(1_000_000, 0)
	for i := range 3 {
		if !l.allow("spiffe://x/a", now) {
			t.Fatalf("call %d within the burst refused", i)
		}
	}
	if l.allow("spiffe://x/a", now) {
		t.Fatal("call past the burst allowed")
	}
	if !l.allow("spiffe://x/b", now) {
		t.Fatal("another identity shares the first one's bucket")
	}
	if !l.allow("spiffe://x/a", now.Add(100*time.Millisecond)) {
		t.Fatal("bucket did not refill after 1/rate")
	}
}
