package cost

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestUnreachable: a refused connection, a timeout and a 5xx wrap
// ErrUnreachable; a 4xx (Prometheus answered: the query is wrong) does not.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	status := func(code int) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
		t.Cleanup(s.Close)
		return s.URL
	}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	}))
	t.Cleanup(slow.Close)

	for _, tt := range []struct {
		name    string
		url     string
		timeout time.Duration
		want    bool
	}{
		{"refused", closed, 0, true},
		{"5xx", status(http.StatusServiceUnavailable), 0, true},
		{"timeout", slow.URL, 100 * time.Millisecond, true},
		{"4xx", status(http.StatusNotFound), 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPrometheus(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			_, err = p.Sessions(ctx)
			if err == nil {
				t.Fatal("no error")
			}
			if got := errors.Is(err, ErrUnreachable); got != tt.want {
				t.Fatalf("errors.Is(%v, ErrUnreachable) = %v, want %v", err, got, tt.want)
			}
		})
	}
}
