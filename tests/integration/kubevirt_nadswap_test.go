// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Live NAD swap, driven by the real virt-controller v1.8.2 with its
// LiveUpdateNADRef gate on: the test changes the VM's
// multus.networkName; virt-controller moves the VMI to the new NAD, marks
// it MigrationRequired and, for the test's VirtualMachineInstanceMigration,
// creates the target pod with the new NAD. Simulated (framework.KubeVirt):
// scheduler, kubelet, Multus' network-status, virt-handler, including the
// target handler dropping MigrationRequired once the domain runs there.
// Each launcher's CNI ADD goes to the real ipkeeper agent of its node.

type swapEnv struct {
	*kvEnv
	confs  map[string]json.RawMessage // NAD name -> its config
	ifName string
}

// startSwapEnv makes the NADs blue-a, blue-a2 (the same network), blue-b
// and red, and those more returns (name -> config) for the namespace's
// suffix, before any launcher runs.
func startSwapEnv(t *testing.T, more ...func(suffix string) map[string]string) *swapEnv {
	t.Helper()
	ctx := context.Background()
	e := &swapEnv{kvEnv: startKubeVirtEnv(t), confs: map[string]json.RawMessage{}, ifName: kubevirt.PodInterfaceName("blue")}
	suffix := e.ns[len(e.ns)-5:]
	for nad, network := range map[string]string{"blue-a": "swap-a-" + suffix, "blue-a2": "swap-a-" + suffix, "blue-b": "swap-b-" + suffix, "red": "swap-red-" + suffix} {
		e.confs[nad] = json.RawMessage(bridgeNAD(network, true))
	}
	for _, m := range more {
		for nad, conf := range m(suffix) {
			e.confs[nad] = json.RawMessage(conf)
		}
	}
	for nad, conf := range e.confs {
		e.nad(t, nad, string(conf))
	}
	agents := map[string]*framework.Agent{}
	for _, n := range []string{"node-swap-a-" + suffix, "node-swap-b-" + suffix} {
		agents[n] = cp.StartAgent(t, n)
	}
	// The kubelet's CNI ADD, through the node's real agent, with the config
	// of the NAD the pod's networks annotation names.
	runThroughAgents(e.kv, agents, func(nad string) json.RawMessage { return e.confs[nad] }, nil)
	t.Log("with a kubelet that runs CNI ADD through the node's ipkeeper agent: " + e.kv.Simulated())
	if err := framework.SetKubeVirtGate(ctx, cp.Client, framework.LiveUpdateNADRefGate, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = framework.SetKubeVirtGate(context.Background(), cp.Client, framework.LiveUpdateNADRefGate, false)
	})
	return e
}

func (e *swapEnv) network(nad string) string {
	var c struct{ Name string }
	_ = json.Unmarshal(e.confs[nad], &c)
	return c.Name
}

func (e *swapEnv) nodes() (string, string) {
	suffix := e.ns[len(e.ns)-5:]
	return "node-swap-a-" + suffix, "node-swap-b-" + suffix
}

// start runs vm1 on NAD blue-a and returns its VMI and its address there.
func (e *swapEnv) start(t *testing.T) (*kubevirtv1.VirtualMachine, *kubevirtv1.VirtualMachineInstance, string) {
	t.Helper()
	return e.startOn(t, "blue-a")
}

// startOn runs vm1 with its network blue on NAD nad.
func (e *swapEnv) startOn(t *testing.T, nad string) (*kubevirtv1.VirtualMachine, *kubevirtv1.VirtualMachineInstance, string) {
	t.Helper()
	ctx := context.Background()
	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: nad})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaim(t, "vm1.blue")
	nodeA, _ := e.nodes()
	vmi, launcher, err := e.kv.Start(ctx, vm, nodeA)
	if err != nil {
		t.Fatal(err)
	}
	if ref := refs(t, launcher)[e.ifName]; ref != "vm1.blue" {
		t.Fatalf("launcher references %q, want vm1.blue", ref)
	}
	ips := e.claimIPs(t, "vm1.blue")
	return vm, vmi, ips[0]
}

