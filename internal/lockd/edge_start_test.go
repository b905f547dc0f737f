package lockd_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/lockd-dev/lockd/internal/devpki"
	"github.com/lockd-dev/lockd/internal/identity"
	"github.com/lockd-dev/lockd/internal/lockd"
	"github.com/lockd-dev/lockd/pkg/lockdtest"
	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TestALockdBehindTheEdgeServesTheCallerItForwards runs the assembly with
// --edge-identity over the dev PKI: the edge's SVID with Envoy's XFCC opens
// a session for the forwarded caller, the edge without one is refused, and
// the same header from a workload's own SVID changes nothing.
func TestALockdBehindTheEdgeServesTheCallerItForwards(t *testing.T) {
	const (
		edge   = "spiffe://lockd.local/ns/lockd/sa/envoy"
		caller = "spiffe://lockd.local/payments/worker"
	)
	b := lockdtest.StartEmbedded(t, t.TempDir())
	t.Cleanup(b.Close)
	cfg := lockd.DefaultConfig()
	cfg.DataDir, cfg.ClassesDir = t.TempDir(), t.TempDir()
	lockdtest.WriteClasses(t, cfg.ClassesDir)
	cfg.Listen, cfg.MetricsListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Backend, cfg.Audit.Mode = b, lockd.AuditOff
	cfg.EdgeIdentities = []string{edge}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	d, err := lockd.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Serve()
	t.Cleanup(d.Close)

	pki := filepath.Join(cfg.DataDir, "pki")
	edgeCert, edgeKey, err := devpki.IssueSVID(pki, edge, t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dial := func(cert, key string) lockv1.LockServiceClient {
		tlsCfg, err := identity.ClientTLS(filepath.Join(pki, "ca.crt"), cert, key, "")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return lockv1.NewLockServiceClient(conn)
	}
	asEdge := dial(edgeCert, edgeKey)
	asDev := dial(filepath.Join(pki, "dev.crt"), filepath.Join(pki, "dev.key"))
	xfcc := func(id string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, identity.XFCCHeader,
			fmt.Sprintf("By=%s;Hash=468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688;URI=%s", edge, id))
	}
	open := &lockv1.OpenSessionRequest{Ttl: durationpb.New(10 * time.Second)}

	// sessionsOf opens a session in rctx and says whose sessions its
	// caller sees.
	sessionsOf := func(t *testing.T, c lockv1.LockServiceClient, rctx context.Context) []string {
		t.Helper()
		if _, err := c.OpenSession(rctx, open); err != nil {
			t.Fatalf("OpenSession: %v", err)
		}
		resp, err := c.ListSessions(rctx, &lockv1.ListSessionsRequest{})
		if err != nil {
			t.Fatalf("ListSessions: %v", err)
		}
		var ids []string
		for _, s := range resp.GetSessions() {
			ids = append(ids, s.GetIdentity())
		}
		if len(ids) == 0 {
			t.Fatal("ListSessions: not even the session just opened")
		}
		return ids
	}

	t.Run("the edge with XFCC is the caller it forwards", func(t *testing.T) {
		for _, id := range sessionsOf(t, asEdge, xfcc(caller)) {
			if id != caller {
				t.Fatalf("a session of %s; want only %s's", id, caller)
			}
		}
	})
	t.Run("the edge without XFCC is refused", func(t *testing.T) {
		if _, err := asEdge.OpenSession(ctx, open); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("OpenSession from the edge without XFCC: %v; want Unauthenticated", err)
		}
	})
	t.Run("a workload's XFCC is ignored", func(t *testing.T) {
		for _, id := range sessionsOf(t, asDev, xfcc(caller)) {
			if id != lockd.DevSPIFFEID {
				t.Fatalf("a session of %s; want only %s's", id, lockd.DevSPIFFEID)
			}
		}
	})
}
