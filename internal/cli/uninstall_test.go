// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// A finalizer another writer adds between uninstall's read and its patch
// makes the patch conflict; the retry reads the pool again and keeps that
// finalizer. Cluster API's kinds, not served here, are skipped with a
// note.
func TestUninstallRetriesAConflictAndSkipsKindsNotServed(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	pool := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue", Finalizers: []string{ipkeeperv1alpha1.PoolInUseFinalizer}}}
	const late = "example.com/late"
	raced := false
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(pool).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if !raced {
				raced = true
				addFinalizer(ctx, t, c, late)
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		// The fake client lists kinds it does not know as empty; the API
		// server's mapping fails as the RESTMapper says here.
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if gvk := list.GetObjectKind().GroupVersionKind(); gvk.Group == ipamv1.GroupVersion.Group {
				return &meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
			}
			return c.List(ctx, list, opts...)
		},
	}).Build()
	var out, errOut bytes.Buffer
	sess := &session{out: &out, errOut: &errOut, client: c, now: time.Now}
	if err := runUninstall(context.Background(), sess, uninstallOptions{}); err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	var got ipkeeperv1alpha1.IPPool
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pool), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Finalizers, []string{late}) {
		t.Errorf("finalizers %q, want [%s]", got.Finalizers, late)
	}
	if !strings.Contains(out.String(), ipkeeperv1alpha1.PoolInUseFinalizer) || !strings.Contains(errOut.String(), "IPAddressClaim.ipam.cluster.x-k8s.io is not installed (no CRD): skipped.") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", &out, &errOut)
	}
}

// addFinalizer adds f to pool blue, as another writer would.
func addFinalizer(ctx context.Context, t *testing.T, c client.Client, f string) {
	var p ipkeeperv1alpha1.IPPool
	if err := c.Get(ctx, client.ObjectKey{Name: "blue"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Finalizers = append(p.Finalizers, f)
	if err := c.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
}