// claimIPs waits for the claim's status.ips.
func (e *swapEnv) claimIPs(t *testing.T, name string) []string {
	t.Helper()
	var ips []string
	if err := framework.Eventually(context.Background(), 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		c, err := e.claim(ctx, name)
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		ips = c.Status.IPs
		return len(ips) > 0, nil
	}); err != nil {
		t.Fatalf("IPAMClaim %s never got addresses: %v", name, err)
	}
	return ips
}

// migrate runs the swap's migration to node B.
func (e *swapEnv) migrate(t *testing.T, vmi *kubevirtv1.VirtualMachineInstance, opts ...framework.MigrationOption) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	stop := e.kv.HandlerDropsMigrationRequired(ctx, vmi)
	defer stop()
	_, nodeB := e.nodes()
	_, target, err := e.kv.Migrate(ctx, vmi, nodeB, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return target
}

// checkNever asserts the two "never" rules over the namespace: no claim
// name for two networks (every claim's spec.network is the network its
// name was chosen for), and no launcher pod referencing a claim of another
// network than the NAD it attaches.
func (e *swapEnv) checkNever(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var pods corev1.PodList
	if err := cp.Client.List(ctx, &pods, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		elems, err := multus.ParseElements(p.Annotations[multus.Annotation], p.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		for _, el := range elems {
			if el.ClaimRef == "" {
				continue
			}
			var c ipamclaimsv1alpha1.IPAMClaim
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: el.ClaimRef}, &c); err != nil {
				continue // released after the pod ended
			}
			if want := e.network(el.Name); c.Spec.Network != want {
				t.Errorf("pod %s (phase %s) attaches NAD %s (network %q) with IPAMClaim %s of network %q", p.Name, p.Status.Phase, el.Name, want, c.Name, c.Spec.Network)
			}
		}
	}
	var claims ipamclaimsv1alpha1.IPAMClaimList
	if err := cp.Client.List(ctx, &claims, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		ok := false
		for _, logical := range []string{"blue", "red"} { // red: hot-plugged
			ok = ok || c.Name == naming.Claim("vm1", logical) || c.Name == naming.SwappedClaim("vm1", logical, c.Spec.Network)
		}
		if !ok {
			t.Errorf("IPAMClaim %s has network %q, which is not the network its name stands for", c.Name, c.Spec.Network)
		}
	}
}

// reservationOwners lists the owners of a network's reservations.
func reservationOwners(t *testing.T, network string) []string {
	t.Helper()
	var out []string
	for _, r := range reservationsOf(t, network) {
		out = append(out, string(r.Spec.Owner.Kind)+"/"+r.Spec.Owner.Name+" "+r.Spec.IP)
	}
	return out
}

func waitReservations(t *testing.T, network string, want int) {
	t.Helper()
	if err := framework.Eventually(context.Background(), 60*time.Second, 100*time.Millisecond, func(context.Context) (bool, error) {
		return len(reservationsOf(t, network)) == want, nil
	}); err != nil {
		t.Fatalf("network %s: reservations %v, want %d: %v", network, reservationOwners(t, network), want, err)
	}
}

// TestNADSwapSameNetwork: a NAD of the same CNI network keeps the VM's
// claim, so the migration target gets the VM's address.
func TestNADSwapSameNetwork(t *testing.T) {
	e := startSwapEnv(t)
	vm, _, ip := e.start(t)
	vmi, err := e.kv.SwapNAD(context.Background(), vm, "blue", "blue-a2")
	if err != nil {
		t.Fatal(err)
	}
	target := e.migrate(t, vmi)
	if ref := refs(t, target)[e.ifName]; ref != "vm1.blue" {
		t.Fatalf("target references %q, want the VM's claim vm1.blue", ref)
	}
	if got := e.claimIPs(t, "vm1.blue"); len(got) != 1 || got[0] != ip {
		t.Fatalf("claim vm1.blue holds %v after the swap, want %s", got, ip)
	}
	// A barrier: the release controller has seen the ended source pod.
	if err := framework.Touch(context.Background(), cp.Client, vm); err != nil {
		t.Fatal(err)
	}
	waitReservations(t, e.network("blue-a"), 1)
	if _, err := e.claim(context.Background(), naming.SwappedClaim("vm1", "blue", e.network("blue-a2"))); err == nil {
		t.Fatal("a second claim was made for the same network")
	}
	e.checkNever(t)
}

