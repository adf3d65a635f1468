// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/reservation"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

func expectRefusedBy(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: got %v, want a refusal by the node-bound policy (%q)", what, err, want)
	}
}

// TestAgentWritesBoundToItsNode applies the shipped RBAC and the agent's
// ValidatingAdmissionPolicy (manifests/policy) to the real API server and
// writes as the agent's ServiceAccount with a pod-bound token naming its
// node: writes of its own node's pods' reservations and blocks are
// allowed, every other write refused (TestCompromisedNodeCannotFreeVMAddressesOrTouchPools
// covers claims and pools with every RBAC right granted).
func TestAgentWritesBoundToItsNode(t *testing.T) {
	ctx := context.Background()
	applyPolicies(t)
	ns := cp.NewNamespace(t, "node-bound")
	onA, onB, noNode := agentOn(t, "node-a"), agentOn(t, "node-b"), agentOn(t, "")

	podRes := func(ip, node string) *ipkeeperv1alpha1.IPReservation {
		r := newReservation("bound-net", ip)
		r.Spec.Owner.Namespace, r.Spec.Node = ns, node
		return r
	}
	// Policies take effect asynchronously: wait for the first refusal.
	var last error
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		last = onA.Create(ctx, podRes("10.99.3.1", "node-b"), client.DryRunAll)
		return apierrors.IsForbidden(last) || apierrors.IsInvalid(last), nil
	}); err != nil {
		t.Fatalf("the node-bound policy never refused a write for another node (last: %v)", last)
	}
	const ownPodsOnly = "may only create, change or delete reservations of pods with spec.node node-a"

	t.Run("reservations", func(t *testing.T) {
		own := podRes("10.99.3.10", "node-a")
		expectAllowed(t, "create a reservation of its node", onA.Create(ctx, own))
		own.Spec.ContainerID = "new-sandbox"
		expectAllowed(t, "update a reservation of its node", onA.Update(ctx, own))
		moved := own.DeepCopy()
		moved.Spec.Node = "node-b"
		expectRefusedBy(t, "hand its reservation to another node", onA.Update(ctx, moved), ownPodsOnly)
		expectAllowed(t, "delete a reservation of its node", onA.Delete(ctx, own))

		expectRefusedBy(t, "create a reservation for another node", onA.Create(ctx, podRes("10.99.3.11", "node-b")), ownPodsOnly)
		expectRefusedBy(t, "create a reservation without a node-bound token", noNode.Create(ctx, podRes("10.99.3.12", "node-a")), "pod-bound ServiceAccount token")

		theirs := podRes("10.99.3.13", "node-b")
		expectAllowed(t, "node-b creates its own", onB.Create(ctx, theirs))
		expectRefusedBy(t, "delete another node's reservation", onA.Delete(ctx, theirs), ownPodsOnly)
		taken := theirs.DeepCopy()
		taken.Spec.Node, taken.Spec.ContainerID = "node-a", "stolen"
		expectRefusedBy(t, "take over another node's pod reservation", onA.Update(ctx, taken), ownPodsOnly)
		expectAllowed(t, "cleanup", cp.Client.Delete(ctx, theirs))
	})

	// A release in a pool with a reuse cooldown is an update of the
	// agent's own node's reservation (spec.reuseAfter), which the policy
	// allows; deleting it once expired is allowed on its own node only:
	// admission CEL has no clock to tell "expired", so another node's
	// expired release is left to the controller's garbage collector.
	t.Run("released reservations", func(t *testing.T) {
		retire := func(c client.Client, r *ipkeeperv1alpha1.IPReservation, at time.Time) error {
			patch, err := reservation.RetirePatch(r.UID, r.ResourceVersion, at)
			if err != nil {
				t.Fatal(err)
			}
			return c.Patch(ctx, r, patch)
		}
		past := time.Now().Add(-time.Minute).Truncate(time.Second)
		own := podRes("10.99.3.30", "node-a")
		expectAllowed(t, "create a reservation of its node", onA.Create(ctx, own))
		stale := own.DeepCopy()
		expectAllowed(t, "retire a reservation of its node", retire(onA, own, past))
		if err := retire(cp.Client, stale, past.Add(time.Hour)); !apierrors.IsConflict(err) {
			t.Errorf("retire at a stale resourceVersion: %v, want a conflict (the precondition)", err)
		}
		if err := retire(cp.Client, own, past.Add(time.Hour)); err == nil {
			t.Errorf("a second retire changed reuseAfter; want it refused (set once)")
		}
		theirs := podRes("10.99.3.31", "node-b")
		expectAllowed(t, "node-b creates its own", onB.Create(ctx, theirs))
		expectRefusedBy(t, "retire another node's reservation", retire(onA, theirs.DeepCopy(), past), "may only")
		expectAllowed(t, "node-b retires it", retire(onB, theirs, past))
		expectRefusedBy(t, "delete another node's expired release", onA.Delete(ctx, theirs), ownPodsOnly)
		expectAllowed(t, "delete its node's expired release", onA.Delete(ctx, own))
		expectAllowed(t, "cleanup", cp.Client.Delete(ctx, theirs))
	})

	// On a sticky_mac network a pod presenting a MAC takes back, on any
	// node, the address a pod released with it: the one exception to
	// "its node's reservations only" is deleting another node's pod
	// reservation that is released and labelled with a MAC. Not one in
	// use, not a claim's, and no other write of it.
	t.Run("released reservations labelled with a MAC", func(t *testing.T) {
		retire := func(c client.Client, r *ipkeeperv1alpha1.IPReservation) error {
			patch, err := reservation.RetirePatch(r.UID, r.ResourceVersion, time.Now().Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			return c.Patch(ctx, r, patch)
		}
		withMAC := func(r *ipkeeperv1alpha1.IPReservation) *ipkeeperv1alpha1.IPReservation {
			r.Labels[macaddr.Label] = "02-00-00-00-03-60"
			return r
		}
		theirs := withMAC(podRes("10.99.3.60", "node-b"))
		expectAllowed(t, "node-b creates its own, labelled with a MAC", onB.Create(ctx, theirs))
		expectRefusedBy(t, "delete another node's reservation in use, labelled with a MAC", onA.Delete(ctx, theirs.DeepCopy()), ownPodsOnly)
		expectAllowed(t, "node-b retires it", retire(onB, theirs))
		taken := theirs.DeepCopy()
		taken.Spec.Node, taken.Spec.ContainerID = "node-a", "stolen"
		expectRefusedBy(t, "take over another node's released reservation labelled with a MAC", onA.Update(ctx, taken), ownPodsOnly)
		relabel, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{macaddr.Label: "02-00-00-00-00-66"}}})
		expectRefusedBy(t, "relabel the MAC of another node's released reservation", onA.Patch(ctx, theirs.DeepCopy(), client.RawPatch(types.MergePatchType, relabel)), ownPodsOnly)
		expectRefusedBy(t, "take back a released reservation without a node-bound token", noNode.Delete(ctx, theirs.DeepCopy()), "pod-bound ServiceAccount token")
		expectAllowed(t, "take back another node's released reservation labelled with a MAC (delete it)", onA.Delete(ctx, theirs))

		claimRes := withMAC(podRes("10.99.3.61", ""))
		claimRes.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: "vm1.net", UID: "00000000-0000-0000-0000-000000000361"}
		claimRes.Spec.Node, claimRes.Spec.ContainerID, claimRes.Spec.InterfaceName = "", "", ""
		expectAllowed(t, "create a claim's reservation labelled with a MAC", cp.Client.Create(ctx, claimRes))
		expectAllowed(t, "retire it", retire(cp.Client, claimRes))
		expectRefusedBy(t, "delete a claim's released reservation labelled with a MAC", onA.Delete(ctx, claimRes), ownPodsOnly)
		expectAllowed(t, "cleanup", cp.Client.Delete(ctx, claimRes))
	})

	// Only its node's agent watches a reservation labelled with the node,
	// and no agent one labelled as in a block of IPAMClaims, so no agent
	// may hide one from the others that way.
	t.Run("labels", func(t *testing.T) {
		labelled := func(ip, key, value string) *ipkeeperv1alpha1.IPReservation {
			r := podRes(ip, "node-a")
			r.Labels = map[string]string{key: value}
			return r
		}
		own := labelled("10.99.3.40", naming.NodeLabel, "node-a")
		expectAllowed(t, "label a reservation with its node", onA.Create(ctx, own))
		expectRefusedBy(t, "label a reservation with another node", onA.Create(ctx, labelled("10.99.3.41", naming.NodeLabel, "node-b")), "may only label reservations ipkeeper.io/node=node-a or ipkeeper.io/node=Shared")
		expectRefusedBy(t, "label a reservation as in a block of IPAMClaims", onA.Create(ctx, labelled("10.99.3.43", naming.ClaimsBlockLabel, "true")), "ipkeeper.io/claims-block")
		own.Spec.ContainerID = "new-sandbox"
		expectAllowed(t, "update a labelled reservation of its node", onA.Update(ctx, own))
		delete(own.Labels, naming.NodeLabel)
		expectRefusedBy(t, "drop the node label", onA.Update(ctx, own), "may not change a reservation's ipkeeper.io/node label")
		shared := labelled("10.99.3.44", naming.NodeLabel, naming.SharedNodeLabelValue)
		expectAllowed(t, "label a borrowed address's reservation shared", onA.Create(ctx, shared))
		shared.Labels[naming.NodeLabel] = "node-a"
		expectRefusedBy(t, "move a shared reservation to its node", onA.Update(ctx, shared), "may not change a reservation's ipkeeper.io/node label")
		unlabelled := podRes("10.99.3.42", "node-a")
		delete(unlabelled.Labels, naming.NodeLabel)
		expectAllowed(t, "create an unlabelled reservation (an agent of an earlier version)", onA.Create(ctx, unlabelled))
		unlabelled.Labels = map[string]string{naming.NodeLabel: "node-a"}
		expectRefusedBy(t, "add the node label", onA.Update(ctx, unlabelled), "may not change a reservation's ipkeeper.io/node label")
		expectAllowed(t, "cleanup", cp.Client.Delete(ctx, own))
		expectAllowed(t, "cleanup", cp.Client.Delete(ctx, shared))
		expectAllowed(t, "cleanup", cp.Client.Delete(ctx, unlabelled))
	})

	t.Run("address blocks", func(t *testing.T) {
		block := func(cidr, node string, holder ipkeeperv1alpha1.BlockHolder) *ipkeeperv1alpha1.IPBlock {
			p := netip.MustParsePrefix(cidr)
			return &ipkeeperv1alpha1.IPBlock{
				ObjectMeta: metav1.ObjectMeta{Name: naming.Block("bound-net", p)},
				Spec:       ipkeeperv1alpha1.IPBlockSpec{Pool: "bound-net", CIDR: cidr, Node: node, Holder: holder},
			}
		}
		own := block("10.99.7.0/27", "node-a", ipkeeperv1alpha1.HolderNode)
		expectAllowed(t, "take a block for its node", onA.Create(ctx, own))
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), own) })
		expectRefusedBy(t, "take a block for another node", onA.Create(ctx, block("10.99.7.32/27", "node-b", ipkeeperv1alpha1.HolderNode)), "may only take (create) address blocks for node node-a")
		expectRefusedBy(t, "take a block of IPAMClaims", onA.Create(ctx, block("10.99.7.64/27", "", ipkeeperv1alpha1.HolderIPAMClaims)), "may only take (create) address blocks for node node-a")
		if err := onA.Delete(ctx, own); !apierrors.IsForbidden(err) {
			t.Errorf("an agent deleted a block: %v, want forbidden by RBAC (blocks go with their Node)", err)
		}
		if err := cp.Client.Create(ctx, block("10.99.7.65/27", "node-a", ipkeeperv1alpha1.HolderNode)); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "no host bits") {
			t.Errorf("a block with host bits set: %v, want refused by the CRD's validation", err)
		}
		if err := cp.Client.Create(ctx, block("10.99.7.96/27", "node-a", ipkeeperv1alpha1.HolderIPAMClaims)); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "must be empty for a block of IPAMClaims") {
			t.Errorf("a block of IPAMClaims with a node: %v, want refused by the CRD's validation", err)
		}
	})

	t.Run("pools and claims", func(t *testing.T) {
		inline := &ipkeeperv1alpha1.IPPool{
			ObjectMeta: metav1.ObjectMeta{Name: "bound-inline", Labels: map[string]string{ipkeeperv1alpha1.InlineLabel: "true"}},
			Spec:       ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.4.0/24"}}},
		}
		expectForbidden(t, "create an inline network's pool", onA.Create(ctx, inline))
		claim := createClaim(t, ns, "vm2.bound", "bound-net")
		var c ipamclaimsv1alpha1.IPAMClaim
		if err := onA.Get(ctx, client.ObjectKeyFromObject(claim), &c); err != nil {
			t.Fatalf("an agent reads claims: %v", err)
		}
		c.Status.IPs = []string{"10.99.3.20/24"}
		expectForbidden(t, "set the addresses of a claim", onA.Status().Update(ctx, &c))
		c.Status.IPs = []string{}
		c.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "virt-launcher-vm2-target"}
		expectForbidden(t, "record a claim's owner pod", onA.Status().Update(ctx, &c))
	})
}

