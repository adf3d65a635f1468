// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestCompromisedNodeWriteMatrix is docs/security.md's table, object by
// object: as node A's agent, with its real node-bound credential, first
// with the shipped RBAC and then with RBAC granting it every verb on
// ipkeeper's objects and IPAMClaims (a mistaken RBAC edit), try to create,
// update, patch, delete and write the status of every kind ipkeeper
// touches that is not A's: reservations of node B's pods, of a VM's claim
// (lent to node A's VM's claim), of a VM's claim lent to another VM's
// (passed to it) and of a Cluster API claim; node B's block and a block of IPAMClaims; a
// pool; an IPAMClaim, its finalizers and its status; node B's pod; a NAD. Node A's own
// block may not be updated, patched or deleted either (blocks are only
// taken). Every write is refused (by RBAC or by the admission policies),
// and each object is unchanged afterwards. With every verb granted, a
// token of the agent's ServiceAccount that names no node is refused all
// of it, node A's own block included. Creating node A's own pods'
// reservations and blocks is allowed (TestAgentWritesBoundToItsNode).
func TestCompromisedNodeWriteMatrix(t *testing.T) {
	ctx := context.Background()
	applyPolicies(t)
	ns := cp.NewNamespace(t, "matrix")
	onA := agentOn(t, "node-a")

	claim := createClaim(t, ns, "vm1.matrix", "matrix-net")
	// With the finalizers ipkeeper-controller gives a VM's claim that
	// records a retention: stripping them would let its addresses go.
	setFinalizers := func(fs []string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": fs}})
		if err := cp.Client.Patch(context.Background(), claim, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("setting the finalizers of %s: %v", claim.Name, err)
		}
	}
	setFinalizers([]string{claims.Finalizer, claims.RetentionFinalizer})
	t.Cleanup(func() { setFinalizers(nil) })
	reservation := func(ip string, change func(*ipkeeperv1alpha1.IPReservation)) *ipkeeperv1alpha1.IPReservation {
		r := newReservation("matrix-net", ip)
		r.Spec.Owner.Namespace, r.Spec.Node = ns, "node-b"
		change(r)
		return r
	}
	block := func(cidr, node string, holder ipkeeperv1alpha1.BlockHolder) *ipkeeperv1alpha1.IPBlock {
		return &ipkeeperv1alpha1.IPBlock{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Block("matrix-net", netip.MustParsePrefix(cidr))},
			Spec:       ipkeeperv1alpha1.IPBlockSpec{Pool: "matrix-net", CIDR: cidr, Node: node, Holder: holder},
		}
	}
	objects := map[string]client.Object{
		"reservation of node B's pod": reservation("10.99.30.1", func(*ipkeeperv1alpha1.IPReservation) {}),
		"reservation of a VM's claim": reservation("10.99.30.2", func(r *ipkeeperv1alpha1.IPReservation) {
			r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: claim.Name, UID: claim.UID}
			r.Spec.Node, r.Spec.ContainerID, r.Spec.InterfaceName = "", "", ""
		}),
		"reservation of a VM's claim lent to another VM's (a decentralized live migration)": reservation("10.99.30.4", func(r *ipkeeperv1alpha1.IPReservation) {
			r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: claim.Name, UID: claim.UID}
			r.Spec.LentTo = &ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: "vm1r.matrix", UID: "00000000-0000-0000-0000-0000000001e7"}
			r.Spec.Node, r.Spec.ContainerID, r.Spec.InterfaceName = "", "", ""
		}),
		"reservation of a Cluster API claim": reservation("10.99.30.3", func(r *ipkeeperv1alpha1.IPReservation) {
			r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAddressClaim, Namespace: ns, Name: "machine-0", UID: "00000000-0000-0000-0000-00000000ca91"}
			r.Spec.Node, r.Spec.ContainerID, r.Spec.InterfaceName = "", "", ""
		}),
		"node B's block":        block("10.99.31.0/27", "node-b", ipkeeperv1alpha1.HolderNode),
		"node A's own block":    block("10.99.31.64/27", "node-a", ipkeeperv1alpha1.HolderNode),
		"a block of IPAMClaims": block("10.99.31.32/27", "", ipkeeperv1alpha1.HolderIPAMClaims),
		"a pool":                &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "matrix-pool"}, Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.32.0/24"}}}},
		"node B's pod":          &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "on-b"}, Spec: corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}},
		"a NAD":                 &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "matrix"}, Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"1.0.0","name":"matrix-net","type":"bridge","ipam":{"type":"ipkeeper","pool":"matrix-pool"}}`}},
		"a VM's IPAMClaim":      claim,
	}
	for what, o := range objects {
		if what == "a VM's IPAMClaim" {
			continue // made by createClaim
		}
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %s: %v", what, err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), o) })
	}
	// The policies take effect asynchronously: wait for the first refusal.
	var last error
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		probe := reservation("10.99.30.9", func(*ipkeeperv1alpha1.IPReservation) {})
		last = onA.Create(ctx, probe, client.DryRunAll)
		return apierrors.IsForbidden(last) || apierrors.IsInvalid(last), nil
	}); err != nil {
		t.Fatalf("the node-bound policy never refused a write for another node (last: %v)", last)
	}

	// mayCreate: the objects of which the writer may create a twin (node A
	// takes blocks for itself).
	matrix := func(t *testing.T, writer client.Client, mayCreate map[string]bool) {
		for what, o := range objects {
			key := client.ObjectKeyFromObject(o)
			before := o.DeepCopyObject().(client.Object)
			if err := cp.Client.Get(ctx, key, before); err != nil {
				t.Fatal(err)
			}
			refused := func(verb string, err error) {
				t.Helper()
				if err == nil || (!apierrors.IsForbidden(err) && !apierrors.IsInvalid(err)) {
					t.Errorf("%s %s: %v, want refused", verb, what, err)
				}
			}
			// create: the same object again, under a new name.
			fresh := before.DeepCopyObject().(client.Object)
			fresh.SetName(before.GetName() + "-twin")
			fresh.SetResourceVersion("")
			fresh.SetUID("")
			if !mayCreate[what] {
				refused("create", writer.Create(ctx, fresh, client.DryRunAll))
			}
			// update: the node taken over, as an agent would.
			changed := before.DeepCopyObject().(client.Object)
			changed.SetLabels(map[string]string{"compromised": "node-a"})
			if r, ok := changed.(*ipkeeperv1alpha1.IPReservation); ok {
				r.Spec.Node = "node-a"
				// A claim's address lent to node A's VM, or passed to the
				// claim it was lent to.
				if r.Spec.LentTo != nil {
					r.Spec.Owner, r.Spec.LentTo = *r.Spec.LentTo, nil
				} else if r.Spec.Owner.Kind == ipkeeperv1alpha1.OwnerIPAMClaim {
					r.Spec.LentTo = &ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "node-a-tenant", Name: "vm9.matrix", UID: "00000000-0000-0000-0000-0000000009a9"}
				}
			}
			refused("update", writer.Update(ctx, changed))
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"compromised": "node-a"}}})
			refused("patch", writer.Patch(ctx, before.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, patch)))
			if isKind[*ipamclaimsv1alpha1.IPAMClaim](before) {
				strip := []byte(`{"metadata":{"finalizers":null}}`)
				refused("strip the finalizers of", writer.Patch(ctx, before.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, strip)))
				// The MAC the claim shows (ipkeeper-controller's label).
				relabel, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{macaddr.Label: "0a-58-0a-63-1e-02"}}})
				refused("relabel the MAC of", writer.Patch(ctx, before.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, relabel)))
			}
			if isKind[*corev1.Pod](before) || isKind[*ipamclaimsv1alpha1.IPAMClaim](before) || isKind[*ipkeeperv1alpha1.IPPool](before) {
				refused("write the status of", writer.Status().Update(ctx, changed))
			}
			refused("delete", writer.Delete(ctx, before.DeepCopyObject().(client.Object)))

			after := before.DeepCopyObject().(client.Object)
			if err := cp.Client.Get(ctx, key, after); err != nil {
				t.Errorf("%s after the attempts: %v", what, err)
				continue
			}
			if after.GetResourceVersion() != before.GetResourceVersion() || !equality.Semantic.DeepEqual(after.GetLabels(), before.GetLabels()) {
				t.Errorf("%s changed under the attempts (resourceVersion %s -> %s)", what, before.GetResourceVersion(), after.GetResourceVersion())
			}
		}
	}
	ownBlock := map[string]bool{"node A's own block": true}
	t.Run("shipped RBAC", func(t *testing.T) { matrix(t, onA, ownBlock) })
	t.Run("RBAC granting everything", func(t *testing.T) {
		grantAgentEverything(t)
		waitGranted(t, onA)
		matrix(t, onA, ownBlock)
	})
	t.Run("RBAC granting everything, a token naming no node", func(t *testing.T) {
		noNode := agentOn(t, "")
		grantAgentEverything(t)
		waitGranted(t, noNode)
		matrix(t, noNode, nil)
	})
}

// waitGranted waits until RBAC gives the agent's ServiceAccount, as c,
// what grantAgentEverything grants and the shipped RBAC does not (deleting
// blocks), so that what is refused then is refused by the policies.
func waitGranted(t *testing.T, c client.Client) {
	t.Helper()
	var last *authorizationv1.SelfSubjectAccessReview
	if err := framework.Eventually(context.Background(), time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		last = &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: ipkeeperv1alpha1.GroupVersion.Group, Resource: "ipblocks", Verb: "delete"},
		}}
		err := c.Create(ctx, last)
		return err == nil && last.Status.Allowed, err
	}); err != nil {
		t.Fatalf("RBAC granting the agent everything is not in force: %v (last review: %+v)", err, last.Status)
	}
}

func isKind[T client.Object](o client.Object) bool {
	_, ok := o.(T)
	return ok
}
