// SPDX-License-Identifier: Apache-2.0

package claimlife_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/controller/claimlife"
)

// steps is a Kind that records the steps run; a ConfigMap stands in for
// a claim (the lifecycle reads only its metadata).
type steps struct {
	leave string
	ready bool
	ran   []string
}

func (*steps) New() *corev1.ConfigMap { return &corev1.ConfigMap{} }

func (s *steps) Gone(types.NamespacedName) { s.ran = append(s.ran, "Gone") }

func (s *steps) Leave(context.Context, *corev1.ConfigMap) (string, error) {
	s.ran = append(s.ran, "Leave")
	return s.leave, nil
}

func (s *steps) Release(context.Context, *corev1.ConfigMap) error {
	s.ran = append(s.ran, "Release")
	return nil
}

func (s *steps) Ready() bool { return s.ready }

func (s *steps) Ensure(context.Context, *corev1.ConfigMap) (reconcile.Result, error) {
	s.ran = append(s.ran, "Ensure")
	return reconcile.Result{RequeueAfter: time.Minute}, nil
}

// Every claim goes through the steps in one order, and each step's
// outcome decides whether the next runs.
func TestStepsInOrder(t *testing.T) {
	now := metav1.Now()
	for _, c := range []struct {
		name     string
		claim    *corev1.ConfigMap // nil: not found
		leave    string
		ready    bool
		want     []string
		requeued time.Duration
	}{
		{name: "gone", want: []string{"Gone"}},
		{name: "left alone", claim: claim(nil), leave: "paused", ready: true, want: []string{"Leave"}},
		{name: "left alone while deleted", claim: claim(&now), leave: "paused", ready: true, want: []string{"Leave"}},
		{name: "deleted", claim: claim(&now), ready: false, want: []string{"Leave", "Release"}},
		{name: "caches filling", claim: claim(nil), want: []string{"Leave"}, requeued: claimlife.NotSyncedRetry},
		{name: "served", claim: claim(nil), ready: true, want: []string{"Leave", "Ensure"}, requeued: time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := fake.NewClientBuilder()
			if c.claim != nil {
				b = b.WithObjects(c.claim)
			}
			k := &steps{leave: c.leave, ready: c.ready}
			res, err := claimlife.Reconcile(context.Background(), b.Build(), k, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "c"}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(k.ran, c.want) || res.RequeueAfter != c.requeued {
				t.Errorf("ran %v, requeued after %s; want %v, %s", k.ran, res.RequeueAfter, c.want, c.requeued)
			}
		})
	}
}

func claim(deleted *metav1.Time) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	if deleted != nil {
		cm.DeletionTimestamp = deleted
		cm.Finalizers = []string{"test/hold"} // a deleted object with none is gone
	}
	return cm
}
