// SPDX-License-Identifier: Apache-2.0

package ipam_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

func ippool(name string, ranges ...ipkeeperv1alpha1.PoolRange) *ipkeeperv1alpha1.IPPool {
	return &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       ipkeeperv1alpha1.IPPoolSpec{Ranges: ranges},
	}
}

func mustPoolOf(t *testing.T, p *ipkeeperv1alpha1.IPPool) *ipam.Pool {
	t.Helper()
	pool, err := ipam.PoolOf(p)
	if err != nil {
		t.Fatalf("PoolOf(%s): %v", p.Name, err)
	}
	return pool
}

// A holder gets one address per family, so the grouping decides which
// family is served first and which range of each is tried first.
func TestFamiliesGroupInOrderOfFirstAppearance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		ranges []string
		want   [][]string
	}{
		{"one range", []string{"10.0.0.0/24"}, [][]string{{"10.0.0.0/24"}}},
		{"one family keeps spec order", []string{"10.0.1.0/24", "10.0.0.0/24"}, [][]string{{"10.0.1.0/24", "10.0.0.0/24"}}},
		{"IPv6 first", []string{"fd00::/120", "10.0.0.0/24"}, [][]string{{"fd00::/120"}, {"10.0.0.0/24"}}},
		{
			"interleaved families",
			[]string{"fd00::/120", "10.0.0.0/24", "fd00:1::/120", "10.0.1.0/24", "10.0.2.0/24"},
			[][]string{{"fd00::/120", "fd00:1::/120"}, {"10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"}},
		},
		{"no ranges", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &ipam.Pool{Name: "blue"}
			for _, c := range tt.ranges {
				p.Ranges = append(p.Ranges, cidrRange(t, c))
			}
			var got [][]string
			for _, f := range p.Families() {
				var fam []string
				for _, r := range f {
					fam = append(fam, r.Subnet().String())
				}
				got = append(got, fam)
			}
			if !equalGroups(got, tt.want) {
				t.Errorf("Families() = %v, want %v", got, tt.want)
			}
			if len(tt.ranges) > 0 && p.Ranges[0].Subnet().String() != tt.ranges[0] {
				t.Errorf("Families() reordered the pool's ranges: %v", p.Ranges)
			}
		})
	}
}

func equalGroups(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], ",") != strings.Join(b[i], ",") {
			return false
		}
	}
	return true
}

// Containing answers "which subnet is this address of" (its prefix
// length and gateway), RangeFor "may the pool hand it out": an address
// that is excluded, the gateway or a younger network's is the first but
// not the second.
func TestContainingAndRangeFor(t *testing.T) {
	t.Parallel()
	pool := mustPoolOf(t, ippool("blue",
		ipkeeperv1alpha1.PoolRange{Range: "10.0.0.0/24", Gateway: "10.0.0.1", Exclude: []string{"10.0.0.200/29"}},
		ipkeeperv1alpha1.PoolRange{Range: "10.0.1.0/26"},
		ipkeeperv1alpha1.PoolRange{Range: "fd00::/120"},
	))
	pool.Overlapped = []iprange.Range{mustRange(t, iprange.Spec{
		Subnet: netip.MustParsePrefix("10.0.1.0/24"), Start: addr("10.0.1.10"), End: addr("10.0.1.19"),
	})}
	tests := []struct {
		ip          string
		containedBy int    // index in pool.Ranges, -1: none
		handedBy    int    // index in pool.Ranges, -1: RangeFor errs
		errHas      string // what RangeFor's error says
	}{
		{"10.0.0.5", 0, 0, ""},
		{"10.0.1.5", 1, 1, ""},
		{"fd00::7", 2, 2, ""},
		{"10.0.0.1", 0, -1, "gateway"},
		{"10.0.0.203", 0, -1, "excluded by 10.0.0.200/29"},
		{"10.0.0.255", 0, -1, "broadcast"},
		{"10.0.1.12", 1, -1, `overlaps IPPool "blue"`},
		{"10.0.2.1", -1, -1, `outside every range of IPPool "blue"`},
		{"fd01::1", -1, -1, `outside every range of IPPool "blue"`},
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			t.Parallel()
			ip := addr(tt.ip)
			r, ok := pool.Containing(ip)
			switch {
			case tt.containedBy < 0 && ok:
				t.Errorf("Containing(%s) = %v, want none", ip, r)
			case tt.containedBy >= 0 && (!ok || r.String() != pool.Ranges[tt.containedBy].String()):
				t.Errorf("Containing(%s) = %v, %t; want %v", ip, r, ok, pool.Ranges[tt.containedBy])
			}
			r, err := pool.RangeFor(ip)
			if tt.handedBy >= 0 {
				if err != nil || r.String() != pool.Ranges[tt.handedBy].String() {
					t.Errorf("RangeFor(%s) = %v, %v; want %v", ip, r, err, pool.Ranges[tt.handedBy])
				}
				if err := pool.Usable(ip); err != nil {
					t.Errorf("Usable(%s) = %v, want nil", ip, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("RangeFor(%s) = %v, %v; want an error saying %q", ip, r, err, tt.errHas)
			}
			if !strings.Contains(err.Error(), tt.ip) {
				t.Errorf("RangeFor(%s) error %q does not name the address", ip, err)
			}
			if uerr := pool.Usable(ip); uerr == nil || uerr.Error() != err.Error() {
				t.Errorf("Usable(%s) = %v; want RangeFor's reason %v", ip, uerr, err)
			}
		})
	}
}

