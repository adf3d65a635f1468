// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"context"
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
)

// A guest configured by ipkeeper's guest network configuration Secret finds
// its NIC by the claim's MAC. Its launcher must not start while the claim
// has no addresses (so no MAC), even when the claim's allocation failed
// (its pool exhausted): with a MAC of the node's choosing, the guest would
// find no NIC of the Secret's and stay unconfigured. The webhook refuses
// it, naming the claim and the Secret (virt-controller retries); a
// launcher of a guest that does not read the Secret, whose claim failed,
// still gets the warning and starts (a pending claim refuses it too:
// TestLauncherWaitsForItsPendingClaimsMAC).
func TestGuestConfiguredLauncherWaitsForItsClaimsMAC(t *testing.T) {
	scheme := launcherScheme(t)
	const ns = "vms"
	nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "blue"},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"1.0.0","name":"net-blue","type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.1.0.0/24"}}`}}
	unfilled := func(name string) *ipamclaimsv1alpha1.IPAMClaim {
		return &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "net-blue", Interface: kubevirt.PodInterfaceName("blue")},
			Status: ipamclaimsv1alpha1.IPAMClaimStatus{Conditions: []metav1.Condition{{Type: claimstatus.ConditionIPsAllocated,
				Status: metav1.ConditionFalse, Reason: claimstatus.ReasonExhausted, Message: "no free address in IPPool net-blue"}}}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(nad, launcherVMI(ns, "vm1", "blue", true), launcherVMI(ns, "vm2", "blue", false),
		unfilled("vm1.blue"), unfilled("vm2.blue")).Build()
	m := &PodMutator{Reader: c, APIReader: c, Gate: kubevirt.AlwaysOn{}, Decoder: admission.NewDecoder(scheme)}
	request := func(vm string) admission.Request {
		raw := launcherPod(t, ns, vm, `[{"name":"blue","namespace":"vms","interface":"`+kubevirt.PodInterfaceName("blue")+`"}]`)
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: ns,
			Object: runtime.RawExtension{Raw: raw}}}
	}

	resp := m.Handle(context.Background(), request("vm1"))
	if resp.Allowed {
		t.Fatalf("the launcher of a guest that reads Secret %s was admitted without its claim's MAC (warnings %q)", guestnet.SecretName("vm1"), resp.Warnings)
	}
	msg := resp.Result.Message
	for _, want := range []string{"IPAMClaim vms/vm1.blue", guestnet.SecretName("vm1"), "MAC", claimstatus.ReasonExhausted} {
		if !strings.Contains(msg, want) {
			t.Errorf("denial %q does not name %q", msg, want)
		}
	}
	if resp.Result.Code != 403 {
		t.Errorf("denial code %d, want 403 (a denial virt-controller retries, not an internal error)", resp.Result.Code)
	}

	resp = m.Handle(context.Background(), request("vm2"))
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "vm2.blue") {
		t.Fatalf("the launcher of a guest that does not read the Secret: allowed %v, warnings %q; want allowed with one warning naming vm2.blue", resp.Allowed, resp.Warnings)
	}
}
