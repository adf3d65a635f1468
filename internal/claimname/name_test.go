package claimname

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
		if got := For(tt.owner, tt.network); got != tt.want {
			t.Errorf("For(%q, %q) = %q, want %q", tt.owner, tt.network, got, tt.want)
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
		name := For(p[0], p[1])
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("For(%q, %q) = %q is not a valid object name: %v", p[0], p[1], name, errs)
		}
		if prev, ok := seen[name]; ok {
			t.Errorf("For(%q, %q) and For(%q, %q) both give %q", prev[0], prev[1], p[0], p[1], name)
		}
		seen[name] = p
	}
}

func TestForHashedFormIsReadableAndStable(t *testing.T) {
	got := For("vm.net", "a")
	if !strings.HasPrefix(got, "vm-net.a.") || strings.Count(got, ".") != 2 {
		t.Errorf("For(vm.net, a) = %q, want vm-net.a.<hash>", got)
	}
	if again := For("vm.net", "a"); again != got {
		t.Errorf("not deterministic: %q then %q", got, again)
	}
	if got := For("vm", "My_Net"); !strings.HasPrefix(got, "vm.my-net.") {
		t.Errorf("For(vm, My_Net) = %q, want the hint my-net", got)
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
		a, b := For(o1, n1), For(o2, n2)
		for _, name := range []string{a, b} {
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				t.Fatalf("%q is not a valid object name: %v", name, errs)
			}
		}
		if a == b && (o1 != o2 || n1 != n2) {
			t.Fatalf("For(%q, %q) == For(%q, %q) == %q", o1, n1, o2, n2, a)
		}
	})
}