// The ranges of a younger overlapping network are closed intervals of
// their own family: both ends are theirs, the neighbours are not.
func TestInOverlap(t *testing.T) {
	t.Parallel()
	pool := &ipam.Pool{Name: "blue", Overlapped: []iprange.Range{
		mustRange(t, iprange.Spec{Subnet: netip.MustParsePrefix("10.0.0.0/24"), Start: addr("10.0.0.10"), End: addr("10.0.0.20")}),
		mustRange(t, iprange.Spec{Subnet: netip.MustParsePrefix("fd00::/64"), Start: addr("fd00::100"), End: addr("fd00::1ff")}),
	}}
	tests := []struct {
		ip   string
		want bool
	}{
		{"10.0.0.9", false},
		{"10.0.0.10", true},
		{"10.0.0.15", true},
		{"10.0.0.20", true},
		{"10.0.0.21", false},
		{"fd00::ff", false},
		{"fd00::100", true},
		{"fd00::1ff", true},
		{"fd00::200", false},
		{"::ffff:10.0.0.15", false}, // the mapped form is IPv6, not the IPv4 address
	}
	for _, tt := range tests {
		if got := pool.InOverlap(addr(tt.ip)); got != tt.want {
			t.Errorf("InOverlap(%s) = %t, want %t", tt.ip, got, tt.want)
		}
	}
	if (&ipam.Pool{}).InOverlap(addr("10.0.0.15")) {
		t.Error("a pool without overlapping networks reports an overlap")
	}
}

// An address is returned with its range's prefix length; one the ranges
// no longer cover (a range removed while it was held) with the family's
// first range's.
func TestPrefixOf(t *testing.T) {
	t.Parallel()
	pool := mustPoolOf(t, ippool("blue",
		ipkeeperv1alpha1.PoolRange{Range: "10.0.0.0/24"},
		ipkeeperv1alpha1.PoolRange{Range: "fd00::/64"},
		ipkeeperv1alpha1.PoolRange{Range: "10.1.0.0/16"},
		ipkeeperv1alpha1.PoolRange{Range: "fd01::/120"},
	))
	fams := pool.Families()
	v4, v6 := fams[0], fams[1]
	tests := []struct {
		ip     string
		family []iprange.Range
		want   string
	}{
		{"10.0.0.7", v4, "10.0.0.7/24"},
		{"10.1.2.3", v4, "10.1.2.3/16"},
		{"10.9.9.9", v4, "10.9.9.9/24"},
		{"fd00::9", v6, "fd00::9/64"},
		{"fd01::9", v6, "fd01::9/120"},
		{"fd09::9", v6, "fd09::9/64"},
	}
	for _, tt := range tests {
		if got := pool.PrefixOf(addr(tt.ip), tt.family); got != netip.MustParsePrefix(tt.want) {
			t.Errorf("PrefixOf(%s) = %v, want %s", tt.ip, got, tt.want)
		}
	}
}

