// SPDX-License-Identifier: Apache-2.0

package reservationindex

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// res is a reservation of pool (empty: a legacy one, in its network's
// inline pool) on network holding ip.
func res(pool, network, ip string) *v1alpha1.IPReservation {
	r := &v1alpha1.IPReservation{Spec: v1alpha1.IPReservationSpec{Pool: pool, Network: network, IP: ip}}
	r.Name = fmt.Sprintf("%s.%s.%s", pool, network, ip)
	return r
}

func cooling(r *v1alpha1.IPReservation) *v1alpha1.IPReservation {
	r.Spec.ReuseAfter = &metav1.Time{}
	return r
}

// claimRes makes r a Cluster API IPAddressClaim's.
func claimRes(r *v1alpha1.IPReservation) *v1alpha1.IPReservation {
	r.Spec.Owner = v1alpha1.ReservationOwner{Kind: v1alpha1.OwnerIPAddressClaim, Namespace: "ns", Name: "m", UID: "u"}
	return r
}

func poolOf(name string, ranges ...v1alpha1.PoolRange) *v1alpha1.IPPool {
	p := &v1alpha1.IPPool{Spec: v1alpha1.IPPoolSpec{Ranges: ranges}}
	p.Name, p.Generation = name, 3
	return p
}

// Updates and deletes move an address between pools and out of them.
func TestIndexFollowsUpdatesAndDeletes(t *testing.T) {
	x := NewAddresses()
	r := res("blue", "blue", "10.0.0.5")
	if pool, old, changed := x.Set(r); pool != "blue" || old != "" || !changed {
		t.Fatalf("Set = %q, %q, %v; want blue, \"\", true", pool, old, changed)
	}
	if _, _, changed := x.Set(r.DeepCopy()); changed {
		t.Errorf("setting the same reservation again reported a change")
	}
	moved := r.DeepCopy()
	moved.Spec.Pool = "shared"
	if pool, old, changed := x.Set(moved); pool != "shared" || old != "blue" || !changed {
		t.Fatalf("moving pool: Set = %q, %q, %v; want shared, blue, true", pool, old, changed)
	}
	ranges, _ := ipamconfig.PoolRanges(&poolOf("x", v1alpha1.PoolRange{Range: "10.0.0.0/24"}).Spec)
	if c := x.Count("blue", ranges, 0); c.Used[0] != 0 || len(c.Networks) != 0 {
		t.Errorf("old pool still counts the moved reservation: %+v", c)
	}
	if c := x.Count("shared", ranges, 0); c.Used[0] != 1 {
		t.Errorf("new pool does not count it: %+v", c)
	}
	released := cooling(moved.DeepCopy())
	if _, _, changed := x.Set(released); !changed {
		t.Errorf("a release (reuseAfter set) reported no change")
	}
	if c := x.Count("shared", ranges, 0); c.Used[0] != 1 || c.CoolingDown != 1 {
		t.Errorf("released reservation: %+v, want used 1, cooling 1", c)
	}
	if pool, changed := x.Delete(r.Name); pool != "shared" || !changed {
		t.Errorf("Delete = %q, %v; want shared, true", pool, changed)
	}
	if _, changed := x.Delete(r.Name); changed {
		t.Errorf("deleting twice reported a change")
	}
	if c := x.Count("shared", ranges, 0); c.Used[0] != 0 || c.CoolingDown != 0 || len(c.Networks) != 0 {
		t.Errorf("deleted reservation still counted: %+v", c)
	}
	if len(x.pools) != 0 || len(x.byName) != 0 {
		t.Errorf("index keeps %d pools, %d names after every reservation is gone", len(x.pools), len(x.byName))
	}
}

// A claim's reservation adds no network on Set and takes none away on
// Delete, while a CNI reservation of the same pool keeps its network.
func TestIndexClaimReservationsHaveNoNetwork(t *testing.T) {
	x := NewAddresses()
	pod := res("p", "a", "10.0.0.1")
	claim := claimRes(res("p", "p", "10.0.0.2"))
	x.Set(pod)
	x.Set(claim)
	ranges, _ := ipamconfig.PoolRanges(&poolOf("p", v1alpha1.PoolRange{Range: "10.0.0.0/24"}).Spec)
	if c := x.Count("p", ranges, 0); c.Used[0] != 2 || !slices.Equal(c.Networks, []string{"a"}) {
		t.Errorf("count = %+v, want used 2, networks [a]", c)
	}
	x.Delete(claim.Name)
	if c := x.Count("p", ranges, 0); c.Used[0] != 1 || !slices.Equal(c.Networks, []string{"a"}) {
		t.Errorf("after deleting the claim's: %+v, want used 1, networks [a]", c)
	}
	x.Delete(pod.Name)
	if len(x.pools) != 0 || len(x.byName) != 0 {
		t.Errorf("index keeps %d pools, %d names after every reservation is gone", len(x.pools), len(x.byName))
	}
}

// Held answers per pool and address, released reservations included.
func TestAddressesHeld(t *testing.T) {
	x := NewAddresses()
	x.Set(res("p", "a", "10.0.0.1"))
	x.Set(cooling(res("p", "a", "10.0.0.2")))
	for _, tc := range []struct {
		pool, ip string
		want     bool
	}{{"p", "10.0.0.1", true}, {"p", "10.0.0.2", true}, {"p", "10.0.0.3", false}, {"q", "10.0.0.1", false}} {
		if got := x.Held(tc.pool, netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("Held(%s, %s) = %v, want %v", tc.pool, tc.ip, got, tc.want)
		}
	}
}

// HeldIn answers per block, whether the pool holds few addresses (a scan
// of them) or many (a look-up of each of the block's).
func TestAddressesHeldIn(t *testing.T) {
	x := NewAddresses()
	x.Set(res("p", "a", "10.0.0.5"))
	for _, tc := range []struct {
		pool, block string
		want        bool
	}{{"p", "10.0.0.4/30", true}, {"p", "10.0.0.8/30", false}, {"q", "10.0.0.4/30", false}} {
		if got := x.HeldIn(tc.pool, netip.MustParsePrefix(tc.block)); got != tc.want {
			t.Errorf("HeldIn(%s, %s) with one address = %v, want %v", tc.pool, tc.block, got, tc.want)
		}
	}
	for i := 16; i < 40; i++ {
		x.Set(res("p", "a", netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}).String()))
	}
	for _, tc := range []struct {
		block string
		want  bool
	}{{"10.0.0.4/30", true}, {"10.0.0.8/30", false}, {"10.0.1.36/30", true}, {"10.0.1.40/30", false}} {
		if got := x.HeldIn("p", netip.MustParsePrefix(tc.block)); got != tc.want {
			t.Errorf("HeldIn(p, %s) with 25 addresses = %v, want %v", tc.block, got, tc.want)
		}
	}
}
