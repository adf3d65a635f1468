// SPDX-License-Identifier: Apache-2.0

package naming

import (
	"strings"
	"testing"
)

func TestIsLabel(t *testing.T) {
	for s, want := range map[string]bool{
		"a": true, "a-b": true, "0a": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "a-": false, "A": false, "a_b": false, "a.b": false, strings.Repeat("a", 64): false,
	} {
		if got := isLabel(s); got != want {
			t.Errorf("isLabel(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestHint(t *testing.T) {
	tests := []struct{ in, want string }{
		{"My_N", "my-n"}, {"__", "fb"}, {"", "fb"}, {"abcdefghij", "abcde"}, {"ab.", "ab"},
	}
	for _, tt := range tests {
		got := hint(tt.in, 5, "fb")
		if got != tt.want {
			t.Errorf("hint(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if !isLabel(got) {
			t.Errorf("hint(%q) = %q is not a label", tt.in, got)
		}
	}
}