// TestNADSwapOtherNetwork: the target gets an address of the new network
// from its own claim while the source keeps the old one; once the
// migration succeeded, the old claim and its address are released.
func TestNADSwapOtherNetwork(t *testing.T) {
	e := startSwapEnv(t)
	vm, _, ipA := e.start(t)
	netA, netB := e.network("blue-a"), e.network("blue-b")
	vmi, err := e.kv.SwapNAD(context.Background(), vm, "blue", "blue-b")
	if err != nil {
		t.Fatal(err)
	}
	swapped := naming.SwappedClaim("vm1", "blue", netB)
	if c := e.waitClaim(t, swapped); c.Spec.Network != netB {
		t.Fatalf("claim %s has network %q, want %q", swapped, c.Spec.Network, netB)
	}
	// The running source still holds its address on the old network.
	if got := e.claimIPs(t, "vm1.blue"); got[0] != ipA {
		t.Fatalf("old claim holds %v, want %s", got, ipA)
	}
	e.checkNever(t)
	target := e.migrate(t, vmi)
	if ref := refs(t, target)[e.ifName]; ref != swapped {
		t.Fatalf("target references %q, want %s", ref, swapped)
	}
	ipB := e.claimIPs(t, swapped)
	t.Logf("address on %s: %s; on %s after the swap: %v", netA, ipA, netB, ipB)
	e.checkNever(t)
	if err := framework.Eventually(context.Background(), 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := e.claim(ctx, "vm1.blue")
		return err != nil, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("the old network's claim vm1.blue was not released after the migration: %v", err)
	}
	waitReservations(t, netA, 0)
	waitReservations(t, netB, 1)
	if r := reservationsOf(t, netB)[0]; r.Spec.Owner.Name != swapped {
		t.Fatalf("network %s reservation owned by %s, want the claim %s", netB, r.Spec.Owner.Name, swapped)
	}
	e.checkNever(t)
}

// TestNADSwapThenHotplugKeepsTheSourcesClaim: while a live swap of blue
// to another network waits for its migration, a NIC hotplug makes
// virt-controller rewrite the source launcher's whole networks annotation
// from the VMI spec (blue now naming the new NAD). The source's blue
// interface is still attached to the old network with the old claim's
// address: the webhook keeps that element as it was, so the old claim
// stays referenced, is not released, and its address stays the VM's.
func TestNADSwapThenHotplugKeepsTheSourcesClaim(t *testing.T) {
	ctx := context.Background()
	e := startSwapEnv(t)
	vm, vmi, ipA := e.start(t)
	netA, netB := e.network("blue-a"), e.network("blue-b")
	if _, err := e.kv.SwapNAD(ctx, vm, "blue", "blue-b"); err != nil {
		t.Fatal(err)
	}
	swapped := naming.SwappedClaim("vm1", "blue", netB)
	e.waitClaim(t, swapped)
	source, err := e.kv.Hotplug(ctx, vm, framework.VMNetwork{Name: "red", NAD: "red"})
	if err != nil {
		t.Fatal(err)
	}
	if ref := refs(t, source)[e.ifName]; ref != "vm1.blue" {
		t.Fatalf("after the hotplug the source launcher's blue references %q, want the old network's vm1.blue", ref)
	}
	e.checkNever(t)
	if got := e.claimIPs(t, "vm1.blue"); got[0] != ipA {
		t.Fatalf("the old claim holds %v, want the running VM's %s", got, ipA)
	}
	waitReservations(t, netA, 1)

	// The swap's migration then moves the VM, and only then is the old
	// network's address released.
	target := e.migrate(t, vmi)
	if ref := refs(t, target)[e.ifName]; ref != swapped {
		t.Fatalf("target references %q, want %s", ref, swapped)
	}
	e.checkNever(t)
	waitReservations(t, netA, 0)
	waitReservations(t, netB, 1)
}

