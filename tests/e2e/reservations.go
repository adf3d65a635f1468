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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Reservations returns the IPReservations of network (by spec.network, the
// authority; labels only narrow), live from the API server.
func (e *Env) Reservations(ctx context.Context, network string) ([]ipkv1alpha1.IPReservation, error) {
	var list ipkv1alpha1.IPReservationList
	if err := e.CP.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing IPReservations: %w", err)
	}
	var out []ipkv1alpha1.IPReservation
	for _, r := range list.Items {
		if r.Spec.Network == network {
			out = append(out, r)
		}
	}
	return out, nil
}

// ExpectReservations checks that network's reservations are exactly one
// per attachment: named naming.Reservation(network, ip) (the allocation lock),
// with ip and owner, interface, container ID and node of that attachment.
func (e *Env) ExpectReservations(t testing.TB, network string, atts ...*Attachment) {
	t.Helper()
	got, err := e.Reservations(context.Background(), network)
	if err != nil {
		t.Fatal(err)
	}
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
		if want := e.wantSpec(network, ip, a, a.RT.IfName); r.Spec != want {
			t.Errorf("reservation %s:\n got spec %+v\nwant spec %+v", r.Name, r.Spec, want)
		}
	}
	if len(got) != len(atts) {
		t.Errorf("network %s: want %d IPReservations, got %d: %s", network, len(atts), len(got), describe(got))
	}
}

func (e *Env) wantSpec(network string, ip netip.Addr, a *Attachment, ifname string) ipkv1alpha1.IPReservationSpec {
	return ipkv1alpha1.IPReservationSpec{
		Network: network,
		IP:      ip.String(),
		Owner: ipkv1alpha1.ReservationOwner{
			Kind:      ipkv1alpha1.OwnerPod,
			Namespace: a.Pod.Namespace,
			Name:      a.Pod.Name,
			UID:       a.Pod.UID,
		},
		InterfaceName: ifname,
		ContainerID:   a.RT.ContainerID,
		Node:          e.Agent.NodeName,
	}
}

// WaitReservationGone polls until network has no reservation of ip.
func (e *Env) WaitReservationGone(t testing.TB, network string, ip netip.Addr) {
	t.Helper()
	name := naming.Reservation(network, ip)
	err := framework.Eventually(context.Background(), 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := e.CP.Client.Get(ctx, client.ObjectKey{Name: name}, &ipkv1alpha1.IPReservation{})
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		rs, err := e.Reservations(ctx, network)
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(rs, func(r ipkv1alpha1.IPReservation) bool { return r.Spec.IP == ip.String() }), nil
	})
	if err != nil {
		rs, _ := e.Reservations(context.Background(), network)
		t.Fatalf("reservation of %s on network %s still there after DEL: %v; all: %s", ip, network, err, describe(rs))
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
