package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

func TestDialTarget(t *testing.T) {
	tests := []struct {
		target  string
		routed  bool
		wantErr string
	}{
		{target: "127.0.0.1:7420"},
		{target: "lockd.example:7420"},
		{target: "dns:///lockd.example:7420", routed: true},
		{target: "10.0.0.1:7420,10.0.0.2:7420, 10.0.0.3:7420", routed: true},
		{target: "10.0.0.1:7420,10.0.0.2", wantErr: `lockd address "10.0.0.2"`},
		{target: "10.0.0.1:7420,,10.0.0.2:7420", wantErr: `lockd address ""`},
		{target: "10.0.0.1:7420,10.0.0.1:7420", wantErr: "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			dial, opts, routed, err := dialTarget(tt.target)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrConfig saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || routed != tt.routed || (routed && len(opts) == 0) || (!routed && (dial != tt.target || opts != nil)) {
				t.Fatalf("dialTarget = %q, %d options, routed %v, %v", dial, len(opts), routed, err)
			}
		})
	}
}

func TestEveryCallAboutAKeySendsIt(t *testing.T) {
	routeOf := func(ctx context.Context) []string {
		md, _ := metadata.FromOutgoingContext(ctx)
		return md.Get(RouteHeader)
	}
	var got []string
	tests := []struct {
		name string
		ctx  context.Context
		req  any
		want []string
	}{
		{"acquire", context.Background(), &lockv1.AcquireRequest{Key: "t/a"}, []string{"t/a"}},
		{"release", context.Background(), &lockv1.ReleaseRequest{Key: "t/a"}, []string{"t/a"}},
		{"inspect", context.Background(), &lockv1.InspectRequest{Key: "t/a"}, []string{"t/a"}},
		{"validate", context.Background(), &lockv1.ValidateTokenRequest{Key: "t/a"}, []string{"t/a"}},
		{"force-release", context.Background(), &lockv1.RequestForceReleaseRequest{Key: "t/a"}, []string{"t/a"}},
		{"no key", context.Background(), &lockv1.OpenSessionRequest{}, nil},
		{"routed already", withRoute(context.Background(), "t/b"), &lockv1.AcquireRequest{Key: "t/a"}, []string{"t/b"}},
		{"not a header value", context.Background(), &lockv1.AcquireRequest{Key: "t/a b\n"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got = nil
			err := routeUnary(tt.ctx, "/m", tt.req, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				got = routeOf(ctx)
				return nil
			})
			if err != nil || strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("routed by %v, want %v", got, tt.want)
			}
		})
	}
}