// NewPool takes the cooldown and the quota from the spec; Retains
// follows the cooldown (a claim made anew gets back what its name held).
func TestNewPoolQuotaCooldownRetains(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		cooldown     *ipkeeperv1alpha1.Duration
		quota        *int32
		wantCooldown time.Duration
		wantQuota    int
	}{
		{"unset", nil, nil, 0, 0},
		{"zero", &ipkeeperv1alpha1.Duration{}, ptr.To[int32](0), 0, 0},
		{"set", &ipkeeperv1alpha1.Duration{Duration: 90 * time.Second}, ptr.To[int32](7), 90 * time.Second, 7},
		{"negative quota is none", nil, ptr.To[int32](-3), 0, 0},
		{"negative cooldown is none", &ipkeeperv1alpha1.Duration{Duration: -time.Second}, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := ippool("blue", ipkeeperv1alpha1.PoolRange{Range: "10.0.0.0/24"})
			p.Spec.ReuseCooldown, p.Spec.MaxAddressesPerNamespace = tt.cooldown, tt.quota
			r := cidrRange(t, "10.0.0.0/24")
			pool := ipam.NewPool(p, []iprange.Range{r})
			if pool.Cooldown != tt.wantCooldown || pool.Quota != tt.wantQuota {
				t.Errorf("NewPool: Cooldown %v, Quota %d; want %v, %d", pool.Cooldown, pool.Quota, tt.wantCooldown, tt.wantQuota)
			}
			if got, want := pool.Retains(), tt.wantCooldown > 0; got != want {
				t.Errorf("Retains() = %t with cooldown %v, want %t", got, pool.Cooldown, want)
			}
			if pool.Name != "blue" || pool.Key != "blue" || pool.Object != p || len(pool.Ranges) != 1 || pool.Ranges[0].String() != r.String() {
				t.Errorf("NewPool = %+v; want the pool's name as key, the object and the ranges passed", pool)
			}
		})
	}
}

// Reservations of an inline network's pool are named from the network
// (LockKey), not from the pool's name.
func TestPoolOfKeyIsLockKey(t *testing.T) {
	t.Parallel()
	p := ippool("inline-3f2a", ipkeeperv1alpha1.PoolRange{Range: "10.0.0.0/24"}, ipkeeperv1alpha1.PoolRange{Range: "fd00::/120"})
	p.Annotations = map[string]string{ipkeeperv1alpha1.InlineNetworkAnnotation: "my_net"}
	p.Spec.ReuseCooldown = &ipkeeperv1alpha1.Duration{Duration: time.Minute}
	pool := mustPoolOf(t, p)
	if pool.Name != "inline-3f2a" || pool.Key != "my_net" {
		t.Errorf("PoolOf: Name %q, Key %q; want inline-3f2a, my_net", pool.Name, pool.Key)
	}
	if len(pool.Ranges) != 2 || pool.Ranges[0].Subnet() != netip.MustParsePrefix("10.0.0.0/24") || pool.Ranges[1].Subnet() != netip.MustParsePrefix("fd00::/120") {
		t.Errorf("PoolOf ranges = %v, want the spec's in spec order", pool.Ranges)
	}
	if pool.Cooldown != time.Minute || !pool.Retains() {
		t.Errorf("PoolOf: Cooldown %v, Retains %t; want 1m, true", pool.Cooldown, pool.Retains())
	}
}

// A pool that cannot be parsed is refused with the field at fault, so its
// status and the refused request can say what to fix.
func TestPoolOfErrorsNameTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		spec  ipkeeperv1alpha1.IPPoolSpec
		field string
	}{
		{"no ranges", ipkeeperv1alpha1.IPPoolSpec{}, "spec.ranges"},
		{"bad CIDR", ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/33"}}}, "spec.ranges[0].range"},
		{"empty range", ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24"}, {Range: " "}}}, "spec.ranges[1].range"},
		{"start outside", ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24", RangeStart: "10.0.1.1"}}}, "spec.ranges[0].range_start"},
		{"end outside", ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24", RangeEnd: "10.0.1.1"}}}, "spec.ranges[0].range_end"},
		{"gateway outside", ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24", Gateway: "10.0.1.1"}}}, "spec.ranges[0].gateway"},
		{"bad exclude", ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24", Exclude: []string{"10.0.0.0/28", "nope"}}}}, "spec.ranges[0].exclude[1]"},
		{"exclude of everything", ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24", Exclude: []string{"10.0.0.0/24"}}}}, "spec.ranges[0].exclude[0]"},
		{
			"overlapping ranges",
			ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24"}, {Range: "fd00::/120"}, {Range: "10.0.0.128/25"}}},
			"spec.ranges[2].range",
		},
		{
			"invalid cooldown",
			ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24"}}, ReuseCooldown: &ipkeeperv1alpha1.Duration{Invalid: "30 seconds"}},
			"spec.reuseCooldown",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: tt.spec}
			pool, err := ipam.PoolOf(p)
			if err == nil {
				t.Fatalf("PoolOf = %+v, want an error naming %s", pool, tt.field)
			}
			var fe *ipamconfig.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("PoolOf error %q (%T); want a *ipamconfig.FieldError of field %s", err, err, tt.field)
			}
			if !strings.HasPrefix(err.Error(), tt.field) {
				t.Errorf("PoolOf error %q does not start with the field %s", err, tt.field)
			}
			if pool != nil {
				t.Errorf("PoolOf returned %+v with its error", pool)
			}
		})
	}
}
