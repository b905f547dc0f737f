package arbiter_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// BenchmarkGrantRelease measures an uncontended Acquire + Release pair
// through gRPC and the arbiter into an embedded etcd (fsync on). Run with
// -cpu to vary the parallelism, e.g.
//
//	go test -run '^$' -bench GrantRelease -benchtime 3s ./internal/arbiter
func BenchmarkGrantRelease(b *testing.B) {
	env := lockdtest.Start(b, lockdtest.Options{})
	lc, _ := env.Raw(b, lockdtest.Alice)
	resp, err := lc.OpenSession(b.Context(), openReq(15*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	sid := resp.GetSessionId()
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("t/bench/%d", n.Add(1))
		for pb.Next() {
			g, err := lc.Acquire(b.Context(), &lockv1.AcquireRequest{SessionId: sid, Key: key, Class: "std"})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := lc.Release(b.Context(), &lockv1.ReleaseRequest{SessionId: sid, Key: key, Token: g.GetToken().GetValue()}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}