// TestNADSwapFailedMigration: the migration to the new network fails; the
// VM keeps its address on the old network. The new network's claim stays
// while the VM's spec asks for that network (KubeVirt retries the
// migration) and is released with its address once the spec goes back to
// the old NAD: nothing leaks.
func TestNADSwapFailedMigration(t *testing.T) {
	e := startSwapEnv(t)
	vm, _, ipA := e.start(t)
	netA, netB := e.network("blue-a"), e.network("blue-b")
	vmi, err := e.kv.SwapNAD(context.Background(), vm, "blue", "blue-b")
	if err != nil {
		t.Fatal(err)
	}
	swapped := naming.SwappedClaim("vm1", "blue", netB)
	target := e.migrate(t, vmi, framework.FailMigration())
	if ref := refs(t, target)[e.ifName]; ref != swapped {
		t.Fatalf("failed target references %q, want %s", ref, swapped)
	}
	if got := e.claimIPs(t, "vm1.blue"); got[0] != ipA {
		t.Fatalf("after the failed migration the VM's claim holds %v, want %s", got, ipA)
	}
	e.checkNever(t)
	waitReservations(t, netA, 1)

	// The user gives up: the spec goes back to the old NAD.
	if _, err := e.kv.SwapNADBack(context.Background(), vm, "blue", "blue-a"); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(context.Background(), 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := e.claim(ctx, swapped)
		return err != nil, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("claim %s of the abandoned network was not released: %v", swapped, err)
	}
	waitReservations(t, netB, 0)
	waitReservations(t, netA, 1)
	if got := e.claimIPs(t, "vm1.blue"); got[0] != ipA {
		t.Fatalf("the VM's claim holds %v, want %s", got, ipA)
	}
	e.checkNever(t)
}

// TestNADSwappedVMKeepsItsRetainedAddresses: a VM with a retention whose
// blue network was swapped live to another CNI network holds the new
// network's address under the swapped claim name. Deleted and made again
// under its name, its claim of blue has the plain name (nothing holds it
// now) and takes that address back: both names are the same VM network's.
func TestNADSwappedVMKeepsItsRetainedAddresses(t *testing.T) {
	e := startSwapEnv(t)
	ctx := context.Background()
	vm, _, _ := e.start(t)
	netB := e.network("blue-b")
	removeReservationsAtEnd(t, func(r *ipkeeperv1alpha1.IPReservation) bool { return r.Spec.Network == netB })
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+claimstatus.RetentionAnnotation+`":"1h"}}}`))
	if err := cp.Client.Patch(ctx, vm, patch); err != nil {
		t.Fatal(err)
	}
	vmi, err := e.kv.SwapNAD(ctx, vm, "blue", "blue-b")
	if err != nil {
		t.Fatal(err)
	}
	swapped := naming.SwappedClaim("vm1", "blue", netB)
	e.waitClaim(t, swapped)
	e.migrate(t, vmi)
	ipB := e.claimIPs(t, swapped)
	waitFor(t, "the swapped claim to record the VM's retention and the old network's claim to go", func(ctx context.Context) (bool, error) {
		c, err := e.claim(ctx, swapped)
		if err != nil {
			return false, err
		}
		_, err = e.claim(ctx, "vm1.blue")
		return c.Annotations[claimstatus.RetentionAnnotation] == "1h0m0s" && apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})

	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		t.Fatal(err)
	}
	if err := e.kv.DeleteVM(ctx, vm, metav1.DeletePropagationBackground); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted VM's swapped claim to go, its address retired", func(ctx context.Context) (bool, error) {
		_, err := e.claim(ctx, swapped)
		if !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		rs := reservationsOf(t, netB)
		return len(rs) == 1 && rs[0].Spec.Released() && rs[0].Spec.Owner.Name == swapped, nil
	})

	again, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue-b"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.kv.DeleteVM(context.Background(), again, metav1.DeletePropagationBackground) })
	if got := e.claimIPs(t, "vm1.blue"); !slices.Equal(got, ipB) {
		t.Fatalf("VM made again: its claim vm1.blue records %v, want %v, which its swapped claim %s held and retained", got, ipB, swapped)
	}
	if rs := reservationsOf(t, netB); len(rs) != 1 || rs[0].Spec.Owner.Name != "vm1.blue" || rs[0].Spec.Released() {
		t.Fatalf("network %s reservations %+v, want one, held by vm1.blue", netB, rs)
	}
}

