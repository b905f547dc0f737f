package lockkey

import (
	"errors"
	"strings"
	"testing"
)

// FuzzKeyRulesAgree: for any bytes, Validate, ValidatePrefix and Namespace
// never panic, every refusal wraps ErrInvalidKey, and the three agree:
//
//   - a valid key's namespace is a DNS label, and the key with "/" added is
//     a valid prefix, unless that makes it longer than MaxLen (a key of
//     exactly MaxLen bytes: no key can be under the 513-byte prefix, which
//     is refused for its length);
//   - a valid prefix's namespace is a DNS label, and the prefix with one
//     more character is a valid key when that fits in MaxLen.
//
// The seeds are keys and prefixes in the forms the docs and classes/ use,
// and the edges of the rules (length, empty segments, case).
func FuzzKeyRulesAgree(f *testing.F) {
	f.Add("payments/ledger/acct-42")
	f.Add("payments/")
	f.Add("platform/deploy/prod/eu-west-1")
	f.Add("t/carol/x")
	f.Add("Payments/x")
	f.Add("payments//x")
	f.Add("payments/x/")
	f.Add("payments/" + strings.Repeat("k", MaxLen-len("payments/")))
	f.Add("-bad/x")
	f.Add("payments/\x00")
	f.Fuzz(func(t *testing.T, s string) {
		keyErr := Validate(s)
		prefixErr := ValidatePrefix(s)
		ns := Namespace(s)
		for what, err := range map[string]error{"Validate": keyErr, "ValidatePrefix": prefixErr} {
			if err != nil && (!errors.Is(err, ErrInvalidKey) || !strings.HasPrefix(err.Error(), "lockkey: invalid key: ")) {
				t.Fatalf("%s(%q) = %v: does not wrap ErrInvalidKey", what, s, err)
			}
		}
		if !strings.HasPrefix(s, ns) {
			t.Fatalf("Namespace(%q) = %q, not a prefix of it", s, ns)
		}
		if keyErr == nil {
			if !IsDNSLabel(ns) {
				t.Fatalf("Validate(%q) = nil, but its namespace %q is not a DNS label", s, ns)
			}
			switch err := ValidatePrefix(s + "/"); {
			case len(s) < MaxLen && err != nil:
				t.Fatalf("Validate(%q) = nil, but ValidatePrefix of it with \"/\" = %v", s, err)
			case len(s) == MaxLen && (err == nil || !strings.Contains(err.Error(), "at most 512 bytes")):
				t.Fatalf("a %d-byte key with \"/\" is %d bytes: ValidatePrefix = %v, want a refusal for its length", len(s), len(s)+1, err)
			}
		}
		if prefixErr == nil {
			if !IsDNSLabel(ns) {
				t.Fatalf("ValidatePrefix(%q) = nil, but its namespace %q is not a DNS label", s, ns)
			}
			if err := Validate(s + "x"); len(s) < MaxLen && err != nil {
				t.Fatalf("ValidatePrefix(%q) = nil, but Validate of it with one more character = %v", s, err)
			}
		}
	})
}
