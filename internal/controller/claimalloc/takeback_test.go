// SPDX-License-Identifier: Apache-2.0

package claimalloc_test

import (
	"context"
	"io"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// A claim made anew takes back the address its name held even when the
// answer of the take-back's delete or create is lost (a connection cut
// after the API server applied it, or before): between the two writes the
// address is free, so the take-back reads again and retries rather than
// give up and leave it to anyone (a chaos run saw a pod's agent take it).
func TestTakeBackSurvivesLostAnswers(t *testing.T) {
	const pool, ip = "p", "10.0.0.20"
	h := claimHolder("ns", "vm1.blue")
	earlier := h.Owner
	earlier.UID = "uid-of-an-earlier-claim-of-that-name"
	for _, tt := range []struct {
		name string
		// loseDelete, loseCreate: the first such call's answer is lost,
		// after the write applied (applied) or before it.
		loseDelete, loseCreate, applied bool
	}{
		{name: "delete applied, answer lost", loseDelete: true, applied: true},
		{name: "delete not applied, answer lost", loseDelete: true},
		{name: "create applied, answer lost", loseCreate: true, applied: true},
		{name: "create not applied, answer lost", loseCreate: true},
		{name: "both lost after applying", loseDelete: true, loseCreate: true, applied: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := scheme.New()
			if err != nil {
				t.Fatal(err)
			}
			kept := heldRes(pool, ip)
			kept.Spec.Owner = earlier
			kept.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(time.Hour)}
			lostDelete, lostCreate := tt.loseDelete, tt.loseCreate
			deleted := false // the take-back's create comes after its delete
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(ippool(pool, span("10.0.0.4", "10.0.0.251")), kept).
				WithInterceptorFuncs(interceptor.Funcs{
					Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
						_, isRes := obj.(*v1alpha1.IPReservation)
						deleted = deleted || isRes
						if isRes && lostDelete {
							lostDelete = false
							if tt.applied {
								if err := c.Delete(ctx, obj, opts...); err != nil {
									return err
								}
							}
							return io.ErrUnexpectedEOF
						}
						return c.Delete(ctx, obj, opts...)
					},
					Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
						if _, ok := obj.(*v1alpha1.IPReservation); ok && deleted && lostCreate {
							lostCreate = false
							if tt.applied {
								if err := c.Create(ctx, obj, opts...); err != nil {
									return err
								}
							}
							return io.ErrUnexpectedEOF
						}
						return c.Create(ctx, obj, opts...)
					},
				}).Build()
			e := newEnvOn(t, c, ippool(pool, span("10.0.0.4", "10.0.0.251")))
			e.pool.Cooldown = time.Hour
			res, err := e.alloc.Reserve(context.Background(), e.pool, h, addr(ip))
			if err != nil {
				t.Fatalf("Reserve: %v; want the address taken back", err)
			}
			if res.Spec.Owner != h.Owner || res.Spec.IP != ip {
				t.Fatalf("Reserve = %+v, want %s held by the claim made anew", res.Spec, ip)
			}
			if all := e.reservations(t); len(all) != 1 || all[0].Spec.Owner != h.Owner {
				t.Fatalf("reservations %+v, want one, the new claim's", all)
			}
		})
	}
}
