// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
)

// A NIC hotplug: virt-controller updates the VMI spec, then rewrites the
// launcher's networks annotation. The webhook's cache may not have the new
// VMI yet; the hot-plugged persistent network must still get its claim
// reference (the live VMI has it).
func TestHotplugReferencedAlthoughTheCachedVMIIsStale(t *testing.T) {
	scheme := launcherScheme(t)
	const ns = "vms"
	nad := func(name, network string) *nadv1.NetworkAttachmentDefinition {
		return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.1.0.0/24"}}`, network)}}
	}
	vmi := func(networks ...string) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1"}}
		for _, n := range networks {
			v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces, kubevirtv1.Interface{Name: n, InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}})
			v.Spec.Networks = append(v.Spec.Networks, kubevirtv1.Network{Name: n, NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: n}}})
		}
		return v
	}
	cached := fake.NewClientBuilder().WithScheme(scheme).WithObjects(nad("blue", "net-blue"), nad("red", "net-red"), vmi("blue")).Build()
	live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(nad("blue", "net-blue"), nad("red", "net-red"), vmi("blue", "red")).Build()
	m := &PodMutator{Reader: cached, APIReader: live, Gate: kubevirt.AlwaysOn{}, Decoder: admission.NewDecoder(scheme)}

	blue, red := kubevirt.PodInterfaceName("blue"), kubevirt.PodInterfaceName("red")
	pod := func(annotation string) []byte { return launcherPod(t, ns, "vm1", annotation) }
	oldAnn := `[{"name":"blue","namespace":"vms","interface":"` + blue + `","ipam-claim-reference":"vm1.blue"}]`
	newAnn := `[{"name":"blue","namespace":"vms","interface":"` + blue + `","ipam-claim-reference":"vm1.blue"},{"name":"red","namespace":"vms","interface":"` + red + `"}]`
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Update, Namespace: ns,
		Object: runtime.RawExtension{Raw: pod(newAnn)}, OldObject: runtime.RawExtension{Raw: pod(oldAnn)}}}
	resp := m.Handle(context.Background(), req)
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	patched, _ := json.Marshal(resp.Patches)
	if !strings.Contains(string(patched), "vm1.red") {
		t.Fatalf("the hot-plugged red interface got no claim reference: patches %s, warnings %q", patched, resp.Warnings)
	}
}
