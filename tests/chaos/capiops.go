// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/capi"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// capiSlots is how many Cluster API claims of the shared pool can exist at once.
const capiSlots = 4

// capiReadyTimeout bounds the wait for a new Cluster API claim's address:
// long enough for a controller restart, short of stalling the slot.
const capiReadyTimeout = 20 * time.Second

// capiSlot is one Cluster API IPAddressClaim of the shared pool, made by
// the harness as a Cluster API infrastructure provider would.
type capiSlot struct {
	mu   sync.Mutex
	name string
	gen  int
	// claim is the claim that exists (nil: none); att its address, once
	// the harness saw it Ready.
	claim *ipamv1.IPAddressClaim
	att   *attachment
}

// capiClaim makes the slot's claim and waits for its address, or deletes
// it. The claim draws from the pool the small networks' pods draw from:
// its address is nobody else's (I1), reserved for it (I2, its owner the
// claim), named by the pool's lock key (I7), released after its deletion
// (I3) and not handed to another holder within the pool's cooldown (I1).
// While the pool admits no namespace of the run, or is full, the claim
// stays unready; it is deleted later like any other.
func (r *runner) capiClaim(ctx context.Context, st step) {
	cs := r.capi[st.slot%capiSlots]
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.claim != nil {
		r.deleteCAPIClaim(ctx, st.seq, cs)
		return
	}
	cs.gen++
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("%s-g%d", cs.name, cs.gen)},
		Spec:       ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{APIGroup: capi.PoolGroup, Kind: capi.PoolKind, Name: smallPool}},
	}
	if r.api(ctx, st.seq, "create-ipaddressclaim", claim.Name, func(ctx context.Context) error {
		obj := claim.DeepCopy()
		err := r.c.cp.Client.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			err = r.c.cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		}
		if err == nil {
			claim = obj
		}
		return err
	}) != nil {
		return
	}
	cs.claim = claim
	a := &attachment{network: smallPool, pool: smallPool, key: smallPool, podNS: namespace, podName: claim.Name, podUID: claim.UID,
		containerID: "capi-" + claim.Name, capi: true}
	done := r.model.touch(a.holder())
	defer done()
	r.model.add(a)
	var addr string
	err := framework.Eventually(ctx, capiReadyTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		var c ipamv1.IPAddressClaim
		if err := r.c.cp.Client.Get(ctx, client.ObjectKeyFromObject(claim), &c); err != nil {
			return false, nil
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, ipamv1.IPAddressClaimReadyCondition)
		if cond == nil || cond.Status != metav1.ConditionTrue || c.Status.AddressRef.Name == "" {
			return false, nil
		}
		var ipa ipamv1.IPAddress
		if err := r.c.cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: c.Status.AddressRef.Name}, &ipa); err != nil {
			return false, nil
		}
		addr = ipa.Spec.Address
		return true, nil
	})
	if err != nil {
		r.counts.inc("capi-claim-unready")
		r.model.setState(a, attFailed)
		cs.att = a // its address, if it gets one later, is released with it
		return
	}
	ip, perr := netip.ParseAddr(addr)
	if perr != nil {
		r.violate("I2", "capi-bad-address", fmt.Sprintf("IPAddress of Cluster API claim %s has address %q: %v", claim.Name, addr, perr), claim.Name)
		return
	}
	r.counts.inc("capi-claim-ready")
	r.addSucceeded(a, []netip.Addr{ip}, "")
	cs.att = a
}

// deleteCAPIClaim deletes the slot's claim and waits until it is gone
// (the controller releases its address, then drops its finalizer).
func (r *runner) deleteCAPIClaim(ctx context.Context, op int, cs *capiSlot) {
	var holders []string
	if cs.att != nil {
		holders = append(holders, cs.att.holder())
	}
	done := r.model.touch(holders...)
	defer done()
	if cs.att != nil && r.model.stateOf(cs.att) == attLive {
		r.model.setState(cs.att, attReleasing)
	}
	claim := cs.claim
	if r.api(ctx, op, "delete-ipaddressclaim", claim.Name, func(ctx context.Context) error {
		if err := r.c.cp.Client.Delete(ctx, claim.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		err := r.c.cp.Client.Get(ctx, client.ObjectKeyFromObject(claim), &ipamv1.IPAddressClaim{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("IPAddressClaim %s not gone yet (%w)", claim.Name, err)
	}) != nil {
		return
	}
	r.counts.inc("capi-claims-deleted")
	if cs.att != nil {
		r.model.setState(cs.att, attDead)
	}
	cs.claim, cs.att = nil, nil
}

// checkCAPICaused checks I8 for Cluster API objects at quiescence: every
// IPAddressClaim is one the harness made, and every IPAddress is of a
// claim that exists.
func (r *runner) checkCAPICaused(ctx context.Context) {
	var claims ipamv1.IPAddressClaimList
	var addrs ipamv1.IPAddressList
	if err := r.c.cp.Client.List(ctx, &claims); err != nil {
		r.harnessError(fmt.Errorf("listing IPAddressClaims at quiescence: %w", err))
		return
	}
	if err := r.c.cp.Client.List(ctx, &addrs); err != nil {
		r.harnessError(fmt.Errorf("listing IPAddresses at quiescence: %w", err))
		return
	}
	mine := map[string]bool{}
	for _, cs := range r.capi {
		if cs.claim != nil {
			mine[cs.claim.Name] = true
		}
	}
	exists := map[string]bool{}
	for _, c := range claims.Items {
		r.counts.inc("check:I8")
		exists[c.Namespace+"/"+c.Name] = true
		if !mine[c.Name] || c.Namespace != namespace {
			r.violate("I8", "capi-claim-nobody-caused", fmt.Sprintf("IPAddressClaim %s/%s is not one the harness has", c.Namespace, c.Name), c.Name)
		}
	}
	for _, a := range addrs.Items {
		r.counts.inc("check:I8")
		if !exists[a.Namespace+"/"+a.Spec.ClaimRef.Name] {
			r.violate("I8", "ipaddress-of-no-claim", fmt.Sprintf("IPAddress %s/%s (%s) is of claim %s, which does not exist", a.Namespace, a.Name, a.Spec.Address, a.Spec.ClaimRef.Name), a.Name)
		}
	}
}

// capiOwners are the UIDs of the Cluster API claims that exist.
func capiOwners(list *ipamv1.IPAddressClaimList) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, c := range list.Items {
		out[c.UID] = true
	}
	return out
}