// TestNADSwapInASharedPoolKeepsTheSourcesAddress: two NADs of two CNI
// networks name one IPPool with a reuse cooldown, and the running VM is
// swapped live from one to the other. The swapped claim gets an address
// of its own (docs/kubevirt.md: the source keeps the old claim and its
// addresses); the source claim's reservation stays the very object it
// was, not released, while the source launcher runs: through a failed
// migration and the swap rolled back, its address is never free while
// the VM uses it. (The swapped claim's names include the source's plain
// one: an unreleased reservation of a live claim is never kept for
// another, reservation.KeptFor.)
func TestNADSwapInASharedPoolKeepsTheSourcesAddress(t *testing.T) {
	ctx := context.Background()
	var pool, netA, netB string
	e := startSwapEnv(t, func(suffix string) map[string]string {
		pool = retainingPool(t, "swap-shared-"+suffix, "10.106.0.0/28")
		netA, netB = "swap-sa-"+suffix, "swap-sb-"+suffix
		conf := func(network string) string {
			return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","bridge":"br-%s","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","pool":%q}}`, network, network, pool)
		}
		return map[string]string{"shared-a": conf(netA), "shared-b": conf(netB)}
	})
	vm, vmi, ipA := e.startOn(t, "shared-a")
	source := e.waitClaim(t, "vm1.blue")
	held := sharedReservation(t, pool, ipA)
	if held == nil {
		t.Fatalf("%s of IPPool %s has no reservation", ipA, pool)
	}
	if held.Spec.Owner.UID != source.UID {
		t.Fatalf("%s of IPPool %s is held by %s %s (UID %s), want the VM's claim vm1.blue (UID %s)", ipA, pool, held.Spec.Owner.Kind, held.Spec.Owner.Name, held.Spec.Owner.UID, source.UID)
	}
	// sourceKeeps checks that the source claim still holds ipA: the same
	// reservation, not released, and its status.
	sourceKeeps := func(when string) {
		t.Helper()
		r := sharedReservation(t, pool, ipA)
		switch {
		case r == nil:
			t.Fatalf("%s: %s of IPPool %s has no reservation while the source launcher runs on it", when, ipA, pool)
		case r.UID != held.UID || r.Spec.Owner.UID != source.UID || r.Spec.Released():
			t.Fatalf("%s: %s of IPPool %s is reservation %s (UID %s) of %s %s (UID %s), released %v; want the source claim vm1.blue's %s (UID %s), held",
				when, ipA, pool, r.Name, r.UID, r.Spec.Owner.Kind, r.Spec.Owner.Name, r.Spec.Owner.UID, r.Spec.Released(), held.Name, held.UID)
		}
		if got := e.claimIPs(t, "vm1.blue"); got[0] != ipA {
			t.Fatalf("%s: the source claim records %v, want %s", when, got, ipA)
		}
	}

	if _, err := e.kv.SwapNAD(ctx, vm, "blue", "shared-b"); err != nil {
		t.Fatal(err)
	}
	swapped := naming.SwappedClaim("vm1", "blue", netB)
	e.waitClaim(t, swapped)
	ipS := e.claimIPs(t, swapped)
	t.Logf("IPPool %s: the source claim's address on %s %s; the swapped claim's on %s %v", pool, netA, ipA, netB, ipS)
	if ipS[0] == ipA {
		t.Errorf("the swapped claim %s records %s, the running source's address", swapped, ipA)
	}
	sourceKeeps("after the swap")
	e.checkNever(t)

	e.migrate(t, vmi, framework.FailMigration())
	sourceKeeps("after the failed migration")
	// The user gives up, as docs/kubevirt.md says: the spec goes back.
	if _, err := e.kv.SwapNADBack(ctx, vm, "blue", "shared-a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the swapped claim of the abandoned network to go", func(ctx context.Context) (bool, error) {
		_, err := e.claim(ctx, swapped)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	sourceKeeps("after the swap was rolled back")
	e.checkNever(t)
}

// sharedReservation returns the reservation in pool of the address of
// ip (a claim's status.ips entry), or nil.
func sharedReservation(t *testing.T, pool, ip string) *ipkeeperv1alpha1.IPReservation {
	t.Helper()
	prefix, err := netip.ParsePrefix(ip)
	if err != nil {
		t.Fatal(err)
	}
	var list ipkeeperv1alpha1.IPReservationList
	if err := cp.Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if r := &list.Items[i]; r.Spec.Pool == pool && r.Spec.IP == prefix.Addr().String() {
			return r
		}
	}
	return nil
}
