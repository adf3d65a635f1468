// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

const installNS = "ipkeeper-system"

func repoPath(t testing.TB, parts ...string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root}, parts...)...)
}

// applyRBAC installs the shipped ServiceAccounts, roles and bindings for real.
func applyRBAC(t testing.TB) {
	t.Helper()
	ensureInstallNamespace(t)
	if _, err := cp.Kubectl(context.Background(), nil, "apply", "--server-side", "--force-conflicts", "-k", repoPath(t, "manifests", "rbac")); err != nil {
		t.Fatal(err)
	}
}

func clientAs(t testing.TB, sa string) client.Client {
	t.Helper()
	user, groups := framework.ServiceAccountUser(installNS, sa)
	c, err := client.New(cp.As(user, groups...).Config, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func expectForbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: got %v, want Forbidden", what, err)
	}
}

func expectAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if apierrors.IsForbidden(err) || (err != nil && !apierrors.IsNotFound(err)) {
		t.Errorf("%s: got %v, want it allowed", what, err)
	}
}

// ensureInstallNamespace creates ipkeeper-system (a dry run of namespaced
// objects needs the namespace to exist).
func ensureInstallNamespace(t testing.TB) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installNS}}
	if err := cp.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
