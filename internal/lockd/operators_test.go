package lockd

import (
	"log/slog"
	"strings"
	"testing"
)

func TestOperatorsDefaultToTwoDevOperatorsOnTheDevPKI(t *testing.T) {
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	if got := operators(&Config{}, logger); len(got) != 2 || got[0] == got[1] {
		t.Fatalf("dev PKI operators = %v, want two distinct", got)
	}
	if !strings.Contains(logs.String(), "dev operator SVIDs stand in") {
		t.Fatalf("lockd does not say that dev operators stand in: %q", logs.String())
	}
	if got := operators(&Config{Operators: []string{"spiffe://x/ops"}}, logger); len(got) != 1 {
		t.Fatalf("--operators ignored: %v", got)
	}
	if got := operators(&Config{InsecureLoopback: true}, logger); len(got) != 0 {
		t.Fatalf("operators outside the dev PKI without --operators: %v", got)
	}
}
