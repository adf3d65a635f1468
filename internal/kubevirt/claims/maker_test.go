// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
)

type fakeMaker struct{ external bool }

func (m fakeMaker) External() bool                    { return m.external }
func (m fakeMaker) Name() string                      { return "test" }
func (m fakeMaker) Listen() <-chan event.GenericEvent { return nil }

// While another controller makes claims, a claim with the shared
// finalizer but without ipkeeper's label is that controller's; one with
// the label stays ipkeeper's whoever makes new claims. Every such claim's
// events reach Reconcile, which decides with the maker of that moment.
func TestReleaserDecidesOwnershipWithTheMaker(t *testing.T) {
	theirs := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Name: "vm1.blue", Finalizers: []string{Finalizer}, Labels: map[string]string{"kubevirt.io/vm": "vm1"}}}
	ours := theirs.DeepCopy()
	claimowner.Record(ours, claimowner.Owner{Kind: claimowner.KindVM, Name: "vm1", UID: "u1"})
	none := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	for _, tt := range []struct {
		maker       Maker
		theirs, our bool
	}{
		{nil, true, true},
		{fakeMaker{false}, true, true},
		{fakeMaker{true}, false, true},
	} {
		r := &ClaimReleaser{Maker: tt.maker}
		if got := r.isOurs(theirs); got != tt.theirs {
			t.Errorf("maker %v: isOurs(ipam-extensions' claim) = %v, want %v", tt.maker, got, tt.theirs)
		}
		if got := r.isOurs(ours); got != tt.our {
			t.Errorf("maker %v: isOurs(labelled claim) = %v, want %v", tt.maker, got, tt.our)
		}
		if r.isOurs(none) {
			t.Errorf("maker %v: a claim with neither finalizer nor label is ours", tt.maker)
		}
	}
	if !mayBeOurs(theirs) || !mayBeOurs(ours) || mayBeOurs(none) {
		t.Error("mayBeOurs must pass every claim with the finalizer or the label, and no other")
	}
}
