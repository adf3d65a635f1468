// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ipkeeper/ipkeeper/internal/controller/capi"
	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// An IPAddressClaim of an ipkeeper IPPool gets an address of the pool's
// first family (first range in spec order with a free address), held by an
// IPReservation of the pool, and an IPAddress with the range's prefix and
// gateway, owned by claim and pool; deleting the claim releases all of it.
// Claims of other providers' pools are left alone.
func TestClusterAPIAllocationAndRelease(t *testing.T) {
	ctx := context.Background()
	e := newCAPIEnv(t, cp, "capi-alloc")
	pool := e.pool("v4", ipkeeperv1alpha1.PoolRange{Range: "10.77.1.0/24", RangeStart: "10.77.1.10", RangeEnd: "10.77.1.10", Gateway: "10.77.1.1"},
		ipkeeperv1alpha1.PoolRange{Range: "10.77.2.0/25", Gateway: "10.77.2.126"},
		ipkeeperv1alpha1.PoolRange{Range: "fd00:77::/64"})
	v6 := e.pool("v6", ipkeeperv1alpha1.PoolRange{Range: "fd00:78::/120"}, ipkeeperv1alpha1.PoolRange{Range: "10.78.0.0/24"})
	foreign := e.claim("foreign", pool.Name, func(c *ipamv1.IPAddressClaim) { c.Spec.PoolRef.APIGroup = "ipam.cluster.x-k8s.io.example" })

	type held struct {
		claim *ipamv1.IPAddressClaim
		addr  *ipamv1.IPAddress
		res   *ipkeeperv1alpha1.IPReservation
	}
	var all []held
	for _, tt := range []struct {
		claim, pool, wantRange, gateway string
		prefix                          int32
	}{
		{"m-first", pool.Name, "10.77.1.10/32", "10.77.1.1", 24}, // the first range's one address
		{"m-second", pool.Name, "10.77.2.0/25", "10.77.2.126", 25},
		{"m-v6", v6.Name, "fd00:78::/120", "", 120},
	} {
		claim := e.claim(tt.claim, tt.pool)
		claim = e.waitReady(claim.Name, metav1.ConditionTrue, clusterv1.ReadyReason)
		addr := e.address(claim)
		ip := netip.MustParseAddr(addr.Spec.Address)
		if !netip.MustParsePrefix(tt.wantRange).Contains(ip) || ptr.Deref(addr.Spec.Prefix, -1) != tt.prefix || addr.Spec.Gateway != tt.gateway {
			t.Fatalf("claim %s: IPAddress %+v, want an address in %s, prefix %d, gateway %q", tt.claim, addr.Spec, tt.wantRange, tt.prefix, tt.gateway)
		}
		want := ipamv1.IPPoolReference{APIGroup: "ipkeeper.io", Kind: "IPPool", Name: tt.pool}
		if addr.Name != claim.Name || addr.Spec.ClaimRef.Name != claim.Name || addr.Spec.PoolRef != want {
			t.Fatalf("IPAddress %s: claimRef %+v poolRef %+v, want the claim's name and %+v", addr.Name, addr.Spec.ClaimRef, addr.Spec.PoolRef, want)
		}
		if !metav1.IsControlledBy(addr, claim) || !controllerutil.ContainsFinalizer(addr, capi.ProtectFinalizer) || !ownedBy(addr, "IPPool", tt.pool) {
			t.Fatalf("IPAddress %s: owners %+v, finalizers %v; want the claim (controller), the pool, and %s", addr.Name, addr.OwnerReferences, addr.Finalizers, capi.ProtectFinalizer)
		}
		if !controllerutil.ContainsFinalizer(claim, capi.ReleaseFinalizer) {
			t.Fatalf("claim %s: finalizers %v, want %s", claim.Name, claim.Finalizers, capi.ReleaseFinalizer)
		}
		all = append(all, held{claim, addr, e.reservationOf(claim, tt.pool, addr.Spec.Address)})
	}

	// The claims' addresses are used, but the pool's name, which their
	// reservations carry as network, is no CNI network.
	waitPool(t, pool, "counting the two claims' addresses, of no network", func(st *ipkeeperv1alpha1.IPPoolStatus) bool {
		return st.Used == 2 && len(st.Networks) == 0
	})

	// Release: claim, IPAddress and reservation go.
	for _, h := range all {
		if err := cp.Client.Delete(ctx, h.claim); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range all {
		for _, obj := range []client.Object{h.claim, h.addr, h.res} {
			if err := framework.WaitGone(ctx, cp.Client, obj, time.Minute); err != nil {
				t.Fatalf("after deleting claim %s: %v", h.claim.Name, err)
			}
		}
	}
	e.untouched(foreign.Name)
}

func ownedBy(obj client.Object, kind, name string) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind == kind && ref.Name == name && ptr.Deref(ref.BlockOwnerDeletion, false) {
			return true
		}
	}
	return false
}

