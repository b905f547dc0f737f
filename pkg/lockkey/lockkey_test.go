package lockkey

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		key  string
		rule string // substring of the error; empty means valid
	}{
		{"simple", "payments/ledger", ""},
		{"nested", "payments/ledger/acct-42", ""},
		{"all allowed characters", "ns/aZ09-_.:@=+~/x", ""},
		{"dots inside segment", "ns/.hidden/..x/a.b", ""},
		{"max length", "ns/" + strings.Repeat("a", MaxLen-3), ""},
		{"namespace 63 chars", strings.Repeat("a", 63) + "/x", ""},
		{"namespace digits and hyphen", "0-a-9/x", ""},

		{"empty", "", "must not be empty"},
		{"too long", "ns/" + strings.Repeat("a", MaxLen-2), "at most 512 bytes"},
		{"space", "ns/a b", "not allowed"},
		{"non-ascii", "ns/caf\u00e9", "not allowed"},
		{"backslash", `ns/a\b`, "not allowed"},
		{"star", "ns/a*", "not allowed"},
		{"leading slash", "/ns/a", "empty segment"},
		{"trailing slash", "ns/a/", "empty segment"},
		{"double slash", "ns//a", "empty segment"},
		{"dot segment", "ns/./a", `segment "."`},
		{"dotdot segment", "ns/a/..", `segment ".."`},
		{"dot namespace", "./a", `segment "."`},
		{"single segment", "payments", "at least two segments"},
		{"uppercase namespace", "Payments/x", "DNS label"},
		{"namespace leading hyphen", "-ns/x", "DNS label"},
		{"namespace trailing hyphen", "ns-/x", "DNS label"},
		{"namespace with dot", "a.b/x", "DNS label"},
		{"namespace with underscore", "a_b/x", "DNS label"},
		{"namespace 64 chars", strings.Repeat("a", 64) + "/x", "DNS label"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.key)
			if tt.rule == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrInvalidKey))
			require.Contains(t, err.Error(), tt.rule)
			require.True(t, strings.HasPrefix(err.Error(), "lockkey: "))
		})
	}
}

func TestValidatePrefix(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		rule   string
	}{
		{"namespace only", "payments/", ""},
		{"nested", "payments/ledger/", ""},
		{"partial segment still ends with slash", "payments/led/", ""},
		{"max length", "ns/" + strings.Repeat("a", MaxLen-4) + "/", ""},

		{"empty", "", "must not be empty"},
		{"no trailing slash", "payments/ledger", `must end with "/"`},
		{"bare slash", "/", "must not be empty"},
		{"too long", "ns/" + strings.Repeat("a", MaxLen-3) + "/", "at most 512 bytes"},
		{"double trailing slash", "payments//", "empty segment"},
		{"leading slash", "/payments/", "empty segment"},
		{"dotdot", "payments/../", `segment ".."`},
		{"bad namespace", "Pay/", "DNS label"},
		{"bad character", "ns/a%/", "not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidatePrefix(tt.prefix)
			if tt.rule == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidKey)
			require.Contains(t, err.Error(), tt.rule)
		})
	}
}

func TestNamespace(t *testing.T) {
	tests := []struct{ key, want string }{
		{"payments/ledger", "payments"},
		{"payments/a/b", "payments"},
		{"payments", "payments"},
		{"payments/", "payments"},
		{"", ""},
		{"/x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			require.Equal(t, tt.want, Namespace(tt.key))
		})
	}
}

func TestIsDNSLabel(t *testing.T) {
	tests := []struct {
		s    string
		want bool
	}{
		{"a", true},
		{"a-b", true},
		{"0", true},
		{"", false},
		{"-", false},
		{"A", false},
		{"a_b", false},
		{strings.Repeat("x", 63), true},
		{strings.Repeat("x", 64), false},
	}
	for _, tt := range tests {
		t.Run(tt.s, func(t *testing.T) {
			require.Equal(t, tt.want, IsDNSLabel(tt.s))
		})
	}
}

func TestValidateDoesNotAllocate(t *testing.T) {
	key := "payments/ledger/acct-42:eu@v1"
	allocs := testing.AllocsPerRun(100, func() {
		if err := Validate(key); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

func BenchmarkValidate(b *testing.B) {
	key := "payments/ledger/accounts/acct-000042:eu-west-1@v1"
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(key); err != nil {
			b.Fatal(err)
		}
	}
}
