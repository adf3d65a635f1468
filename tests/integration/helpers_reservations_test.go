// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"net/netip"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// newReservation is a valid reservation of ip on network, named and
// labelled as the agent names them, held by a pod.
func newReservation(network, ip string) *ipkeeperv1alpha1.IPReservation {
	return &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{
			Name:   naming.Reservation(network, netip.MustParseAddr(ip)),
			Labels: map[string]string{naming.NetworkLabel: naming.NetworkLabelValue(network), naming.NodeLabel: naming.SharedNodeLabelValue},
		},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Network:       network,
			Pool:          naming.InlinePool(network),
			IP:            ip,
			Owner:         ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "default", Name: "pod-a", UID: "0b8e7c1a-1111-4c1e-9f00-000000000001"},
			InterfaceName: "net1",
			ContainerID:   "c0ffee",
			Node:          "node-1",
		},
	}
}

// ownedByPod is newReservation held by pod p with UID uid.
func ownedByPod(network, ip string, p *corev1.Pod, uid types.UID) *ipkeeperv1alpha1.IPReservation {
	r := newReservation(network, ip)
	r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: p.Namespace, Name: p.Name, UID: uid}
	return r
}

// ownedByClaim is newReservation held by claim c.
func ownedByClaim(network, ip string, c *ipamclaimsv1alpha1.IPAMClaim) *ipkeeperv1alpha1.IPReservation {
	r := newReservation(network, ip)
	r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: c.Namespace, Name: c.Name, UID: c.UID}
	return r
}
