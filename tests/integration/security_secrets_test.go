// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestControllerWritesOnlyItsGuestNetworkSecrets writes as
// ipkeeper-controller's ServiceAccount (a real token) under the shipped
// RBAC and policies: it may create and patch, by server-side apply, the
// guest network configuration Secrets it labels as its own, and nothing
// else. It can neither read a Secret, nor take one over by labelling it,
// nor put anything but networkdata in its own.
func TestControllerWritesOnlyItsGuestNetworkSecrets(t *testing.T) {
	ctx := context.Background()
	applyPolicies(t)
	ns := cp.NewNamespace(t, "ctrl-secrets")
	ctrl, err := client.New(cp.ServiceAccountConfig(t, installNS, "ipkeeper-controller", ""), client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	users := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-password"}, StringData: map[string]string{"password": "hunter2"}}
	if err := cp.Client.Create(ctx, users); err != nil {
		t.Fatal(err)
	}
	ours := func(name string, data map[string][]byte) *corev1ac.SecretApplyConfiguration {
		return corev1ac.Secret(name, ns).WithType(corev1.SecretTypeOpaque).
			WithLabels(map[string]string{guestnet.ManagedByLabel: guestnet.ManagedBy, guestnet.OfLabel: "vm1"}).WithData(data)
	}
	apply := func(s *corev1ac.SecretApplyConfiguration) error {
		return ctrl.Apply(ctx, s, client.FieldOwner("ipkeeper-controller"), client.ForceOwnership)
	}
	refusedByPolicy := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ipkeeper-controller-secrets") {
			t.Errorf("%s: %v, want a refusal by the policy ipkeeper-controller-secrets", what, err)
		}
	}
	// The policy is loaded a moment after the others: its first refusal.
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := ctrl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}}, client.DryRunAll)
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		t.Fatalf("the policy never refused the controller a Secret of its own making without its labels: %v", err)
	}

	if err := apply(ours(guestnet.SecretName("vm1"), map[string][]byte{guestnet.DataKey: []byte("network: {version: 2}\n")})); err != nil {
		t.Fatalf("applying its own guest network Secret: %v", err)
	}
	if err := apply(ours(guestnet.SecretName("vm1"), map[string][]byte{guestnet.DataKey: []byte("network: {version: 2, ethernets: {}}\n")})); err != nil {
		t.Fatalf("applying it again, changed: %v", err)
	}
	refusedByPolicy("a Secret without its labels", ctrl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}))
	refusedByPolicy("its own Secret holding more than networkdata", apply(ours(guestnet.SecretName("vm2"), map[string][]byte{guestnet.DataKey: nil, "token": []byte("x")})))
	refusedByPolicy("taking over a user's Secret by applying its labels", apply(ours(users.Name, map[string][]byte{guestnet.DataKey: nil})))
	refusedByPolicy("labelling a user's Secret", ctrl.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: users.Name}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"compromised":"yes"}}}`))))
	for what, err := range map[string]error{
		"read a user's Secret":   ctrl.Get(ctx, client.ObjectKeyFromObject(users), &corev1.Secret{}),
		"read its own Secret":    ctrl.Get(ctx, client.ObjectKey{Namespace: ns, Name: guestnet.SecretName("vm1")}, &corev1.Secret{}),
		"list Secrets":           ctrl.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)),
		"delete a user's Secret": ctrl.Delete(ctx, users),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden by RBAC", what, err)
		}
	}
	var after corev1.Secret
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(users), &after); err != nil {
		t.Fatal(err)
	}
	if string(after.Data["password"]) != "hunter2" || len(after.Labels) != 0 || len(after.Data) != 1 {
		t.Errorf("the user's Secret changed: labels %v, keys %d", after.Labels, len(after.Data))
	}
}
