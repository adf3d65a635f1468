// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/capi"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// capiEnv is a test's view of the Cluster API provider: a control plane,
// a namespace and a running controller.
type capiEnv struct {
	t    *testing.T
	cp   *framework.ControlPlane
	ns   string
	ctrl *framework.Controller
}

// newCAPIEnv starts the controller in a namespace of its own on c; the
// test's claims are deleted (and so released) before the controller stops.
func newCAPIEnv(t *testing.T, c *framework.ControlPlane, prefix string) *capiEnv {
	t.Helper()
	ns := c.NewNamespace(t, prefix)
	e := &capiEnv{t: t, cp: c, ns: ns}
	e.ctrl = c.StartController(t, ns)
	t.Cleanup(e.deleteClaims)
	return e
}

func (e *capiEnv) deleteClaims() {
	ctx := context.Background()
	var list ipamv1.IPAddressClaimList
	if err := e.cp.Client.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
		e.t.Errorf("listing the test's claims: %v", err)
		return
	}
	for i := range list.Items {
		c := &list.Items[i]
		if _, paused := c.Annotations[clusterv1.PausedAnnotation]; paused {
			delete(c.Annotations, clusterv1.PausedAnnotation)
			_ = e.cp.Client.Update(ctx, c)
		}
		_ = e.cp.Client.Delete(ctx, c)
	}
	for i := range list.Items {
		if err := framework.WaitGone(ctx, e.cp.Client, &list.Items[i], time.Minute); err != nil {
			e.t.Errorf("cleanup: %v", err)
		}
	}
}

// pool creates an IPPool named after the test's namespace and suffix.
func (e *capiEnv) pool(suffix string, ranges ...ipkeeperv1alpha1.PoolRange) *ipkeeperv1alpha1.IPPool {
	e.t.Helper()
	p := &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-" + suffix},
		Spec:       ipkeeperv1alpha1.IPPoolSpec{Ranges: ranges},
	}
	if err := e.cp.Client.Create(context.Background(), p); err != nil {
		e.t.Fatalf("creating IPPool %s: %v", p.Name, err)
	}
	e.t.Cleanup(func() { _ = e.cp.Client.Delete(context.Background(), p) })
	return p
}

// claim creates an IPAddressClaim of pool.
func (e *capiEnv) claim(name, pool string, tweaks ...func(*ipamv1.IPAddressClaim)) *ipamv1.IPAddressClaim {
	e.t.Helper()
	c := newClaim(e.ns, name, pool, tweaks...)
	if err := e.cp.Client.Create(context.Background(), c); err != nil {
		e.t.Fatalf("creating IPAddressClaim %s: %v", name, err)
	}
	return c
}

func newClaim(ns, name, pool string, tweaks ...func(*ipamv1.IPAddressClaim)) *ipamv1.IPAddressClaim {
	c := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ipamv1.IPAddressClaimSpec{
			PoolRef: ipamv1.IPPoolReference{APIGroup: capi.PoolGroup, Kind: capi.PoolKind, Name: pool},
		},
	}
	for _, tweak := range tweaks {
		tweak(c)
	}
	return c
}

// waitReady waits for the claim's Ready condition to be status, with
// reason; it returns the claim.
func (e *capiEnv) waitReady(name string, status metav1.ConditionStatus, reason string) *ipamv1.IPAddressClaim {
	e.t.Helper()
	claim := &ipamv1.IPAddressClaim{}
	err := framework.Eventually(context.Background(), time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := e.cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, claim); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(claim.Status.Conditions, ipamv1.IPAddressClaimReadyCondition)
		return c != nil && c.Status == status && c.Reason == reason, e.ctrl.Exited()
	})
	if err != nil {
		e.t.Fatalf("IPAddressClaim %s: want Ready=%s (%s), have %+v: %v", name, status, reason, claim.Status.Conditions, err)
	}
	return claim
}

// address returns the IPAddress a ready claim refers to.
func (e *capiEnv) address(claim *ipamv1.IPAddressClaim) *ipamv1.IPAddress {
	e.t.Helper()
	if claim.Status.AddressRef.Name == "" {
		e.t.Fatalf("IPAddressClaim %s: no status.addressRef", claim.Name)
	}
	addr := &ipamv1.IPAddress{}
	if err := e.cp.Client.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: claim.Status.AddressRef.Name}, addr); err != nil {
		e.t.Fatalf("IPAddress of claim %s: %v", claim.Name, err)
	}
	return addr
}

// reservationOf checks that pool's reservation of addr is the claim's and
// returns it.
func (e *capiEnv) reservationOf(claim *ipamv1.IPAddressClaim, pool string, addr string) *ipkeeperv1alpha1.IPReservation {
	e.t.Helper()
	res := &ipkeeperv1alpha1.IPReservation{}
	name := naming.Reservation(pool, netip.MustParseAddr(addr))
	if err := e.cp.Client.Get(context.Background(), client.ObjectKey{Name: name}, res); err != nil {
		e.t.Fatalf("reservation %s of claim %s: %v", name, claim.Name, err)
	}
	want := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAddressClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	if res.Spec.Owner != want || res.Spec.Pool != pool || res.Spec.Network != pool || res.Spec.Released() {
		e.t.Fatalf("reservation %s: spec %+v, want pool and network %s, owner %+v, not released", name, res.Spec, pool, want)
	}
	return res
}

// poolReservations lists the reservations of pool (spec.pool), live.
func poolReservations(ctx context.Context, c client.Reader, pool string) ([]ipkeeperv1alpha1.IPReservation, error) {
	var list ipkeeperv1alpha1.IPReservationList
	if err := c.List(ctx, &list, client.MatchingFields{"spec.pool": pool}); err != nil {
		return nil, fmt.Errorf("listing the reservations of pool %s: %w", pool, err)
	}
	return list.Items, nil
}

// cluster creates a Cluster API Cluster, paused or not.
func (e *capiEnv) cluster(name string, paused bool) *clusterv1.Cluster {
	e.t.Helper()
	c := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec:       clusterv1.ClusterSpec{Paused: ptr.To(paused)},
	}
	if err := e.cp.Client.Create(context.Background(), c); err != nil {
		e.t.Fatalf("creating Cluster %s: %v", name, err)
	}
	return c
}

// untouched checks that the controller has left a claim alone: no
// finalizer, no status, no IPAddress.
func (e *capiEnv) untouched(name string) {
	e.t.Helper()
	ctx := context.Background()
	claim := &ipamv1.IPAddressClaim{}
	if err := e.cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, claim); err != nil {
		e.t.Fatal(err)
	}
	if len(claim.Finalizers) != 0 || len(claim.Status.Conditions) != 0 || claim.Status.AddressRef.Name != "" {
		e.t.Fatalf("IPAddressClaim %s was reconciled: finalizers %v, status %+v", name, claim.Finalizers, claim.Status)
	}
	err := e.cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &ipamv1.IPAddress{})
	if !apierrors.IsNotFound(err) {
		e.t.Fatalf("IPAddress %s: %v, want none", name, err)
	}
}