// The reservation collector releases the reservation of an IPAddressClaim
// that is gone without a release: one never seen (made while the
// controller was down), and one whose finalizer was taken off by hand.
func TestClusterAPIReservationCollected(t *testing.T) {
	ctx := context.Background()
	e := newCAPIEnv(t, cp, "capi-gc")
	pool := e.pool("p", ipkeeperv1alpha1.PoolRange{Range: "10.79.0.0/24"})

	orphan := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation(pool.Name, netip.MustParseAddr("10.79.0.200"))},
		Spec: ipkeeperv1alpha1.IPReservationSpec{Network: pool.Name, Pool: pool.Name, IP: "10.79.0.200",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAddressClaim, Namespace: e.ns, Name: "never", UID: types.UID("00000000-0000-4000-8000-00000000c0de")}},
	}
	if err := cp.Client.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitGone(ctx, cp.Client, orphan, time.Minute); err != nil {
		t.Fatalf("reservation of an IPAddressClaim that never existed: %v", err)
	}

	claim := e.claim("forced", pool.Name)
	claim = e.waitReady(claim.Name, metav1.ConditionTrue, clusterv1.ReadyReason)
	addr := e.address(claim)
	res := e.reservationOf(claim, pool.Name, addr.Spec.Address)
	// Paused, so the provider does not release; then forced out.
	claim.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
	if err := cp.Client.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
		t.Fatal(err)
	}
	claim.Finalizers = nil
	if err := cp.Client.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitGone(ctx, cp.Client, res, time.Minute); err != nil {
		t.Fatalf("reservation of a claim deleted past its finalizer: %v", err)
	}
	// Its IPAddress stays (protected, owned by the gone claim): the
	// API server's garbage collector would take it once its finalizer
	// goes; here it is cleaned up by hand.
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(addr), addr); err == nil {
		addr.Finalizers = nil
		_ = cp.Client.Update(ctx, addr)
		_ = cp.Client.Delete(ctx, addr)
	}
}

// A pool of two addresses serves two of three claims; the third says
// PoolExhausted until one is deleted, then gets the freed address. A
// claim of a missing or invalid pool says PoolNotReady until the pool is
// there and valid.
func TestClusterAPIPoolExhaustedAndNotReady(t *testing.T) {
	ctx := context.Background()
	e := newCAPIEnv(t, cp, "capi-full")
	pool := e.pool("two", ipkeeperv1alpha1.PoolRange{Range: "10.80.0.0/24", RangeStart: "10.80.0.5", RangeEnd: "10.80.0.6"})

	e.claim("a", pool.Name)
	a := e.waitReady("a", metav1.ConditionTrue, clusterv1.ReadyReason)
	e.claim("b", pool.Name)
	b := e.waitReady("b", metav1.ConditionTrue, clusterv1.ReadyReason)
	e.claim("c", pool.Name)
	c := e.waitReady("c", metav1.ConditionFalse, ipamv1.IPAddressClaimReadyPoolExhaustedReason)
	if c.Status.AddressRef.Name != "" {
		t.Fatalf("exhausted claim has addressRef %q", c.Status.AddressRef.Name)
	}
	freed := e.address(a).Spec.Address
	if other := e.address(b).Spec.Address; other == freed {
		t.Fatalf("claims a and b both have %s", freed)
	}
	if err := cp.Client.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	c = e.waitReady("c", metav1.ConditionTrue, clusterv1.ReadyReason)
	if got := e.address(c).Spec.Address; got != freed {
		t.Fatalf("claim c got %s, want the freed %s", got, freed)
	}

	// Missing pool, then created; invalid pool (overlapping ranges), then fixed.
	missing := e.ns + "-later"
	e.claim("d", missing)
	e.waitReady("d", metav1.ConditionFalse, ipamv1.IPAddressClaimReadyPoolNotReadyReason)
	e.pool("later", ipkeeperv1alpha1.PoolRange{Range: "10.81.0.0/24"})
	e.waitReady("d", metav1.ConditionTrue, clusterv1.ReadyReason)

	bad := e.pool("bad", ipkeeperv1alpha1.PoolRange{Range: "10.82.0.0/24"}, ipkeeperv1alpha1.PoolRange{Range: "10.82.0.0/25"})
	e.claim("f", bad.Name)
	f := e.waitReady("f", metav1.ConditionFalse, ipamv1.IPAddressClaimReadyPoolNotReadyReason)
	if msg := f.Status.Conditions[0].Message; !containsAll(msg, bad.Name, "spec.ranges[1].range", "overlaps") {
		t.Fatalf("PoolNotReady message %q does not name the pool and the field", msg)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(bad), bad); err != nil {
		t.Fatal(err)
	}
	bad.Spec.Ranges = bad.Spec.Ranges[:1]
	if err := cp.Client.Update(ctx, bad); err != nil {
		t.Fatal(err)
	}
	e.waitReady("f", metav1.ConditionTrue, clusterv1.ReadyReason)

	// A pool for other namespaces only (spec.namespaceSelector): not
	// ready, naming the pool and the namespace, until it selects this one.
	private := e.pool("private", ipkeeperv1alpha1.PoolRange{Range: "10.83.0.0/24"})
	selectNamespace := func(name string) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // the status controller writes the pool too
			if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(private), private); err != nil {
				return err
			}
			private.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: name}}
			return cp.Client.Update(ctx, private)
		}); err != nil {
			t.Fatal(err)
		}
	}
	selectNamespace("someone-else")
	e.claim("g", private.Name)
	g := e.waitReady("g", metav1.ConditionFalse, ipamv1.IPAddressClaimReadyPoolNotReadyReason)
	if msg := g.Status.Conditions[0].Message; !containsAll(msg, private.Name, e.ns, "spec.namespaceSelector") {
		t.Fatalf("PoolNotReady message %q does not name the pool, the namespace and the selector field", msg)
	}
	selectNamespace(e.ns)
	e.waitReady("g", metav1.ConditionTrue, clusterv1.ReadyReason)
}

