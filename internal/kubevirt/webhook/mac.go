// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"context"
	"fmt"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
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
// allowing persistent IPs (persistent[i] != "") and asks for no MAC the
// claim's MAC (package macaddr), so the VM's NIC has one MAC at every
// start, on a migration target and after a NAD swap on one network. A MAC
// already in the element is the VM's own (KubeVirt copies the interface's
// macAddress) and is never replaced.
//
// A claim still without addresses after macWait leaves its element
// without a MAC, with a warning: that start gets a MAC of the node's
// choosing, and the guest another MAC at its next start. On a network
// ipkeeper's IPAM serves, ipkeeper-controller fills the claim whatever the
// pod does, and the pod's ADD waits for that fill anyway (the agent only
// reads claims). So there the launcher is refused instead (a denial
// naming the claim; virt-controller creates the pod again) while the claim
// exists and is pending (mustWait): a VM created just before, or together
// with its NAD, gets its claim's MAC at its first start. A claim whose
// allocation failed (its pool exhausted, a requested address taken) is
// admitted as before: its Events say why, and its pod's ADD waits; so is
// a claim that does not exist or is being deleted. But the launcher of a
// guest that reads ipkeeper's guest network configuration (guestConfig
// names the Secret), which finds its NICs by their claims' MACs, is
// refused for any claim of an ipkeeper network without addresses: such a
// start would leave the guest unconfigured, and the Secret waits for the
// same claims. Another IPAM's network is never refused: OVN-Kubernetes
// fills a claim once its pod exists, so refusing the pod would wait
// forever.
func (m *PodMutator) addMACs(ctx context.Context, namespace string, elems []multus.Element, persistent []string, guestConfig string) (changed bool, warnings []string, denial string, _ error) {
	for i := range elems {
		e := &elems[i]
		if persistent[i] == "" || e.ClaimRef == "" || e.MAC != "" {
			continue
		}
		served, inline, err := m.ipkeeperNetwork(ctx, e.NAD())
		if err != nil {
			return false, nil, "", err
		}
		claim, exists, err := m.filledClaim(ctx, types.NamespacedName{Namespace: namespace, Name: e.ClaimRef}, inline)
		if err != nil {
			return false, nil, "", err
		}
		if mac, _, ok := macaddr.OfClaim(claim); ok {
			e.SetMAC(mac.String())
			changed = true
			continue
		}
		if served && (guestConfig != "" || mustWait(claim, exists, inline)) {
			return false, nil, noMACDenial(claim, exists, namespace, e, guestConfig), nil
		}
		warnings = append(warnings, fmt.Sprintf("IPAMClaim %s/%s has no addresses yet, so interface %q gets no MAC from ipkeeper on this start", namespace, e.ClaimRef, e.Interface))
	}
	return changed, warnings, "", nil
}

// mustWait says the launcher of a claim without addresses must wait for
// them: the claim exists, is not being deleted (its launcher waits for the
// claim made again, as before), and its allocation has not failed, or
// failed only while ipkeeper-controller makes its inline network's pool.
func mustWait(claim *ipamclaimsv1alpha1.IPAMClaim, exists, inline bool) bool {
	return exists && claim.DeletionTimestamp == nil && !failed(claim, inline)
}

// noMACDenial explains why the launcher is refused: the element's claim
// has no addresses, so no MAC.
func noMACDenial(claim *ipamclaimsv1alpha1.IPAMClaim, exists bool, namespace string, e *multus.Element, guestConfig string) string {
	why := "has no addresses yet"
	if c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionIPsAllocated); c != nil && c.Status == metav1.ConditionFalse {
		why = fmt.Sprintf("has no addresses (%s: %s)", c.Reason, c.Message)
	}
	if !exists {
		why = "does not exist yet"
	}
	msg := fmt.Sprintf("IPAMClaim %s/%s %s, so no MAC for interface %q", namespace, e.ClaimRef, why, e.Interface)
	if guestConfig != "" {
		msg += fmt.Sprintf(", and the guest finds that NIC by its claim's MAC (Secret %s/%s, its guest network configuration)", namespace, guestConfig)
	}
	return msg + ": the pod can be created once the claim has addresses, so that the VM's NIC gets the claim's MAC at this start (virt-controller creates it again)"
}

// ipkeeperNetwork says whether ipkeeper's IPAM serves the NAD's network
// (ipkeeper-controller then fills its claims; one whose ipkeeper
// configuration is broken too, with IPsAllocated=False NADInvalid), and
// whether its pool is inline (made by ipkeeper-controller from the
// network's NADs). It reads the NAD from the cache, else live, as
// readNAD did.
func (m *PodMutator) ipkeeperNetwork(ctx context.Context, key types.NamespacedName) (served, inline bool, _ error) {
	var nad nadv1.NetworkAttachmentDefinition
	err := m.Reader.Get(ctx, key, &nad)
	if apierrors.IsNotFound(err) {
		err = m.APIReader.Get(ctx, key, &nad)
	}
	switch {
	case apierrors.IsNotFound(err):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("reading NetworkAttachmentDefinition %s: %w", key, err)
	}
	cfg, found, err := inlinepool.Network(&nad)
	return found, err == nil && found && cfg.Pool == "", nil
}

// filledClaim reads a claim from the cache until it is filled, it
// failed, or macWait passed (the cache sees the controller's status write
// within moments, and costs the API server nothing), then, if the cache
// has not filled it, once live; an empty claim, and exists false, when it
// does not exist. inline: the claim's network has an inline pool.
func (m *PodMutator) filledClaim(ctx context.Context, key types.NamespacedName, inline bool) (_ *ipamclaimsv1alpha1.IPAMClaim, exists bool, _ error) {
	deadline := time.Now().Add(macWait)
	for {
		var claim ipamclaimsv1alpha1.IPAMClaim
		err := m.Reader.Get(ctx, key, &claim)
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			return nil, false, fmt.Errorf("reading IPAMClaim %s: %w", key, err)
		case err == nil && (claimstatus.Filled(&claim) || failed(&claim, inline)):
			return &claim, true, nil
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return &ipamclaimsv1alpha1.IPAMClaim{}, false, nil
		case <-time.After(macEvery):
		}
	}
	var claim ipamclaimsv1alpha1.IPAMClaim
	switch err := m.APIReader.Get(ctx, key, &claim); {
	case apierrors.IsNotFound(err):
		return &ipamclaimsv1alpha1.IPAMClaim{}, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading IPAMClaim %s: %w", key, err)
	}
	return &claim, true, nil
}

// failed says the controller tried and could not fill the claim
// (IPsAllocated=False): waiting would not help. Not on an inline network
// whose pool does not exist yet (PoolNotFound): ipkeeper-controller makes
// that pool from the network's NADs and then fills the claim, without
// anyone acting (claimaddrs tells that failure as Normal, "waiting"), as
// for a VM created together with its NAD.
func failed(claim *ipamclaimsv1alpha1.IPAMClaim, inline bool) bool {
	c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionIPsAllocated)
	if c == nil || c.Status != metav1.ConditionFalse {
		return false
	}
	return !inline || c.Reason != claimstatus.ReasonPoolNotFound
}