// TestControllerMayOnlySetClaimConditions applies the shipped policies and
// writes claim status as ipkeeper-controller's ServiceAccount: conditions
// and the owner pod may change, and a claim without addresses may get its
// first ones; addresses a claim has may not change.
func TestControllerMayOnlySetClaimConditions(t *testing.T) {
	ctx := context.Background()
	applyPolicies(t)
	ns := cp.NewNamespace(t, "ctrl-claims")
	ctrl := clientAs(t, "ipkeeper-controller")
	claim := createClaim(t, ns, "vm1.ctrl", "ctrl-net")
	claim.Status.IPs = []string{"10.99.7.5/24"}
	if err := cp.Client.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	var c ipamclaimsv1alpha1.IPAMClaim
	if err := ctrl.Get(ctx, client.ObjectKeyFromObject(claim), &c); err != nil {
		t.Fatal(err)
	}
	changed := c.DeepCopy()
	changed.Status.IPs = []string{"10.99.7.6/24"}
	var last error
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		last = ctrl.Status().Update(ctx, changed, client.DryRunAll)
		return apierrors.IsForbidden(last) || apierrors.IsInvalid(last), nil
	}); err != nil {
		out, _ := cp.Kubectl(ctx, nil, "get", "validatingadmissionpolicies,validatingadmissionpolicybindings", "-o", "yaml")
		t.Fatalf("the controller's claim-status policy never refused an address change (last: %v)\n%s", last, out)
	}
	expectRefusedBy(t, "the controller changes a claim's addresses", last, "never changes or clears addresses a claim has")
	cleared := c.DeepCopy()
	cleared.Status.IPs = []string{} // the schema requires the list
	expectRefusedBy(t, "the controller clears a claim's addresses", ctrl.Status().Update(ctx, cleared, client.DryRunAll), "never changes or clears addresses a claim has")
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: "AddressesInPool", Status: metav1.ConditionFalse, Reason: "OutOfPool", Message: "10.99.7.5 left"})
	c.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "virt-launcher-vm1-x"}
	expectAllowed(t, "the controller sets a condition and the owner pod", ctrl.Status().Update(ctx, &c))

	// A claim with no addresses yet: the controller records its first ones.
	fresh := createClaim(t, ns, "vm2.ctrl", "ctrl-net")
	var f ipamclaimsv1alpha1.IPAMClaim
	if err := ctrl.Get(ctx, client.ObjectKeyFromObject(fresh), &f); err != nil {
		t.Fatal(err)
	}
	f.Status.IPs = []string{"10.99.7.9/24", "fd00:99::9/64"}
	meta.SetStatusCondition(&f.Status.Conditions, metav1.Condition{Type: "IPsAllocated", Status: metav1.ConditionTrue, Reason: "SuccessfulAllocation", Message: "10.99.7.9 allocated"})
	expectAllowed(t, "the controller records a claim's first addresses", ctrl.Status().Update(ctx, &f))
}