// Pause, as the contract says: a claim with the paused annotation, or of a
// paused Cluster, or of a Cluster not found, is left alone (no finalizer,
// no status, no address) until that changes; a paused claim being deleted
// keeps its address until unpaused.
func TestClusterAPIPause(t *testing.T) {
	ctx := context.Background()
	e := newCAPIEnv(t, cp, "capi-pause")
	pool := e.pool("p", ipkeeperv1alpha1.PoolRange{Range: "10.83.0.0/24"})
	cluster := e.cluster("c1", true)
	before := claimReconciles()

	e.claim("by-cluster", pool.Name, func(c *ipamv1.IPAddressClaim) { c.Spec.ClusterName = cluster.Name })
	e.claim("by-label", pool.Name, func(c *ipamv1.IPAddressClaim) {
		c.Labels = map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
	})
	e.claim("by-annotation", pool.Name, func(c *ipamv1.IPAddressClaim) {
		c.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
	})
	e.claim("no-cluster", pool.Name, func(c *ipamv1.IPAddressClaim) { c.Spec.ClusterName = "c2" })
	// One reconcile finished per claim (a claim left alone causes no
	// further events): the controller has judged them all.
	e.waitReconciles(before + 4)
	for _, name := range []string{"by-cluster", "by-label", "by-annotation", "no-cluster"} {
		e.untouched(name)
	}

	// Unpause the Cluster; take the annotation off; create the missing Cluster.
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
		t.Fatal(err)
	}
	cluster.Spec.Paused = ptr.To(false)
	if err := cp.Client.Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	annotated := &ipamv1.IPAddressClaim{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: "by-annotation"}, annotated); err != nil {
		t.Fatal(err)
	}
	annotated.Annotations = nil
	if err := cp.Client.Update(ctx, annotated); err != nil {
		t.Fatal(err)
	}
	e.cluster("c2", false)
	var served []*ipamv1.IPAddressClaim
	for _, name := range []string{"by-cluster", "by-label", "by-annotation", "no-cluster"} {
		served = append(served, e.waitReady(name, metav1.ConditionTrue, clusterv1.ReadyReason))
	}

	// Deleted while paused (the annotation, which comes with the claim's
	// own events): nothing released until unpaused.
	claim := served[0]
	addr := e.address(claim)
	res := e.reservationOf(claim, pool.Name, addr.Spec.Address)
	before = claimReconciles()
	claim.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
	if err := cp.Client.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	e.waitReconciles(before + 1)
	before = claimReconciles()
	if err := cp.Client.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	e.waitReconciles(before + 1) // the deletion, judged
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(res), res); err != nil || res.Spec.Released() {
		t.Fatalf("reservation of a claim deleted while paused: %v, %+v; want it held", err, res.Spec)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil || !controllerutil.ContainsFinalizer(claim, capi.ReleaseFinalizer) {
		t.Fatalf("claim deleted while paused: %v, finalizers %v; want it held", err, claim.Finalizers)
	}
	claim.Annotations = nil
	if err := cp.Client.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{claim, addr, res} {
		if err := framework.WaitGone(ctx, cp.Client, obj, time.Minute); err != nil {
			t.Fatalf("after unpausing: %v", err)
		}
	}
}

