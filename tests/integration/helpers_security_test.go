// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// agentOn is a client authenticated as ipkeeper-agent's ServiceAccount
// exactly as the DaemonSet's pod on node is: a token from the TokenRequest
// API bound to a pod bound to node, so the API server itself adds the node
// name to the user ("" for a token bound to no pod, hence no node).
func agentOn(t testing.TB, node string) client.Client {
	t.Helper()
	c, err := client.New(cp.ServiceAccountConfig(t, installNS, "ipkeeper-agent", node), client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// applyPolicies applies the shipped RBAC and admission policies
// (manifests/policy) for one test. Removing them at the end waits until
// the API server no longer enforces them: its policy informer lags the
// deletion, and the tests that follow write as the same ServiceAccounts.
func applyPolicies(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	applyRBAC(t)
	if _, err := cp.Kubectl(ctx, nil, "apply", "--server-side", "--force-conflicts", "-k", repoPath(t, "manifests", "policy")); err != nil {
		t.Fatal(err)
	}
	// The API server enforces a new policy once it has loaded it and its
	// binding, a moment after the apply: the test starts after that.
	noNode := agentOn(t, "")
	probe := newReservation("policy-gone-net", "10.99.9.1")
	launcher := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: installNS, Name: "policy-gone", Labels: map[string]string{"kubevirt.io/created-by": "policy-gone"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}
	enforced := func(ctx context.Context) bool {
		return noNode.Create(ctx, probe.DeepCopy(), client.DryRunAll) != nil && cp.Client.Create(ctx, launcher.DeepCopy(), client.DryRunAll) != nil
	}
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		return enforced(ctx), nil
	}); err != nil {
		t.Fatalf("the policies are not enforced after their apply: %v", err)
	}
	t.Cleanup(func() {
		if _, err := cp.Kubectl(ctx, nil, "delete", "--ignore-not-found", "-k", repoPath(t, "manifests", "policy")); err != nil {
			t.Errorf("removing the policies: %v", err)
			return
		}
		if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			return noNode.Create(ctx, probe.DeepCopy(), client.DryRunAll) == nil && cp.Client.Create(ctx, launcher.DeepCopy(), client.DryRunAll) == nil, nil
		}); err != nil {
			t.Errorf("the policies are still enforced after their removal: %v", err)
		}
	})
}

// grantAgentEverything binds the agent's ServiceAccount to every verb on
// ipkeeper's objects and IPAMClaims for one test, as a mistaken RBAC edit
// would: what the admission policy refuses then, it refuses on its own,
// whatever RBAC says.
func grantAgentEverything(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-agent-everything"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{ipkeeperv1alpha1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"*"}},
			{APIGroups: []string{ipamclaimsv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"ipamclaims", "ipamclaims/status"}, Verbs: []string{"*"}},
		},
	}
	user, _ := framework.ServiceAccountUser(installNS, "ipkeeper-agent")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-agent-everything"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), o) })
	}
}
