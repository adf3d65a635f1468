// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

type failingGate struct{}

func (failingGate) Enabled(context.Context) (bool, error) {
	return false, errors.New("injected: reading the KubeVirt CR failed")
}

// ipkeeper_controller_webhook_pod_admissions_total tells a pod refused for what it
// asks (denied) from a request the webhook could not judge (error).
func TestAdmissionsMetric(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	launcher := func(annotation string) []byte {
		p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "virt-launcher-vm1-abcde",
				Labels:      map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue},
				Annotations: map[string]string{kubevirtv1.DomainAnnotation: "vm1", multus.Annotation: annotation}}}
		raw, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	for _, tt := range []struct {
		name   string
		gate   kubevirt.Gate
		object []byte
		result string
	}{
		{"malformed networks annotation", kubevirt.AlwaysOn{}, launcher(`[{"name":`), "denied"},
		{"feature gate unreadable", failingGate{}, launcher(`[{"name":"blue"}]`), "error"},
		{"undecodable pod", kubevirt.AlwaysOn{}, []byte(`{"kind":`), "error"},
		{"no secondary network", kubevirt.AlwaysOn{}, launcher(""), "unchanged"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &PodMutator{Reader: c, APIReader: c, Gate: tt.gate, Decoder: admission.NewDecoder(scheme)}
			before := map[string]float64{}
			for _, r := range []string{"mutated", "unchanged", "denied", "error"} {
				before[r] = testutil.ToFloat64(mutations.WithLabelValues(r))
			}
			m.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: admissionv1.Create, Namespace: "vms", Object: runtime.RawExtension{Raw: tt.object}}})
			for r, was := range before {
				want := was
				if r == tt.result {
					want++
				}
				if got := testutil.ToFloat64(mutations.WithLabelValues(r)); got != want {
					t.Errorf("result=%q: %v, want %v", r, got, want)
				}
			}
		})
	}
}
