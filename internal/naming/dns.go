// SPDX-License-Identifier: Apache-2.0

// The two DNS-1123 helpers the names are built from: whether a string
// already is a label, and a readable label hint derived from any string.

package naming

import "strings"

// IsLabel reports whether s is an RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 chars.
func isLabel(s string) bool {
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

// Hint keeps up to max characters of s as a DNS label (lowercased, other
// characters as '-'), or fallback when nothing survives. It is lossy: names
// built from hints need a hash beside them to stay unique.
func hint(s string, maxLen int, fallback string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if b.Len() >= maxLen {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	if h := strings.Trim(b.String(), "-"); h != "" {
		return h
	}
	return fallback
}