// claimReconciles is how many reconciles of IPAddressClaims the in-process
// controllers have finished.
func claimReconciles() float64 {
	return framework.CounterWhere(metrics.Registry, "controller_runtime_reconcile_total", "controller", "ipaddressclaim")
}

func (e *capiEnv) waitReconciles(n float64) {
	e.t.Helper()
	if err := framework.Eventually(context.Background(), time.Minute, 50*time.Millisecond, func(context.Context) (bool, error) {
		return claimReconciles() >= n, e.ctrl.Exited()
	}); err != nil {
		e.t.Fatalf("IPAddressClaim reconciles: %v, want at least %v: %v", claimReconciles(), n, err)
	}
}

// Twenty claims created at once on a pool of exactly twenty addresses
// (the provider works on several claims in parallel) get twenty distinct
// addresses, each held by that claim's reservation; a 21st is told the
// pool is exhausted.
func TestClusterAPIConcurrentClaims(t *testing.T) {
	ctx := context.Background()
	e := newCAPIEnv(t, cp, "capi-race")
	pool := e.pool("p", ipkeeperv1alpha1.PoolRange{Range: "10.84.0.0/24", RangeStart: "10.84.0.100", RangeEnd: "10.84.0.119"})
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- cp.Client.Create(ctx, newClaim(e.ns, fmt.Sprintf("m%02d", i), pool.Name))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]string{}
	for i := range n {
		claim := e.waitReady(fmt.Sprintf("m%02d", i), metav1.ConditionTrue, clusterv1.ReadyReason)
		a := e.address(claim).Spec.Address
		if other, dup := seen[a]; dup {
			t.Fatalf("claims %s and %s both have %s", other, claim.Name, a)
		}
		seen[a] = claim.Name
		e.reservationOf(claim, pool.Name, a)
	}
	held, err := poolReservations(ctx, cp.Client, pool.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != n {
		t.Fatalf("pool %s has %d reservations, want %d (one per claim)", pool.Name, len(held), n)
	}
	e.claim("m20", pool.Name)
	e.waitReady("m20", metav1.ConditionFalse, ipamv1.IPAddressClaimReadyPoolExhaustedReason)
}

// Without Cluster API's CRDs the controller runs (no error, no crash,
// ready); once they are installed it serves IPAddressClaims without a
// restart.
func TestClusterAPIWithoutCRDs(t *testing.T) {
	ctx := context.Background()
	bare, err := framework.Start(ctx, framework.Options{WithoutClusterAPICRDs: true, WithoutKubeVirtCRDs: true, WithoutControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bare.Stop() })
	bare.DumpLogsOnFailure(t)
	ns := bare.NewNamespace(t, "capi-bare")
	ctrl := bare.StartController(t, ns, func(o *manager.Options) { o.ClusterAPIDiscoveryInterval = 200 * time.Millisecond })
	e := &capiEnv{t: t, cp: bare, ns: ns, ctrl: ctrl}
	t.Cleanup(e.deleteClaims)

	support := func() float64 { return framework.Gauge(metrics.Registry, "ipkeeper_controller_cluster_api_support") }
	waitSupport := func(want float64) {
		t.Helper()
		if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(context.Context) (bool, error) {
			return support() == want, ctrl.Exited()
		}); err != nil {
			t.Fatalf("ipkeeper_controller_cluster_api_support = %v, want %v: %v", support(), want, err)
		}
	}
	waitSupport(0)
	// Still running, and the garbage collector works meanwhile.
	res := newReservation("capi-bare-net", "10.85.0.11")
	res.Spec.Owner.Namespace = ns
	if err := bare.Client.Create(ctx, res); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitGone(ctx, bare.Client, res, time.Minute); err != nil {
		t.Fatalf("garbage collection without Cluster API: %v", err)
	}
	if err := ctrl.Exited(); err != nil {
		t.Fatal(err)
	}

	if err := bare.InstallClusterAPICRDs(ctx); err != nil {
		t.Fatal(err)
	}
	waitSupport(1)
	pool := e.pool("p", ipkeeperv1alpha1.PoolRange{Range: "10.85.1.0/24", Gateway: "10.85.1.1"})
	e.claim("m1", pool.Name)
	claim := e.waitReady("m1", metav1.ConditionTrue, clusterv1.ReadyReason)
	if a := e.address(claim); a.Spec.Gateway != "10.85.1.1" || ptr.Deref(a.Spec.Prefix, 0) != 24 {
		t.Fatalf("IPAddress %+v, want prefix 24 and gateway 10.85.1.1", a.Spec)
	}
}

