// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claimmaker"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestNamespaceUserThreatModel is docs/security.md's "A namespace user with
// pod or NAD rights", checked with a real credential: the token of a
// ServiceAccount of one namespace, bound there (and nowhere else) to the
// built-in edit ClusterRole (aggregated by kube-controller-manager) and to a Role over NADs, against the shipped CRDs, RBAC
// and admission policies. That user may create pods and NADs in
// its namespace (checked first, so that every refusal below is one of a
// working credential), and is refused, each refusal checked for who
// refused it (RBAC naming the user, verb and resource, or the policy's
// message):
//   - reading or writing IPReservations, IPBlocks and IPPools (spec and
//     status), even its own pods' reservations and even with a RoleBinding
//     of every verb on them in its namespace (they are cluster-scoped), and
//     IPAMClaims (spec and status), even those of its own namespace; given
//     a Role over IPAMClaims in its namespace it may create claims there,
//     and still not write their status, nor create one elsewhere;
//   - creating a pod that says it launches a VirtualMachineInstance (a
//     controller reference to one, or kubevirt.io/created-by), or making
//     its own pod say so (ipkeeper-launcher-identity);
//   - acting as KubeVirt's controller or ipkeeper's components:
//     impersonating their ServiceAccounts, requesting their tokens, running
//     a pod in ipkeeper's namespace;
//   - creating pods, NADs or claims in another namespace;
//   - changing ipkeeper's admission policies, their bindings, its webhook
//     configuration, or its own namespace's labels (which a pool's
//     spec.namespaceSelector reads).
//
// Every object the user tried to write is unchanged afterwards. No
// ipkeeper-controller runs: the API server alone refuses all of it.
func TestNamespaceUserThreatModel(t *testing.T) {
	ctx := context.Background()
	applyPolicies(t)
	ns, other := cp.NewNamespace(t, "tenant"), cp.NewNamespace(t, "neighbour")
	sfx := ns[len(ns)-5:]
	const sa = "tenant-user"
	cfg := cp.ServiceAccountConfig(t, ns, sa, "")
	user, _ := framework.ServiceAccountUser(ns, sa)
	u, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	waitAggregated(t, "edit")
	bindInNamespace(t, ns, sa, "ClusterRole", "edit")
	nadRole := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nad-writer"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{nadv1.SchemeGroupVersion.Group}, Resources: []string{"network-attachment-definitions"}, Verbs: []string{"*"},
		}},
	}
	createForTest(t, nadRole)
	bindInNamespace(t, ns, sa, "Role", nadRole.Name)

	pod := func(namespace, name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
		}
	}
	network := "tenant-net-" + sfx
	nad := func(namespace, name string) *nadv1.NetworkAttachmentDefinition {
		return &nadv1.NetworkAttachmentDefinition{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","ipam":{"type":"ipkeeper","range":"10.99.41.0/24"}}`, network)},
		}
	}
	// What the user may do: pods and NADs of its namespace. RBAC takes
	// effect asynchronously: wait until it does.
	var last error
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		if last = u.Create(ctx, pod(ns, "probe"), client.DryRunAll); last != nil {
			return false, nil
		}
		last = u.Create(ctx, nad(ns, "probe"), client.DryRunAll)
		return last == nil, nil
	}); err != nil {
		t.Fatalf("%s, bound to edit and NAD rights in %s, cannot create pods and NADs there (last: %v)", user, ns, last)
	}
	// The launcher-identity policy takes effect asynchronously too.
	launcherIdentity := func(namespace, name string) *corev1.Pod {
		p := pod(namespace, name)
		p.Labels = map[string]string{"kubevirt.io/created-by": "0b8e7c1a-2222-4c1e-9f00-00000000000a"}
		return p
	}
	mayNotCreate := user + " may not create a pod that says it launches a VirtualMachineInstance"
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		last = u.Create(ctx, launcherIdentity(ns, "probe-launcher"), client.DryRunAll)
		return last != nil && strings.Contains(last.Error(), mayNotCreate), nil
	}); err != nil {
		t.Fatalf("the launcher-identity policy never refused %s a pod labelled kubevirt.io/created-by (last: %v)", user, last)
	}

	rbacRefused := func(t *testing.T, what string, err error, verb, resource string) {
		t.Helper()
		want := fmt.Sprintf("%q cannot %s resource %q", user, verb, resource)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want Forbidden by RBAC (%s)", what, err, want)
		}
	}

	t.Run("ipkeeper's objects and IPAMClaims", func(t *testing.T) {
		mine := pod(ns, "mine")
		createForTest(t, mine)
		pool := &ipkeeperv1alpha1.IPPool{
			ObjectMeta: metav1.ObjectMeta{Name: network},
			Spec:       ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.99.41.0/24"}}},
		}
		block := &ipkeeperv1alpha1.IPBlock{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Block(network, netip.MustParsePrefix("10.99.41.0/27"))},
			Spec:       ipkeeperv1alpha1.IPBlockSpec{Pool: network, CIDR: "10.99.41.0/27", Node: "node-t", Holder: ipkeeperv1alpha1.HolderNode},
		}
		// The reservation of the user's own pod.
		res := newReservation(network, "10.99.41.5")
		res.Spec.Pool = network
		res.Spec.Node = "node-t"
		res.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: ns, Name: mine.Name, UID: mine.UID}
		for _, o := range []client.Object{pool, block, res} {
			createForTest(t, o)
		}
		claim := createClaim(t, ns, "vm1.blue", network) // a VM's claim in the user's namespace

		// ipkeeper's objects are cluster-scoped: no RoleBinding of a
		// namespace grants them, whatever role it binds, even one with every
		// verb on them (in force once RBAC would allow it in the namespace).
		everything := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "test-" + ns + "-ipkeeper-everything"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{ipkeeperv1alpha1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"*"}}},
		}
		createForTest(t, everything)
		bindInNamespace(t, ns, sa, "ClusterRole", everything.Name)
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Group: ipkeeperv1alpha1.GroupVersion.Group, Resource: "ipreservations", Verb: "delete",
				}},
			}, metav1.CreateOptions{})
			return err == nil && review.Status.Allowed, err
		}); err != nil {
			t.Fatalf("the RoleBinding of every verb on ipkeeper's objects is not in force: %v", err)
		}

		targets := []struct {
			what, resource string
			obj            client.Object
			list           client.ObjectList
			status         bool
		}{
			{"its own pod's IPReservation", "ipreservations", res, &ipkeeperv1alpha1.IPReservationList{}, false},
			{"an IPBlock", "ipblocks", block, &ipkeeperv1alpha1.IPBlockList{}, false},
			{"an IPPool", "ippools", pool, &ipkeeperv1alpha1.IPPoolList{}, true},
			{"an IPAMClaim of its namespace", "ipamclaims", claim, &ipamclaimsv1alpha1.IPAMClaimList{}, true},
		}
		for _, tc := range targets {
			before := tc.obj.DeepCopyObject().(client.Object)
			if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(tc.obj), before); err != nil {
				t.Fatal(err)
			}
			var opts []client.ListOption
			if before.GetNamespace() != "" {
				opts = append(opts, client.InNamespace(before.GetNamespace()))
			}
			rbacRefused(t, "list "+tc.resource, u.List(ctx, tc.list, opts...), "list", tc.resource)
			rbacRefused(t, "get "+tc.what, u.Get(ctx, client.ObjectKeyFromObject(before), before.DeepCopyObject().(client.Object)), "get", tc.resource)
			twin := before.DeepCopyObject().(client.Object)
			twin.SetName(before.GetName() + "-twin")
			twin.SetResourceVersion("")
			twin.SetUID("")
			rbacRefused(t, "create "+tc.what, u.Create(ctx, twin, client.DryRunAll), "create", tc.resource)
			changed := before.DeepCopyObject().(client.Object)
			changed.SetLabels(map[string]string{"tenant": "was-here"})
			rbacRefused(t, "update "+tc.what, u.Update(ctx, changed), "update", tc.resource)
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"tenant": "was-here"}}})
			rbacRefused(t, "patch "+tc.what, u.Patch(ctx, before.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, patch)), "patch", tc.resource)
			if tc.status {
				rbacRefused(t, "write the status of "+tc.what, u.Status().Update(ctx, changed), "update", tc.resource+"/status")
			}
			rbacRefused(t, "delete "+tc.what, u.Delete(ctx, before.DeepCopyObject().(client.Object)), "delete", tc.resource)
			unchanged(t, tc.what, before)
		}
		elsewhere := &ipamclaimsv1alpha1.IPAMClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "vm1.blue"},
			Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: launcherIf},
		}
		rbacRefused(t, "create an IPAMClaim in another namespace", u.Create(ctx, elsewhere, client.DryRunAll), "create", "ipamclaims")

		// Claims by hand: an administrator may grant IPAMClaims in the
		// namespace. Their status (the claim's addresses) stays refused.
		claimRole := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claim-writer"},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{ipamclaimsv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"ipamclaims"}, Verbs: []string{"*"},
			}},
		}
		createForTest(t, claimRole)
		bindInNamespace(t, ns, sa, "Role", claimRole.Name)
		own := &ipamclaimsv1alpha1.IPAMClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-hand.blue"},
			Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: launcherIf},
		}
		if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			last = u.Create(ctx, own.DeepCopy(), client.DryRunAll)
			return last == nil, nil
		}); err != nil {
			t.Fatalf("with a Role over IPAMClaims in %s, %s cannot create one there (last: %v)", ns, user, last)
		}
		var c ipamclaimsv1alpha1.IPAMClaim
		if err := u.Get(ctx, client.ObjectKeyFromObject(claim), &c); err != nil {
			t.Fatalf("reading a claim of its namespace with a Role over IPAMClaims: %v", err)
		}
		before := c.DeepCopy()
		c.Status.IPs = []string{"10.99.41.7/24"}
		rbacRefused(t, "set the addresses of a claim of its namespace", u.Status().Update(ctx, &c), "update", "ipamclaims/status")
		rbacRefused(t, "create an IPAMClaim in another namespace", u.Create(ctx, elsewhere, client.DryRunAll), "create", "ipamclaims")
		unchanged(t, "the claim", before)
	})

	t.Run("pods that say they launch a VMI", func(t *testing.T) {
		vmiRef := metav1.OwnerReference{
			APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstance",
			Name: "vm1", UID: "0b8e7c1a-2222-4c1e-9f00-00000000000b", Controller: ptr.To(true),
		}
		owned := pod(ns, "owned-by-a-vmi")
		owned.OwnerReferences = []metav1.OwnerReference{vmiRef}
		policyRefused(t, "create a pod with a controller reference to a VMI", u.Create(ctx, owned, client.DryRunAll), mayNotCreate)
		policyRefused(t, "create a pod labelled kubevirt.io/created-by", u.Create(ctx, launcherIdentity(ns, "created-by"), client.DryRunAll), mayNotCreate)

		plain := pod(ns, "plain")
		if err := u.Create(ctx, plain); err != nil {
			t.Fatalf("creating a pod of its namespace: %v", err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), plain) })
		mayNotMake := user + " may not make a pod say it launches a VirtualMachineInstance"
		label, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"kubevirt.io/created-by": string(vmiRef.UID)}}})
		policyRefused(t, "label its pod kubevirt.io/created-by", u.Patch(ctx, plain.DeepCopy(), client.RawPatch(types.MergePatchType, label)), mayNotMake)
		ref, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{vmiRef}}})
		policyRefused(t, "give its pod a controller reference to a VMI", u.Patch(ctx, plain.DeepCopy(), client.RawPatch(types.MergePatchType, ref)), mayNotMake)
		unchanged(t, "its pod", plain)
		// Anything else about its pod is its own business.
		team, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"team": "a"}}})
		if err := u.Patch(ctx, plain.DeepCopy(), client.RawPatch(types.MergePatchType, team), client.DryRunAll); err != nil {
			t.Errorf("labelling its pod otherwise: %v, want allowed", err)
		}
	})

	t.Run("the ServiceAccounts of KubeVirt and ipkeeper", func(t *testing.T) {
		for _, who := range []struct{ namespace, name string }{
			{"kubevirt", "kubevirt-controller"}, {installNS, "ipkeeper-agent"}, {installNS, "ipkeeper-controller"},
		} {
			name, _ := framework.ServiceAccountUser(who.namespace, who.name)
			as := rest.CopyConfig(cfg)
			as.Impersonate = rest.ImpersonationConfig{UserName: name}
			c, err := kubernetes.NewForConfig(as) // no discovery: the request itself is refused
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.CoreV1().Pods(ns).Create(ctx, launcherIdentity(ns, "impersonated"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			want := fmt.Sprintf("%q cannot impersonate resource \"serviceaccounts\"", user)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("impersonate %s: %v; want Forbidden (%s)", name, err, want)
			}
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.CoreV1().ServiceAccounts(installNS).CreateToken(ctx, "ipkeeper-agent", &authenticationv1.TokenRequest{}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		rbacRefused(t, "request a token of ipkeeper-agent", err, "create", "serviceaccounts/token")
		agentPod := pod(installNS, "as-the-agent")
		agentPod.Spec.ServiceAccountName = "ipkeeper-agent"
		rbacRefused(t, "run a pod as ipkeeper-agent", u.Create(ctx, agentPod, client.DryRunAll), "create", "pods")
	})

	t.Run("other namespaces", func(t *testing.T) {
		rbacRefused(t, "create a pod in another namespace", u.Create(ctx, pod(other, "p"), client.DryRunAll), "create", "pods")
		rbacRefused(t, "create a NAD in another namespace", u.Create(ctx, nad(other, "n"), client.DryRunAll), "create", "network-attachment-definitions")
	})

	t.Run("admission and namespace labels", func(t *testing.T) {
		rbacRefused(t, "delete the launcher-identity policy", u.Delete(ctx,
			&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ipkeeper-launcher-identity"}}, client.DryRunAll),
			"delete", "validatingadmissionpolicies")
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: "ipkeeper-launcher-identity"}, binding); err != nil {
			t.Fatal(err)
		}
		binding.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
		rbacRefused(t, "turn the launcher-identity policy's binding to audit only", u.Update(ctx, binding, client.DryRunAll),
			"update", "validatingadmissionpolicybindings")
		rbacRefused(t, "delete ipkeeper's webhook configuration", u.Delete(ctx,
			&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "ipkeeper"}}, client.DryRunAll),
			"delete", "mutatingwebhookconfigurations")
		// A webhook named like ipam-extensions' would make
		// ipkeeper-controller (auto) leave claims to it.
		rbacRefused(t, "register a webhook named like another IPAMClaims controller's", u.Create(ctx,
			&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "fake-ipam-claims"},
				Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: claimmaker.ExtensionsWebhook}}}, client.DryRunAll),
			"create", "mutatingwebhookconfigurations")
		labels, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"team": "prod"}}})
		rbacRefused(t, "relabel its namespace", u.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			client.RawPatch(types.MergePatchType, labels), client.DryRunAll), "patch", "namespaces")
	})
}

