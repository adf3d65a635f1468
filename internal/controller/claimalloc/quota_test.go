// SPDX-License-Identifier: Apache-2.0

package claimalloc_test

import (
	"errors"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ipkeeper/ipkeeper/internal/poolquota"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// TestAssignWithinTheNamespaceQuota: in a pool with
// spec.maxAddressesPerNamespace 2, a namespace's third claim gets no
// address: the live count after its create refuses it (a
// *poolquota.ExceededError) and the reservation is deleted, while another
// namespace still gets one. The cache's count refuses before any create.
func TestAssignWithinTheNamespaceQuota(t *testing.T) {
	pool := ippool("quota", span("10.0.0.1", "10.0.0.14"))
	pool.Spec.MaxAddressesPerNamespace = ptr.To[int32](2)
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	field := func(f func(*v1alpha1.IPReservation) string) client.IndexerFunc {
		return func(o client.Object) []string { return []string{f(o.(*v1alpha1.IPReservation))} }
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(pool).
		WithIndex(&v1alpha1.IPReservation{}, "spec.pool", field(func(r *v1alpha1.IPReservation) string { return r.Spec.Pool })).
		WithIndex(&v1alpha1.IPReservation{}, poolquota.OwnerNamespaceField, field(func(r *v1alpha1.IPReservation) string { return r.Spec.Owner.Namespace })).
		Build()
	e := newEnvOn(t, c, pool)
	held := func(ns string) int {
		n := 0
		for _, r := range e.reservations(t) {
			if r.Spec.Owner.Namespace == ns {
				n++
			}
		}
		return n
	}
	for _, name := range []string{"a", "b"} {
		if _, err := e.assign(t, claimHolder("dev", name), name); err != nil {
			t.Fatalf("claim dev/%s within the quota: %v", name, err)
		}
	}
	_, err = e.assign(t, claimHolder("dev", "c"), "c")
	var exceeded *poolquota.ExceededError
	if !errors.As(err, &exceeded) || exceeded.Held != 2 || exceeded.Limit != 2 || exceeded.Namespace != "dev" || exceeded.Pool != "quota" {
		t.Fatalf("third claim of namespace dev = %v, want a *poolquota.ExceededError: dev holds 2 of quota's 2", err)
	}
	if got := held("dev"); got != 2 {
		t.Fatalf("namespace dev holds %d reservations after the refusal, want 2 (the refused one deleted)", got)
	}
	if _, err := e.assign(t, claimHolder("prod", "a"), "pa"); err != nil {
		t.Fatalf("claim of namespace prod, which holds nothing: %v", err)
	}

	// The cache shows namespace early holding 2: refused with no create.
	for _, ip := range []string{"10.0.0.13", "10.0.0.14"} {
		r := heldRes("quota", ip)
		r.Spec.Owner = claimHolder("early", ip).Owner
		e.addrs.Set(r)
	}
	before := len(e.reservations(t))
	if _, err := e.assign(t, claimHolder("early", "x"), "x"); !errors.Is(err, poolquota.ErrExceeded) {
		t.Fatalf("claim of a namespace the cache shows at its quota = %v, want ErrExceeded", err)
	}
	if got := len(e.reservations(t)); got != before {
		t.Fatalf("%d reservations after a refusal by the cache's count, want %d: nothing created", got, before)
	}
}