// TestControllerMayOnlyProtectPools applies the shipped policies and
// patches an IPPool as ipkeeper-controller's ServiceAccount: its RBAC lets
// it patch pools, for its finalizer ipkeeper.io/in-use (which keeps a pool
// in use from going), and the policy ipkeeper-controller-pool-finalizer
// lets such a patch add or remove that finalizer and change nothing else:
// not the spec, labels, annotations or anyone else's finalizer.
func TestControllerMayOnlyProtectPools(t *testing.T) {
	ctx := context.Background()
	applyPolicies(t)
	ctrl := clientAs(t, "ipkeeper-controller")
	const other = "example.com/other"
	pool := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "ctrl-pool-finalizer", Finalizers: []string{other}},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.12.0/24"}}}}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p := &ipkeeperv1alpha1.IPPool{}
		if cp.Client.Get(context.Background(), client.ObjectKeyFromObject(pool), p) == nil {
			p.Finalizers = nil
			_ = cp.Client.Update(context.Background(), p)
			_ = cp.Client.Delete(context.Background(), p)
		}
	})
	patch := func(change func(*ipkeeperv1alpha1.IPPool), opts ...client.PatchOption) error {
		var p ipkeeperv1alpha1.IPPool
		if err := ctrl.Get(ctx, client.ObjectKeyFromObject(pool), &p); err != nil {
			t.Fatal(err)
		}
		before := p.DeepCopy()
		change(&p)
		return ctrl.Patch(ctx, &p, client.MergeFrom(before), opts...)
	}
	const why = "may only add or remove its finalizer ipkeeper.io/in-use"
	spec := func(p *ipkeeperv1alpha1.IPPool) { p.Spec.Ranges[0].Exclude = []string{"10.99.12.1"} }
	var last error
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		last = patch(spec, client.DryRunAll)
		return apierrors.IsForbidden(last), nil
	}); err != nil {
		t.Fatalf("the controller's pool policy never refused a spec change (last: %v)", last)
	}
	expectRefusedBy(t, "the controller changes a pool's spec", last, why)
	expectRefusedBy(t, "the controller labels a pool", patch(func(p *ipkeeperv1alpha1.IPPool) {
		p.Labels = map[string]string{ipkeeperv1alpha1.InlineLabel: "true"}
	}, client.DryRunAll), why)
	expectRefusedBy(t, "the controller annotates a pool", patch(func(p *ipkeeperv1alpha1.IPPool) {
		p.Annotations = map[string]string{ipkeeperv1alpha1.InlineNetworkAnnotation: "blue"}
	}, client.DryRunAll), why)
	expectRefusedBy(t, "the controller removes another's finalizer", patch(func(p *ipkeeperv1alpha1.IPPool) {
		p.Finalizers = nil
	}, client.DryRunAll), why)
	expectAllowed(t, "the controller adds its finalizer", patch(func(p *ipkeeperv1alpha1.IPPool) {
		p.Finalizers = append(p.Finalizers, ipkeeperv1alpha1.PoolInUseFinalizer)
	}))
	expectAllowed(t, "the controller removes its finalizer", patch(func(p *ipkeeperv1alpha1.IPPool) {
		p.Finalizers = []string{other}
	}))
	expectForbidden(t, "the controller deletes a pool", ctrl.Delete(ctx, pool, client.DryRunAll))
}