// TestMixedStormOnOnePool: pods of two networks (plain ones, and a VM
// network's launcher pods whose addresses belong to IPAMClaims) through
// two agents, and Cluster API IPAddressClaims through the controller, all
// draw at once from one IPPool with exactly as many addresses as holders:
// every holder gets one, no address is held twice, and the pool's
// reservations are exactly theirs.
func TestMixedStormOnOnePool(t *testing.T) {
	ctx := context.Background()
	e := newCAPIEnv(t, cp, "mixed")
	const pods, vms, machines = 10, 5, 10
	pool := e.pool("p", ipkeeperv1alpha1.PoolRange{Range: "10.95.0.0/24", RangeStart: "10.95.0.10", RangeEnd: "10.95.0.34"}) // 25
	podConf := framework.NetConf("mixed-pods", map[string]any{"pool": pool.Name})
	vmConf := persistentConf("mixed-vms", map[string]any{"pool": pool.Name})
	persistentNAD(t, e.ns, "blue-nad", "mixed-vms", vmConf) // the network whose claims the controller fills
	agents := []*framework.Agent{cp.StartAgent(t, "node-mixed-a"), cp.StartAgent(t, "node-mixed-b")}

	type holder struct{ who, ip string }
	got := make(chan holder, pods+vms+machines)
	errs := make(chan error, pods+vms+machines)
	var wg sync.WaitGroup
	// add retries as the kubelet does: a conflict or a lagging cache may
	// fail an ADD while others allocate.
	add := func(who string, a *framework.Agent, pod *corev1.Pod, ifName string, conf []byte) {
		defer wg.Done()
		var last error
		if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			res, err := a.Add(ctx, pod, ifName, conf)
			if last = err; err != nil {
				return false, nil
			}
			got <- holder{who, resultIPs(t, res)[0].String()}
			return true, nil
		}); err != nil {
			errs <- fmt.Errorf("%s never got an address: %w (last: %w)", who, err, last)
		}
	}
	for i, p := range cp.CreatePods(t, e.ns, agents[0].Node, "pod-a", pods/2) {
		wg.Add(1)
		go add(fmt.Sprintf("pod-a%d", i), agents[0], p, "net1", podConf)
	}
	for i, p := range cp.CreatePods(t, e.ns, agents[1].Node, "pod-b", pods/2) {
		wg.Add(1)
		go add(fmt.Sprintf("pod-b%d", i), agents[1], p, "net1", podConf)
	}
	for i := range vms {
		claim := createClaim(t, e.ns, fmt.Sprintf("vm%d.mixed", i), "mixed-vms")
		a := agents[i%2]
		launcher := createLaunchers(t, e.ns, a.Node, fmt.Sprintf("launcher-vm%d", i), claim.Name, 1)[0]
		wg.Add(1)
		go add("vm"+fmt.Sprint(i), a, launcher, launcherIf, vmConf)
	}
	for i := range machines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cp.Client.Create(ctx, newClaim(e.ns, fmt.Sprintf("machine%d", i), pool.Name)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(got)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	owner := map[string]string{}
	for h := range got {
		if o, dup := owner[h.ip]; dup {
			t.Errorf("%s and %s both got %s", o, h.who, h.ip)
		}
		owner[h.ip] = h.who
	}
	for i := range machines {
		claim := e.waitReady(fmt.Sprintf("machine%d", i), metav1.ConditionTrue, clusterv1.ReadyReason)
		a := e.address(claim).Spec.Address
		if o, dup := owner[a]; dup {
			t.Errorf("%s and IPAddressClaim %s both got %s", o, claim.Name, a)
		}
		owner[a] = claim.Name
	}
	if len(owner) != pods+vms+machines {
		t.Fatalf("%d distinct addresses for %d holders", len(owner), pods+vms+machines)
	}
	held, err := poolReservations(ctx, cp.Client, pool.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != len(owner) {
		t.Fatalf("pool %s has %d reservations, want %d (one per holder)", pool.Name, len(held), len(owner))
	}
	for _, r := range held {
		if _, ok := owner[r.Spec.IP]; !ok {
			t.Errorf("reservation %s holds %s, which no holder got", r.Name, r.Spec.IP)
		}
	}
}
