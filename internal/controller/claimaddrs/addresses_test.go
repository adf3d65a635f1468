// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"net/netip"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// An address is recorded with the prefix length of the pool's range that
// holds it; one whose range was removed since it was reserved gets that
// of the family's first range.
func TestPrefixOf(t *testing.T) {
	for _, tt := range []struct {
		name   string
		ranges []ipkeeperv1alpha1.PoolRange
		ip     string
		want   string
	}{
		{name: "first range", ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24"}, {Range: "10.0.1.0/25"}}, ip: "10.0.0.5", want: "10.0.0.5/24"},
		{name: "second range", ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24"}, {Range: "10.0.1.0/25"}}, ip: "10.0.1.5", want: "10.0.1.5/25"},
		{name: "range removed since", ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.1.0/25"}, {Range: "10.0.2.0/23"}}, ip: "10.0.0.5", want: "10.0.0.5/25"},
		{name: "IPv6", ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/24"}, {Range: "fd00::/64"}}, ip: "fd00::5", want: "fd00::5/64"},
		// PoolRanges admits a range whose subnet holds another range's
		// (their start-end spans do not overlap): the address belongs to
		// the range that hands it out, not to the first whose subnet
		// contains it.
		{name: "nested subnets", ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/16", RangeStart: "10.0.0.1", RangeEnd: "10.0.0.100"}, {Range: "10.0.1.0/24"}},
			ip: "10.0.1.5", want: "10.0.1.5/24"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ranges, err := ipamconfig.PoolRanges(&ipkeeperv1alpha1.IPPoolSpec{Ranges: tt.ranges})
			if err != nil {
				t.Fatal(err)
			}
			pool := &ipam.Pool{Name: "p", Key: "p", Ranges: ranges}
			ip := netip.MustParseAddr(tt.ip)
			var family []iprange.Range
			for _, f := range pool.Families() {
				if f[0].Is4() == ip.Is4() {
					family = f
				}
			}
			if got := prefixOf(pool, ip, family); got.String() != tt.want {
				t.Errorf("prefixOf(%s) = %s, want %s", ip, got, tt.want)
			}
		})
	}
}
