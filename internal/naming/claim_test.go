// SPDX-License-Identifier: Apache-2.0

package naming

import (
	"errors"
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

func TestSwappedClaimNeverSharesANameWithClaimOrAnotherTriple(t *testing.T) {
	triples := [][3]string{
		{"vm", "blue", "net-a"}, {"vm", "blue", "net-b"}, {"vm", "blue", "Net_A"},
		{"vm", "blue.net", "a"}, {"vm.blue", "net", "a"}, {"vm", "blue", "net.a"},
		{"vm", "", ""}, {"vm", "blue", ""}, {strings.Repeat("v", 253), "blue", strings.Repeat("n", 300)},
	}
	seen := map[string]string{}
	for _, tr := range triples {
		name := SwappedClaim(tr[0], tr[1], tr[2])
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("SwappedClaim(%q) = %q is not a valid object name: %v", tr, name, errs)
		}
		if strings.Count(name, ".") != 3 {
			t.Errorf("SwappedClaim(%q) = %q, want four labels (Claim's names have two or three)", tr, name)
		}
		if prev, ok := seen[name]; ok {
			t.Errorf("SwappedClaim(%q) and %s both give %q", tr, prev, name)
		}
		seen[name] = "SwappedClaim" + strings.Join(tr[:], ",")
		if plain := Claim(tr[0], tr[1]); plain == name {
			t.Errorf("SwappedClaim(%q) = Claim(%q, %q)", tr, tr[0], tr[1])
		}
	}
	if got := SwappedClaim("vm1", "blue", "net-b"); !strings.HasPrefix(got, "vm1.blue.net-b.") {
		t.Errorf("SwappedClaim(vm1, blue, net-b) = %q, want the readable prefix vm1.blue.net-b.", got)
	}
}

func TestClaimFor(t *testing.T) {
	plain, swappedA, swappedB := Claim("vm1", "blue"), SwappedClaim("vm1", "blue", "net-a"), SwappedClaim("vm1", "blue", "net-b")
	tests := []struct {
		name     string
		existing map[string]string // claim name -> spec.network
		network  string
		want     string
	}{
		{"no claim yet: the usual name", nil, "net-a", plain},
		{"the usual name already on this network", map[string]string{plain: "net-a"}, "net-a", plain},
		{"same CNI network through another NAD: the same claim", map[string]string{plain: "net-a"}, "net-a", plain},
		{"swap to another network while the old claim is held", map[string]string{plain: "net-a"}, "net-b", swappedB},
		{"after the swap, the old claim released: the new network keeps its claim", map[string]string{swappedB: "net-b"}, "net-b", swappedB},
		{"swap back before the old claim was released", map[string]string{plain: "net-a", swappedB: "net-b"}, "net-a", plain},
		{"swap back after it was released: the usual name, free again", map[string]string{swappedB: "net-b"}, "net-a", plain},
		{"both networks held, during the migration", map[string]string{plain: "net-a", swappedB: "net-b"}, "net-b", swappedB},
		{"a claim made by another tool, without spec.network", map[string]string{plain: ""}, "net-b", plain},
		{"a third network while two are held", map[string]string{plain: "net-b", swappedA: "net-a"}, "net-c", SwappedClaim("vm1", "blue", "net-c")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			read := func(name string) (string, bool, error) {
				n, ok := tt.existing[name]
				return n, ok, nil
			}
			got, err := ClaimFor("vm1", "blue", tt.network, read, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ClaimFor(vm1, blue, %q) with %v = %q, want %q", tt.network, tt.existing, got, tt.want)
			}
			if n, ok := tt.existing[got]; ok && n != "" && n != tt.network {
				t.Errorf("chose %q, a claim of network %q, for network %q", got, n, tt.network)
			}
		})
	}
}

func TestClaimForPassesReadErrorsOn(t *testing.T) {
	boom := errors.New("cache not synced")
	if _, err := ClaimFor("vm1", "blue", "net-a", func(string) (string, bool, error) { return "", false, boom }, nil); !errors.Is(err, boom) {
		t.Errorf("err = %v, want %v", err, boom)
	}
}

// ipam-extensions v0.6.0's claims.ComposeKey, case by case: the same as
// Claim's name for DNS labels, lossy otherwise.
func TestExtensionsClaimIsIPAMExtensionsName(t *testing.T) {
	long := strings.Repeat("a", 250)
	for _, tt := range []struct{ owner, network, want string }{
		{"vm1", "blue", "vm1.blue"},
		{"vm1", "Chaos_Odd.Net", "vm1.chaos.odd.net"},
		{"My_VM", "blue", "my.vm.blue"},
		{"vm.a", "blue", "vm.a.blue"},
		{"a", "b.c", "a.b.c"},
		{"a.b", "c", "a.b.c"},
		{"vm", "-net-", "vm.net"},
		{long, "blue", long + ".bl"},
	} {
		if got := ExtensionsClaim(tt.owner, tt.network); got != tt.want {
			t.Errorf("ExtensionsClaim(%q, %q) = %q, want %q", tt.owner, tt.network, got, tt.want)
		}
	}
}

// A claim of ipam-extensions' name that the owner holds is kept (the VM
// keeps its addresses when ipkeeper takes over); one the owner does not
// hold, or of another network, is not.
func TestClaimForKeepsTheOwnersIPAMExtensionsClaim(t *testing.T) {
	const ext = "vm1.chaos.odd.net"
	plain := Claim("vm1", "Chaos_Odd.Net")
	for _, tt := range []struct {
		name     string
		mine     map[string]string
		existing map[string]string
		want     string
	}{
		{"the owner's, same network", map[string]string{ext: "net-a"}, map[string]string{ext: "net-a"}, ext},
		{"the owner's, no spec.network", map[string]string{ext: ""}, map[string]string{ext: ""}, ext},
		{"another owner's", nil, map[string]string{ext: "net-a"}, plain},
		{"the owner's, another network", map[string]string{ext: "net-b"}, map[string]string{ext: "net-b"}, plain},
		{"none", nil, nil, plain},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reader := func(m map[string]string) ClaimNetwork {
				return func(name string) (string, bool, error) {
					n, ok := m[name]
					return n, ok, nil
				}
			}
			got, err := ClaimFor("vm1", "Chaos_Odd.Net", "net-a", reader(tt.existing), reader(tt.mine))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ClaimFor = %q, want %q", got, tt.want)
			}
		})
	}
}
