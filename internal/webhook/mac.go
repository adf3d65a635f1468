// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"context"
	"fmt"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// How long the webhook waits for a claim made just before its launcher
// to be filled (the controller fills a claim when it appears, in
// milliseconds), and how often it looks.
const (
	macWait  = 2 * time.Second
	macEvery = 50 * time.Millisecond
)

// addMACs gives every element that references a claim of a network
// ipkeeper serves (persistent[i] != "") and asks for no MAC the claim's
// MAC (package macaddr), so the VM's NIC has one MAC at every start, on a
// migration target and after a NAD swap on one network. A MAC already in
// the element is the VM's own (KubeVirt copies the interface's
// macAddress) and is never replaced. A claim still without addresses
// after macWait (its allocation failed, or the controller is down) leaves
// its element without a MAC, with a warning: that start gets a MAC of the
// node's choosing. But when the guest reads ipkeeper's guest network
// configuration (guestReadsConfig), which finds its NICs by their claims'
// MACs, such a start would leave the guest unconfigured: the launcher is
// refused instead (denial, naming the claim and the Secret), and
// virt-controller creates it again later. That costs no start the
// controller could have served: the Secret waits for the same claims.
func (m *PodMutator) addMACs(ctx context.Context, namespace string, elems []multus.Element, persistent []string, guestConfig string) (changed bool, warnings []string, denial string, _ error) {
	for i := range elems {
		e := &elems[i]
		if persistent[i] == "" || e.ClaimRef == "" || e.MAC != "" {
			continue
		}
		claim, err := m.filledClaim(ctx, types.NamespacedName{Namespace: namespace, Name: e.ClaimRef})
		if err != nil {
			return false, nil, "", err
		}
		mac, _, ok := macaddr.OfClaim(claim)
		if !ok && guestConfig != "" {
			why := "has no addresses yet"
			if c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionIPsAllocated); c != nil && c.Status == metav1.ConditionFalse {
				why = fmt.Sprintf("has no addresses (%s: %s)", c.Reason, c.Message)
			}
			return false, nil, fmt.Sprintf("IPAMClaim %s/%s %s, so no MAC for interface %q, and the guest finds that NIC by its claim's MAC (Secret %s/%s, its guest network configuration): the pod can be created once the claim has addresses",
				namespace, e.ClaimRef, why, e.Interface, namespace, guestConfig), nil
		}
		if !ok {
			warnings = append(warnings, fmt.Sprintf("IPAMClaim %s/%s has no addresses yet, so interface %q gets no MAC from ipkeeper on this start", namespace, e.ClaimRef, e.Interface))
			continue
		}
		e.SetMAC(mac.String())
		changed = true
	}
	return changed, warnings, "", nil
}

// filledClaim reads a claim from the cache until it is filled, it
// failed, or macWait passed (the cache sees the controller's status write
// within moments, and costs the API server nothing), then, if the cache
// has not filled it, once live; an empty claim when it does not exist.
func (m *PodMutator) filledClaim(ctx context.Context, key types.NamespacedName) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	deadline := time.Now().Add(macWait)
	for {
		var claim ipamclaimsv1alpha1.IPAMClaim
		err := m.Reader.Get(ctx, key, &claim)
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading IPAMClaim %s: %w", key, err)
		case err == nil && (claimstatus.Filled(&claim) || failed(&claim)):
			return &claim, nil
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return &ipamclaimsv1alpha1.IPAMClaim{}, nil
		case <-time.After(macEvery):
		}
	}
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := m.APIReader.Get(ctx, key, &claim); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading IPAMClaim %s: %w", key, err)
	}
	return &claim, nil
}

// failed says the controller tried and could not fill the claim: waiting
// would not help.
func failed(claim *ipamclaimsv1alpha1.IPAMClaim) bool {
	return meta.IsStatusConditionFalse(claim.Status.Conditions, claimstatus.ConditionIPsAllocated)
}
