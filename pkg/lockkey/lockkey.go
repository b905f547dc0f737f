// Package lockkey validates lock keys.
//
// A lock key has the form "<namespace>/<path>": at least two segments
// separated by "/", where the first segment (the namespace) is a DNS label.
// Listing prefixes (see [ValidatePrefix]) follow the same rules but end
// with "/".
package lockkey

import (
	"errors"
	"fmt"
	"strings"
)

// MaxLen is the maximum length of a key or prefix, in bytes.
const MaxLen = 512

// Separator separates the segments of a key.
const Separator = '/'

// ErrInvalidKey is wrapped by every error returned by [Validate] and
// [ValidatePrefix].
var ErrInvalidKey = errors.New("lockkey: invalid key")

// allowed reports, per byte, whether it may appear inside a segment.
var allowed = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-_.:@=+~" {
		t[c] = true
	}
	return t
}()

// Validate reports whether key is a valid lock key. The returned error
// wraps [ErrInvalidKey] and names the rule that was broken. Validate does
// not allocate when key is valid.
func Validate(key string) error {
	return validate(key, 2)
}

// ValidatePrefix reports whether p is a valid listing prefix: it must end
// with "/" and, without that trailing "/", follow the rules of [Validate],
// except that it may consist of the namespace alone (e.g. "payments/").
func ValidatePrefix(p string) error {
	if p == "" {
		return invalid("must not be empty")
	}
	if p[len(p)-1] != Separator {
		return invalid("prefix must end with \"/\"")
	}
	if len(p) > MaxLen {
		return invalid(fmt.Sprintf("must be at most %d bytes long, got %d", MaxLen, len(p)))
	}
	return validate(p[:len(p)-1], 1)
}

// Namespace returns the first segment of key: everything before the first
// "/", or the whole key if it has no "/".
func Namespace(key string) string {
	if i := strings.IndexByte(key, Separator); i >= 0 {
		return key[:i]
	}
	return key
}

// IsDNSLabel reports whether s is a DNS label as used for namespaces:
// 1 to 63 characters of [a-z0-9-], starting and ending with [a-z0-9].
func IsDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// validate checks s (without any trailing "/" of a prefix) against the key
// rules, requiring at least minSegments segments.
func validate(s string, minSegments int) error {
	if s == "" {
		return invalid("must not be empty")
	}
	if len(s) > MaxLen {
		return invalid(fmt.Sprintf("must be at most %d bytes long, got %d", MaxLen, len(s)))
	}
	segments := 0
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != Separator {
			if !allowed[s[i]] {
				return invalid(fmt.Sprintf("character %q at byte %d is not allowed (allowed: letters, digits, \"-_.:@=+~\" and \"/\" as separator)", s[i], i))
			}
			continue
		}
		seg := s[start:i]
		switch seg {
		case "":
			return invalid(fmt.Sprintf("empty segment at byte %d (no leading, trailing or double \"/\")", start))
		case ".", "..":
			return invalid(fmt.Sprintf("segment %q at byte %d is not allowed", seg, start))
		}
		if segments == 0 && !IsDNSLabel(seg) {
			return invalid(fmt.Sprintf("namespace %q must be a DNS label ([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)", seg))
		}
		segments++
		start = i + 1
	}
	if segments < minSegments {
		return invalid("must have at least two segments: <namespace>/<path>")
	}
	return nil
}

func invalid(rule string) error {
	return fmt.Errorf("%w: %s", ErrInvalidKey, rule)
}
