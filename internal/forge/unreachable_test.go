package forge_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/forge"
)

// TestUnreachable: a refused connection and a 5xx wrap ErrUnreachable and
// name the URL; a 4xx (Gitea answered) does not wrap it.
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
	for _, tt := range []struct {
		name string
		url  string
		want bool
	}{
		{"refused", closed, true},
		{"5xx", status(http.StatusBadGateway), true},
		{"4xx", status(http.StatusUnauthorized), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := forge.New(forge.Config{URL: tt.url, Token: "t0ken", HTTPClient: &http.Client{Timeout: 10 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Upsert(context.Background(), forge.PR{Owner: "a", Repo: "b", Index: 1}, marker, "body")
			if err == nil {
				t.Fatal("no error")
			}
			if got := errors.Is(err, forge.ErrUnreachable); got != tt.want {
				t.Fatalf("errors.Is(%v, ErrUnreachable) = %v, want %v", err, got, tt.want)
			}
		})
	}
}
