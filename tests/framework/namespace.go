// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NewNamespace creates a namespace for one test, dumps component logs if the
// test fails, and deletes the namespace afterwards (the namespace controller
// of kube-controller-manager empties it).
func (cp *ControlPlane) NewNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := cp.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	cp.DumpLogsOnFailure(t)
	t.Cleanup(func() {
		_ = cp.Client.Delete(context.Background(), ns)
	})
	return ns.Name
}
