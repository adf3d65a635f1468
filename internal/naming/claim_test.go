// SPDX-License-Identifier: Apache-2.0

package naming

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestForKeepsTheCommonForm(t *testing.T) {
	tests := []struct{ owner, network, want string }{
		{"vm1", "blue", "vm1.blue"},
		{"my-vm", "net-1", "my-vm.net-1"},
		{strings.Repeat("a", 63), strings.Repeat("b", 63), strings.Repeat("a", 63) + "." + strings.Repeat("b", 63)},
	}
	for _, tt := range tests {
		if got := Claim(tt.owner, tt.network); got != tt.want {
			t.Errorf("Claim(%q, %q) = %q, want %q", tt.owner, tt.network, got, tt.want)
		}
	}
}

// The pairs below collide under the plain "<vm>.<network>" concatenation
// other tools use; here every pair gets its own valid name.
func TestForNeverSharesANameBetweenPairs(t *testing.T) {
	long := strings.Repeat("v", 253)
	pairs := [][2]string{
		{"vm.net", "a"}, {"vm", "net.a"}, {"vm.net.a", ""}, {"vm", "net-a"},
		{"vm", "my_net"}, {"vm", "my-net"}, {"vm", "my.net"},
		{"vm", "Net"}, {"vm", "net"}, {"vm", "NET"},
		{"vm", "-net"}, {"vm", "net-"}, {"vm", "_"}, {"vm", "__"}, {"vm", ""},
		{long, "net"}, {long, "net2"}, {long[:252], "net"},
		{"a", strings.Repeat("n", 63)}, {"a", strings.Repeat("n", 64)}, {"a", strings.Repeat("n", 65)},
		{"vm", "ünïcode"}, {"vm", "unicode"},
		{"x.y", "z"}, {"x", "y.z"}, {"x-y", "z"}, {"x", "y-z"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		name := Claim(p[0], p[1])
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("Claim(%q, %q) = %q is not a valid object name: %v", p[0], p[1], name, errs)
		}
		if prev, ok := seen[name]; ok {
			t.Errorf("Claim(%q, %q) and Claim(%q, %q) both give %q", prev[0], prev[1], p[0], p[1], name)
		}
		seen[name] = p
	}
}

func TestForHashedFormIsReadableAndStable(t *testing.T) {
	got := Claim("vm.net", "a")
	if !strings.HasPrefix(got, "vm-net.a.") || strings.Count(got, ".") != 2 {
		t.Errorf("Claim(vm.net, a) = %q, want vm-net.a.<hash>", got)
	}
	if again := Claim("vm.net", "a"); again != got {
		t.Errorf("not deterministic: %q then %q", got, again)
	}
	if got := Claim("vm", "My_Net"); !strings.HasPrefix(got, "vm.my-net.") {
		t.Errorf("Claim(vm, My_Net) = %q, want the hint my-net", got)
	}
}

func FuzzFor(f *testing.F) {
	f.Add("vm.net", "a", "vm", "net.a")
	f.Add("vm", "Net", "vm", "net")
	f.Add(strings.Repeat("a", 253), "n", "a", "n")
	f.Fuzz(func(t *testing.T, o1, n1, o2, n2 string) {
		if strings.Contains(o1, "/") || strings.Contains(o2, "/") {
			t.Skip("object names cannot contain '/'")
		}
		a, b := Claim(o1, n1), Claim(o2, n2)
		for _, name := range []string{a, b} {
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				t.Fatalf("%q is not a valid object name: %v", name, errs)
			}
		}
		if a == b && (o1 != o2 || n1 != n2) {
			t.Fatalf("Claim(%q, %q) == Claim(%q, %q) == %q", o1, n1, o2, n2, a)
		}
	})
}
