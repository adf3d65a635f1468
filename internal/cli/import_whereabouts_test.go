// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"net/netip"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// An address someone reserved in ipkeeper after the import read its plan
// is a conflict: nothing of the importing holder's is written, and a
// claim's status never records it. An address already the holder's (an
// import run again after it stopped half-way) is recorded.
func TestImportOfAnAddressReservedMeanwhile(t *testing.T) {
	ip := netip.MustParseAddr("10.1.0.9")
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1.blue", UID: "claim-uid"},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue", Interface: "podabc"},
		Status:     ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{}},
	}
	claimOwner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "vms", Name: "vm1.blue", UID: "claim-uid"}
	podOwner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "web", UID: "pod-uid"}
	stranger := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "other", Name: "db", UID: "db-uid"}
	reservation := func(owner ipkeeperv1alpha1.ReservationOwner, ifName string) *ipkeeperv1alpha1.IPReservation {
		return &ipkeeperv1alpha1.IPReservation{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("blue", ip)},
			Spec:       ipkeeperv1alpha1.IPReservationSpec{Pool: "blue", Network: "blue", IP: ip.String(), Owner: owner, InterfaceName: ifName},
		}
	}
	for _, tt := range []struct {
		name       string
		owner      ipkeeperv1alpha1.ReservationOwner
		claim      bool
		existing   *ipkeeperv1alpha1.IPReservation
		wantAction string
		wantIPs    int
	}{
		{"a claim's address, reserved by another meanwhile", claimOwner, true, reservation(stranger, "net1"), importConflict, 0},
		{"a pod's address, reserved by another meanwhile", podOwner, false, reservation(stranger, "net1"), importConflict, 0},
		{"a claim's address, already the claim's", claimOwner, true, reservation(claimOwner, "podabc"), importCreate, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := scheme.New()
			if err != nil {
				t.Fatal(err)
			}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(claim.DeepCopy(), tt.existing).
				WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{}).Build()
			owner := tt.owner
			st := &ImportStep{
				IP: ip.String() + "/24", Pod: "vms/virt-launcher-vm1-x", Interface: "net1", Network: "blue", Pool: "blue",
				Reservation: naming.Reservation("blue", ip), Owner: &owner, Action: importCreate,
				key: "blue", ip: ip, prefix: netip.MustParsePrefix(ip.String() + "/24"),
			}
			if tt.claim {
				st.claim = &ipamclaimsv1alpha1.IPAMClaim{}
				if err := c.Get(context.Background(), client.ObjectKeyFromObject(claim), st.claim); err != nil {
					t.Fatal(err)
				}
			}
			if err := applyImportStep(context.Background(), c, st); err != nil {
				t.Fatalf("applyImportStep: %v", err)
			}
			if st.Action != tt.wantAction {
				t.Errorf("action = %q (%s), want %q", st.Action, st.Detail, tt.wantAction)
			}
			var got ipamclaimsv1alpha1.IPAMClaim
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(claim), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Status.IPs) != tt.wantIPs {
				t.Errorf("claim status.ips = %v, want %d addresses", got.Status.IPs, tt.wantIPs)
			}
			var r ipkeeperv1alpha1.IPReservation
			if err := c.Get(context.Background(), client.ObjectKey{Name: st.Reservation}, &r); err != nil || r.Spec.Owner != tt.existing.Spec.Owner {
				t.Errorf("the reservation is now %+v (%v), want it unchanged", r.Spec.Owner, err)
			}
		})
	}
}
