// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Reservations lists the reservations of network, live.
func (c *Cluster) Reservations(t testing.TB, network string) []ipkv1alpha1.IPReservation {
	t.Helper()
	rs, err := framework.Reservations(context.Background(), c.CP.Client, network)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// WaitReservations waits until network has exactly n reservations.
func (c *Cluster) WaitReservations(t testing.TB, network string, n int) {
	t.Helper()
	var got []ipkv1alpha1.IPReservation
	if err := framework.Eventually(context.Background(), 90*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		var err error
		got, err = framework.Reservations(ctx, c.CP.Client, network)
		return len(got) == n, err
	}); err != nil {
		t.Fatalf("network %s has %d reservations, want %d: %v; all: %s", network, len(got), n, err, describe(got))
	}
}

// WaitReservationGone polls until network has no reservation of ip.
func (c *Cluster) WaitReservationGone(t testing.TB, network string, ip netip.Addr) {
	t.Helper()
	res := &ipkv1alpha1.IPReservation{}
	res.Name = naming.Reservation(network, ip)
	if err := framework.WaitGone(context.Background(), c.CP.Client, res, 30*time.Second); err != nil {
		t.Fatalf("reservation of %s on network %s still there after DEL: %v; all: %s", ip, network, err, describe(c.Reservations(t, network)))
	}
	// Also under no other name: the name is the allocation lock, spec.ip the fact.
	if rs := c.Reservations(t, network); slices.ContainsFunc(rs, func(r ipkv1alpha1.IPReservation) bool { return r.Spec.IP == ip.String() }) {
		t.Fatalf("network %s still has a reservation of %s after DEL: %s", network, ip, describe(rs))
	}
}

// ExpectReservations checks that network's reservations are exactly one
// per attachment: named naming.Reservation(network, ip) (the allocation lock),
// with ip and owner, interface, container ID and node of that attachment.
func (c *Cluster) ExpectReservations(t testing.TB, network string, atts ...*Attachment) {
	t.Helper()
	got := c.Reservations(t, network)
	byIP := map[string][]ipkv1alpha1.IPReservation{}
	for _, r := range got {
		byIP[r.Spec.IP] = append(byIP[r.Spec.IP], r)
	}
	for _, a := range atts {
		ip := a.IP(t).Addr()
		rs := byIP[ip.String()]
		if len(rs) != 1 {
			t.Errorf("network %s: want exactly one IPReservation of %s (for %s), got %d; all: %s", network, ip, a, len(rs), describe(got))
			continue
		}
		r := rs[0]
		if want := naming.Reservation(network, ip); r.Name != want {
			t.Errorf("reservation of %s is named %q, want %q (naming.Reservation)", ip, r.Name, want)
		}
		if want := a.wantSpec(network, ip, a.RT.IfName); !sameSpec(r.Spec, want) {
			t.Errorf("reservation %s:\n got spec %+v\nwant spec %+v", r.Name, r.Spec, want)
		}
	}
	if len(got) != len(atts) {
		t.Errorf("network %s: want %d IPReservations, got %d: %s", network, len(atts), len(got), describe(got))
	}
}

// sameSpec compares a pod reservation's spec with wantSpec's:
// spec.attachedAt (the node's clock at the ADD) must be set, whatever it is.
func sameSpec(got, want ipkv1alpha1.IPReservationSpec) bool {
	if got.AttachedAt == nil {
		return false
	}
	got.AttachedAt = nil
	return got == want
}

// wantSpec is the reservation of ip that the attachment's ADD as ifname writes.
func (a *Attachment) wantSpec(network string, ip netip.Addr, ifname string) ipkv1alpha1.IPReservationSpec {
	return ipkv1alpha1.IPReservationSpec{
		Network: network,
		Pool:    naming.InlinePool(network), // the tests' networks carry their ranges inline
		IP:      ip.String(),
		Owner: ipkv1alpha1.ReservationOwner{
			Kind:      ipkv1alpha1.OwnerPod,
			Namespace: a.Pod.Namespace,
			Name:      a.Pod.Name,
			UID:       a.Pod.UID,
		},
		InterfaceName: ifname,
		ContainerID:   a.RT.ContainerID,
		Node:          a.Node.Name,
	}
}

func describe(rs []ipkv1alpha1.IPReservation) string {
	if len(rs) == 0 {
		return "none"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s{ip %s owner %s %s/%s uid %s if %s node %s}", r.Name, r.Spec.IP,
			r.Spec.Owner.Kind, r.Spec.Owner.Namespace, r.Spec.Owner.Name, r.Spec.Owner.UID, r.Spec.InterfaceName, r.Spec.Node)
	}
	return strings.Join(parts, ", ")
}

// CheckUsableIP fails t unless ip lies in subnet and is neither its network
// address, its IPv4 broadcast address nor the gateway.
func CheckUsableIP(t testing.TB, what string, got netip.Prefix, subnet netip.Prefix, gateway netip.Addr) {
	t.Helper()
	ip := got.Addr()
	if got.Bits() != subnet.Bits() || !subnet.Contains(ip) {
		t.Errorf("%s: got %s, want an address of %s", what, got, subnet)
	}
	if ip == subnet.Masked().Addr() || ip == gateway || (ip.Is4() && ip == iprange.LastAddr(subnet)) {
		t.Errorf("%s: got %s, which must never be handed out in %s (gateway %s)", what, ip, subnet, gateway)
	}
}

// WaitPoolUsage polls until the pool's status, kept by ipkeeper-controller,
// shows used addresses out of a ready pool of the given size.
func (c *Cluster) WaitPoolUsage(t testing.TB, pool string, size string, used int64) {
	t.Helper()
	p := &ipkv1alpha1.IPPool{}
	if err := framework.Eventually(context.Background(), 60*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := c.CP.Client.Get(ctx, client.ObjectKey{Name: pool}, p); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return p.Status.Size == size && p.Status.Used == used, nil
	}); err != nil {
		t.Fatalf("IPPool %s status: size %q used %d, want size %s used %d: %v", pool, p.Status.Size, p.Status.Used, size, used, err)
	}
}