// TestClaimStatusIPsMustBeAddresses: with the shipped policies an
// IPAMClaim's status.ips takes only addresses and CIDRs, whoever writes
// it (an administrator here): "garbage" would leave every reader of the
// claim to guess (the controller refuses the claim, the agent its
// launchers). Addresses are taken, and a status write that leaves
// status.ips as it was passes, so a claim written before the policy still
// gets its conditions.
func TestClaimStatusIPsMustBeAddresses(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "ips-syntax")
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1.blue", Namespace: ns},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: "ips-syntax", Interface: "pod16477688c0e"},
	}
	if err := cp.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	setClaimIPs(t, ns, claim.Name, "not-an-address") // before the policy
	applyPolicies(t)
	write := func(ips []string, opts ...client.SubResourceUpdateOption) error {
		c := getClaim(t, ns, claim.Name)
		c.Status.IPs = ips
		return cp.Client.Status().Update(ctx, c, opts...)
	}
	// The policy is enforced a moment after its apply.
	if err := framework.Eventually(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		return write([]string{"garbage"}, client.DryRunAll) != nil, nil
	}); err != nil {
		t.Fatalf("status.ips [garbage] is accepted: %v", err)
	}
	// A status write that leaves status.ips alone passes, whatever it holds.
	c := getClaim(t, ns, claim.Name)
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: "IPsAllocated", Status: metav1.ConditionFalse, Reason: "Invalid", Message: "status.ips[0] is not an address"})
	if err := cp.Client.Status().Update(ctx, c); err != nil {
		t.Errorf("a condition written next to a status.ips from before the policy: %v", err)
	}
	for _, tt := range []struct {
		ips []string
		ok  bool
	}{
		{[]string{"10.0.0.5/24", "fd00::5/64"}, true},
		{[]string{"10.0.0.5", "fd00::5"}, true},
		{[]string{"garbage"}, false},
		{[]string{"10.0.0.5/24", "10.0.0.256/24"}, false},
		{[]string{"10.0.0.5/33"}, false},
		{[]string{""}, false},
	} {
		err := write(tt.ips)
		switch {
		case tt.ok && err != nil:
			t.Errorf("status.ips %q refused: %v", tt.ips, err)
		case !tt.ok && err == nil:
			t.Errorf("status.ips %q accepted", tt.ips)
		case !tt.ok && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.ips")):
			t.Errorf("status.ips %q: want Invalid naming status.ips, got %v", tt.ips, err)
		}
	}
}
