package lockdtest

import (
	"net"
	"testing"
)

// TestStartEmbeddedTriesAgainWhenItsPortWasTakenMeanwhile: the client port
// FreeAddr gave is bound by someone else before etcd binds it (as another
// package's test process did in CI); the member starts on the next
// addresses instead of failing the test.
func TestStartEmbeddedTriesAgainWhenItsPortWasTakenMeanwhile(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	b, err := startEmbedded(t.TempDir(), func() (string, string) {
		calls++
		if calls == 1 {
			return taken.Addr().String(), FreeAddr(t)
		}
		return FreeAddr(t), FreeAddr(t)
	})
	if err != nil {
		t.Fatalf("start after a taken port: %v", err)
	}
	defer b.Close()
	if calls != 2 {
		t.Fatalf("addresses asked %d times; want 2 (the taken one, then new ones)", calls)
	}
}