// waitAggregated waits for kube-controller-manager's
// clusterrole-aggregation controller to have given the built-in
// ClusterRole name the rules of the roles its aggregationRule selects:
// every ClusterRole installed, ipkeeper's included, takes part, so had
// ipkeeper's manifests aggregated a rule into edit, the namespace user
// would hold it.
func waitAggregated(t *testing.T, name string) {
	t.Helper()
	err := framework.Eventually(context.Background(), 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		var role rbacv1.ClusterRole
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &role); err != nil {
			return false, err
		}
		return slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "pods") }), nil
	})
	if err != nil {
		t.Fatalf("the built-in ClusterRole %s was not aggregated: %v", name, err)
	}
}

// bindInNamespace binds ServiceAccount sa of ns to a ClusterRole or Role
// (kind) in ns only, for the test.
func bindInNamespace(t *testing.T, ns, sa, kind, name string) {
	t.Helper()
	createForTest(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa + "-" + strings.ToLower(kind) + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	})
}

// createForTest creates o as administrator and deletes it when the test
// ends.
func createForTest(t *testing.T, o client.Object) {
	t.Helper()
	if err := cp.Client.Create(context.Background(), o); err != nil {
		t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), o) })
}

// policyRefused fails unless err is a refusal by ipkeeper-launcher-identity
// carrying its message want.
func policyRefused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ipkeeper-launcher-identity") || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v; want Forbidden by the ipkeeper-launcher-identity policy (%q)", what, err, want)
	}
}

// unchanged fails unless the object before still exists at the same
// resourceVersion.
func unchanged(t *testing.T, what string, before client.Object) {
	t.Helper()
	after := before.DeepCopyObject().(client.Object)
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(before), after); err != nil {
		t.Errorf("%s after the user's attempts: %v", what, err)
		return
	}
	if after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("%s changed under the user's attempts (resourceVersion %s -> %s, labels %v)", what, before.GetResourceVersion(), after.GetResourceVersion(), after.GetLabels())
	}
}
