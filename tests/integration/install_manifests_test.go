// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Every shipped manifest, default and cert-manager overlay, is accepted by
// the API server (server-side apply, dry run: validation, defaulting and
// admission all run).
func TestManifestsApplyWithServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	ensureInstallNamespace(t)
	for _, dir := range []string{"manifests", "manifests/overlays/cert-manager", "manifests/overlays/existing-crds", "manifests/overlays/openshift"} {
		t.Run(dir, func(t *testing.T) {
			rendered, err := cp.Kubectl(ctx, nil, "kustomize", repoPath(t, dir))
			if err != nil {
				t.Fatal(err)
			}
			out, err := cp.Kubectl(ctx, rendered, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "--field-manager=ipkeeper-install", "-f", "-")
			if err != nil {
				t.Fatal(err)
			}
			applied := strings.Count(string(out), "serverside-applied (server dry run)")
			objects := strings.Count(string(rendered), "\nkind: ") + boolInt(strings.HasPrefix(string(rendered), "kind: "))
			if applied != objects || objects < 15 {
				t.Fatalf("%d of %d objects applied:\n%s", applied, objects, out)
			}
			for _, want := range []string{"deployment.apps/ipkeeper-controller", "daemonset.apps/ipkeeper-agent", "mutatingwebhookconfiguration.admissionregistration.k8s.io/ipkeeper", "poddisruptionbudget.policy/ipkeeper-controller", "clusterrole.rbac.authorization.k8s.io/ipkeeper-agent"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s missing from the applied objects", want)
				}
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Each ServiceAccount can do what its component needs and is refused the
// rest, checked with real requests made through impersonation.
func TestRBACIsLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	applyRBAC(t)
	ns := cp.NewNamespace(t, "rbac")
	claim := createClaim(t, ns, "c1", "rbac-net")
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1"}, Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
	if err := cp.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}}
	if err := cp.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}

	t.Run("agent", func(t *testing.T) {
		agent := clientAs(t, "ipkeeper-agent")
		res := newReservation("rbac-net", "10.99.0.1")
		expectAllowed(t, "create IPReservation", agent.Create(ctx, res))
		expectAllowed(t, "delete IPReservation", agent.Delete(ctx, res))
		var c ipamclaimsv1alpha1.IPAMClaim
		expectAllowed(t, "get IPAMClaim", agent.Get(ctx, client.ObjectKeyFromObject(claim), &c))
		c.Status.IPs = []string{"10.99.0.2/24"}
		expectForbidden(t, "update IPAMClaim status (the controller's)", agent.Status().Update(ctx, &c))
		c.Spec.Network = "other"
		expectForbidden(t, "update IPAMClaim spec", agent.Update(ctx, &c))
		expectForbidden(t, "delete IPAMClaim", agent.Delete(ctx, claim))
		expectForbidden(t, "delete VirtualMachine", agent.Delete(ctx, vm))
		expectForbidden(t, "read Secret", agent.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}))
		expectForbidden(t, "create Pod", agent.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}))
		expectAllowed(t, "list IPAMClaims", agent.List(ctx, &ipamclaimsv1alpha1.IPAMClaimList{}, client.InNamespace(ns)))
		expectForbidden(t, "list VirtualMachines", agent.List(ctx, &kubevirtv1.VirtualMachineList{}, client.InNamespace(ns)))
		// Claim-backed ADDs read the attachment's NAD (cached: listed and
		// watched), never a VM. A launcher the webhook missed (an outage)
		// needs its VMI, read by name only: never listed or watched.
		expectAllowed(t, "get NetworkAttachmentDefinition", agent.Get(ctx, client.ObjectKey{Namespace: ns, Name: "blue-nad"}, &nadv1.NetworkAttachmentDefinition{}))
		expectAllowed(t, "list NetworkAttachmentDefinitions", agent.List(ctx, &nadv1.NetworkAttachmentDefinitionList{}, client.InNamespace(ns)))
		if err := agent.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vm1"}, &kubevirtv1.VirtualMachineInstance{}); apierrors.IsForbidden(err) {
			t.Errorf("get VirtualMachineInstance: %v, want allowed (a launcher the webhook missed)", err)
		}
		expectForbidden(t, "list VirtualMachineInstances", agent.List(ctx, &kubevirtv1.VirtualMachineInstanceList{}, client.InNamespace(ns)))
		expectForbidden(t, "update VirtualMachineInstance", agent.Update(ctx, &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1"}}))
		// Pools are made by the controller and the administrator.
		expectForbidden(t, "create IPPool", agent.Create(ctx, &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: ns + "-agent"},
			Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.2.0/24"}}}}))
	})

	t.Run("controller", func(t *testing.T) {
		ctrl := clientAs(t, "ipkeeper-controller")
		own := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1.blue"}, Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "n", Interface: "pod1"}}
		expectAllowed(t, "create IPAMClaim", ctrl.Create(ctx, own))
		// Claim status: the controller writes it (addresses, conditions,
		// owner pod); its admission policy (manifests/policy) keeps it from
		// changing addresses a claim has (TestControllerMayOnlySetClaimConditions).
		own.Status.IPs = []string{"10.99.0.3/24"}
		meta.SetStatusCondition(&own.Status.Conditions, metav1.Condition{Type: "AddressesInPool", Status: metav1.ConditionTrue, Reason: "InPool", Message: "x"})
		expectAllowed(t, "set an IPAMClaim condition", ctrl.Status().Update(ctx, own))
		expectAllowed(t, "delete IPAMClaim", ctrl.Delete(ctx, own))
		expectAllowed(t, "list VirtualMachines", ctrl.List(ctx, &kubevirtv1.VirtualMachineList{}))
		expectForbidden(t, "delete VirtualMachine", ctrl.Delete(ctx, vm))
		// The Cluster API provider reserves addresses for IPAddressClaims
		// (RBAC cannot tell owner kinds apart) and releases them.
		capiRes := newReservation("rbac-net", "10.99.0.4")
		expectAllowed(t, "create IPReservation (Cluster API provider)", ctrl.Create(ctx, capiRes))
		expectAllowed(t, "delete IPReservation", ctrl.Delete(ctx, capiRes))
		expectAllowed(t, "list IPAddressClaims", ctrl.List(ctx, &ipamv1.IPAddressClaimList{}, client.InNamespace(ns)))
		expectForbidden(t, "delete IPAddressClaim", ctrl.Delete(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}}))
		expectForbidden(t, "update Cluster", ctrl.Update(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}}))
		expectForbidden(t, "read a Secret in another namespace", ctrl.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}))
		expectForbidden(t, "list Secrets in its own namespace", ctrl.List(ctx, &corev1.SecretList{}, client.InNamespace(installNS)))
		expectForbidden(t, "read another Secret in its own namespace", ctrl.Get(ctx, client.ObjectKey{Namespace: installNS, Name: "other"}, &corev1.Secret{}))
		expectAllowed(t, "read its webhook Secret", ctrl.Get(ctx, client.ObjectKey{Namespace: installNS, Name: "ipkeeper-webhook-cert"}, &corev1.Secret{}))
		expectAllowed(t, "read its webhook configuration", ctrl.Get(ctx, client.ObjectKey{Name: "ipkeeper"}, &admissionregistrationv1.MutatingWebhookConfiguration{}))
		expectForbidden(t, "read another webhook configuration", ctrl.Get(ctx, client.ObjectKey{Name: "someone-elses"}, &admissionregistrationv1.MutatingWebhookConfiguration{}))
		// --claims-controller=auto lists webhook configurations to find
		// another IPAMClaims controller's webhook; it may change only its own.
		expectAllowed(t, "list webhook configurations", ctrl.List(ctx, &admissionregistrationv1.MutatingWebhookConfigurationList{}))
		expectForbidden(t, "update another webhook configuration", ctrl.Update(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-ipam-controller-mutating-webhook-configuration"}}))
		expectForbidden(t, "delete another webhook configuration", ctrl.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-ipam-controller-mutating-webhook-configuration"}}))
		expectForbidden(t, "create pods", ctrl.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}))
		var res ipkeeperv1alpha1.IPReservationList
		expectAllowed(t, "list IPReservations", ctrl.List(ctx, &res))
		pool := &ipkeeperv1alpha1.IPPool{
			ObjectMeta: metav1.ObjectMeta{Name: ns},
			Spec:       ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.1.0/24"}}},
		}
		if err := cp.Client.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
		expectAllowed(t, "list IPPools", ctrl.List(ctx, &ipkeeperv1alpha1.IPPoolList{}))
		pool.Status.Size = "254"
		expectAllowed(t, "update IPPool status", ctrl.Status().Update(ctx, pool))
		pool.Spec.Ranges[0].Exclude = []string{"10.99.1.1"}
		expectForbidden(t, "update IPPool spec", ctrl.Update(ctx, pool))
		expectForbidden(t, "delete IPPool", ctrl.Delete(ctx, pool))
		// It makes inline networks' pools from their NADs.
		inline := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: ns + "-inline"},
			Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.3.0/24"}}}}
		expectAllowed(t, "create IPPool (inline network)", ctrl.Create(ctx, inline))
		_ = cp.Client.Delete(ctx, inline)
	})
}

