// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"slices"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeNameExtra is the user extra the API server gives the holder of a
// ServiceAccount token bound to a pod that runs on a node.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// ServiceAccountConfig returns a rest.Config that authenticates the way a
// pod of ServiceAccount namespace/name does in production: with a token
// from the TokenRequest API, and, when node is set, bound to a Pod bound
// to that node, which the API server turns into a user carrying
// NodeNameExtra (no impersonation). The Node, the ServiceAccount and the
// Pod are created as needed (the pod never runs: no kubelet); the pod is
// deleted when the test ends, which also ends the token's validity.
func (cp *ControlPlane) ServiceAccountConfig(t testing.TB, namespace, name, node string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := cp.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating ServiceAccount %s/%s: %v", namespace, name, err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if node != "" {
		if err := EnsureNode(ctx, cp.Client, node); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: name + "-" + node + "-"},
			Spec: corev1.PodSpec{
				ServiceAccountName: name, NodeName: node, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "c", Image: "example.invalid/" + name}},
			},
		}
		if err := cp.Client.Create(ctx, pod); err != nil {
			t.Fatalf("creating the pod of %s on %s that its token is bound to: %v", name, node, err)
		}
		// At once: no kubelet confirms a graceful deletion of a pod bound to
		// a node, which would stay Terminating, and its namespace with it.
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tok, err := cp.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of ServiceAccount %s/%s: %v", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = tok.Status.Token
	// The API server, not the test, says who the token is.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	who, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("reviewing the token of %s/%s: %v", namespace, name, err)
	}
	user, _ := ServiceAccountUser(namespace, name)
	got := who.Status.UserInfo
	if got.Username != user || (node != "" && !slices.Equal(got.Extra[NodeNameExtra], []string{node})) {
		t.Fatalf("the token of %s/%s on node %q authenticates as %s with extra %v; want %s with %s=%s", namespace, name, node, got.Username, got.Extra, user, NodeNameExtra, node)
	}
	return cfg
}
