// SPDX-License-Identifier: Apache-2.0

package guestnet

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// The gauge counts the claims whose guest differs now, each once.
func TestDriftGauge(t *testing.T) {
	r := &DriftReconciler{}
	a, b := types.NamespacedName{Namespace: "vms", Name: "vm1.blue"}, types.NamespacedName{Namespace: "vms", Name: "vm2.blue"}
	for _, step := range []struct {
		key     types.NamespacedName
		differs bool
		want    float64
	}{{a, true, 1}, {a, true, 1}, {b, true, 2}, {a, false, 1}, {b, false, 0}} {
		r.count(step.key, step.differs)
		if got := testutil.ToFloat64(driftGauge); got != step.want {
			t.Fatalf("after %v differs=%t: gauge %v, want %v", step.key, step.differs, got, step.want)
		}
	}
}

func TestCompare(t *testing.T) {
	held := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	for _, tc := range []struct {
		name     string
		reported []string
		status   metav1.ConditionStatus
		has      []string
	}{
		{"the claim's, with the guest's own link-local address", []string{"10.0.0.5", "fd00::5", "fe80::858:aff:fe00:5"}, metav1.ConditionTrue, []string{"eth1 uses the claim's addresses"}},
		{"CIDR form, as some agents report", []string{"10.0.0.5/24", "fd00::5/64"}, metav1.ConditionTrue, nil},
		{"one of its own besides", []string{"10.0.0.5", "fd00::5", "10.0.0.99"}, metav1.ConditionFalse, []string{"uses 10.0.0.99, which ipkeeper did not give it"}},
		{"IPv6 missing", []string{"10.0.0.5"}, metav1.ConditionFalse, []string{"lacks fd00::5, which ipkeeper gave it"}},
		{"another address instead", []string{"10.0.0.7", "fd00::5"}, metav1.ConditionFalse, []string{"uses 10.0.0.7", "and lacks 10.0.0.5"}},
		{"nothing reported", nil, metav1.ConditionFalse, []string{"lacks 10.0.0.5, fd00::5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(held, tc.reported, "eth1")
			if c.Type != claimstatus.ConditionGuestAddresses || c.Status != tc.status {
				t.Fatalf("%s=%s (%s), want %s", c.Type, c.Status, c.Message, tc.status)
			}
			if (c.Status == metav1.ConditionTrue) != (c.Reason == claimstatus.ReasonGuestUsesItsAddresses) {
				t.Errorf("reason %s for status %s", c.Reason, c.Status)
			}
			for _, h := range tc.has {
				if !strings.Contains(c.Message, h) {
					t.Errorf("message %q lacks %q", c.Message, h)
				}
			}
		})
	}
}

type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

// A VMI gone makes the reconciler drop the condition from its VM's claims.
// It reads only that VM's claims (by the owner-name index): every claim
// event of a namespace comes here, and reading the whole namespace's
// claims each time made a boot storm of 1,000 VMs quadratic.
func TestForgetReadsOnlyTheOwnersClaims(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	claim := func(vm string, net string, withCondition bool) *ipamclaimsv1alpha1.IPAMClaim {
		c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: vm + "." + net,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: claimowner.KindVM, Name: vm, UID: types.UID("uid-" + vm), Controller: ptr.To(true)}}}}
		if withCondition {
			c.Status.Conditions = []metav1.Condition{{Type: claimstatus.ConditionGuestAddresses, Status: metav1.ConditionFalse, Reason: "Differ", LastTransitionTime: metav1.Now()}}
		}
		return c
	}
	objs := []client.Object{claim("vm1", "blue", true), claim("vm1", "red", false)}
	for i := range 200 {
		objs = append(objs, claim(fmt.Sprintf("other%d", i), "blue", true))
	}
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{})
	if err := claims.SetupClaimIndexes(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
	if err := claims.SetupIndexes(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
	listed := 0
	c := interceptor.NewClient(b.Build(), interceptor.Funcs{List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		err := cl.List(ctx, list, opts...)
		if l, ok := list.(*ipamclaimsv1alpha1.IPAMClaimList); ok {
			listed += len(l.Items)
		}
		return err
	}})
	r := &DriftReconciler{Client: c}
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "vms", Name: "vm1"}}); err != nil {
		t.Fatal(err)
	}
	if listed > 2 {
		t.Errorf("forgetting vm1's conditions read %d claims, want its own 2", listed)
	}
	for _, key := range []struct {
		name string
		want bool
	}{{"vm1.blue", false}, {"other7.blue", true}} {
		var got ipamclaimsv1alpha1.IPAMClaim
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "vms", Name: key.name}, &got); err != nil {
			t.Fatal(err)
		}
		if has := meta.FindStatusCondition(got.Status.Conditions, claimstatus.ConditionGuestAddresses) != nil; has != key.want {
			t.Errorf("%s has the GuestAddresses condition: %t, want %t", key.name, has, key.want)
		}
	}
}