// The controller runs with nothing but its own ServiceAccount's RBAC:
// claims, webhook certificates (its Secret, its webhook configuration),
// leader election and the webhook all work.
func TestControllerRunsWithItsOwnRBAC(t *testing.T) {
	ctx := context.Background()
	applyRBAC(t)
	ns := cp.NewNamespace(t, "own-rbac")
	user, groups := framework.ServiceAccountUser(installNS, "ipkeeper-controller")
	ctrl := cp.As(user, groups...).StartController(t, ns, func(o *manager.Options) {
		o.Namespace = installNS
		o.WebhookConfig = "ipkeeper"
	})
	defer ctrl.Stop()
	e := &kvEnv{ns: ns, kv: newKubeVirt(t), ctrl: ctrl}
	e.nad(t, "blue", bridgeNAD("own-rbac-blue", true))
	vm, err := e.kv.CreateVM(ctx, ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitClaim(t, "vm1.blue")
	waitEvent(t, vm, "IPAMClaimCreated", "vm1.blue")
	_, pod, err := e.kv.Start(ctx, vm, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, pod); len(got) != 1 {
		t.Fatalf("pod references %v", got)
	}
	for _, r := range refs(t, pod) {
		if r != "vm1.blue" {
			t.Fatalf("pod references %q", r)
		}
	}
	if err := cp.Client.Delete(ctx, vm); err != nil {
		t.Fatal(err)
	}
	e.waitNoClaims(t)

	// The IPPool status controller: reads pools and reservations, writes status.
	pool := &ipkeeperv1alpha1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: ns},
		Spec:       ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.2.0/24"}}},
	}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
	waitPool(t, pool, "Ready with its size", func(st *ipkeeperv1alpha1.IPPoolStatus) bool {
		return condIs(st, ipkeeperv1alpha1.PoolReady, metav1.ConditionTrue) && st.Size == "254"
	})
}
