// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// The real virt-controller + ipkeeper-controller and its webhook, with no
// simulated part at all: a VM created running gets its claim, and the
// launcher pod virt-controller creates references it. There is no kubelet
// (the launcher pod stays unbound and never runs), no virt-api (no
// defaulting: the VM template is explicit) and no virt-handler (the VMI
// stays Pending). It logs the objects as virt-controller wrote them.
func TestRealVirtControllerVMGetsClaimAndReference(t *testing.T) {
	ctx := context.Background()
	rcp := cp
	t.Log("real: virt-controller, ipkeeper-controller and webhook, kube-apiserver, kube-controller-manager; " +
		"simulated: nothing; absent: kubelet, virt-api, virt-handler")
	ns := rcp.NewNamespace(t, "kvreal")
	rcp.StartController(t, ns)

	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "blue"},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: bridgeNAD("tenant-blue", true)},
	}
	if err := rcp.Client.Create(ctx, nad); err != nil {
		t.Fatalf("creating NAD: %v", err)
	}
	always := kubevirtv1.RunStrategyAlways
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1"},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: &always,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "vm1"}},
				Spec: framework.ExplicitVMTemplate(types.UID("5d307ca9-b3ef-428c-8861-06e72d69f223"),
					framework.VMNetwork{Name: "blue", NAD: "blue"}),
			},
		},
	}
	if err := rcp.Client.Create(ctx, vm); err != nil {
		t.Fatalf("creating VM: %v", err)
	}

	var claim ipamclaimsv1alpha1.IPAMClaim
	waitFor(t, "IPAMClaim vm1.blue", func(ctx context.Context) (bool, error) {
		err := rcp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vm1.blue"}, &claim)
		return err == nil, client.IgnoreNotFound(err)
	})
	controllerRef(t, &claim, vm, "VirtualMachine")

	var vmi kubevirtv1.VirtualMachineInstance
	waitFor(t, "the VMI virt-controller creates", func(ctx context.Context) (bool, error) {
		err := rcp.Client.Get(ctx, client.ObjectKeyFromObject(vm), &vmi)
		return err == nil, client.IgnoreNotFound(err)
	})
	var pod corev1.Pod
	waitFor(t, "the launcher pod virt-controller creates", func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := rcp.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
			return false, err
		}
		if len(pods.Items) != 1 {
			return false, nil
		}
		pod = pods.Items[0]
		return true, nil
	})
	meta, _ := json.MarshalIndent(map[string]any{"labels": pod.Labels, "annotations": pod.Annotations,
		"ownerReferences": pod.OwnerReferences, "nodeSelector": pod.Spec.NodeSelector}, "", "  ")
	t.Logf("launcher pod %s as virt-controller wrote it and ipkeeper's webhook mutated it:\n%s", pod.Name, meta)
	meta, _ = json.MarshalIndent(map[string]any{"labels": vmi.Labels, "annotations": vmi.Annotations,
		"finalizers": vmi.Finalizers, "ownerReferences": vmi.OwnerReferences}, "", "  ")
	t.Logf("VMI as virt-controller wrote it:\n%s", meta)

	elems, err := multus.ParseElements(pod.Annotations[multus.Annotation], ns)
	if err != nil {
		t.Fatalf("launcher pod networks annotation: %v", err)
	}
	if len(elems) != 1 {
		t.Fatalf("launcher pod networks = %+v, want one element (blue; the pod network is not listed)", elems)
	}
	e := elems[0]
	if e.Namespace != ns || e.Name != "blue" || e.Interface != kubevirt.PodInterfaceName("blue") || e.ClaimRef != "vm1.blue" {
		t.Errorf("launcher pod element = %+v, want NAD %s/blue, interface %s, claim reference vm1.blue", e, ns, kubevirt.PodInterfaceName("blue"))
	}
	if claim.Spec.Interface != e.Interface || claim.Spec.Network != "tenant-blue" {
		t.Errorf("claim spec = %+v, want network tenant-blue and the interface virt-controller named, %s", claim.Spec, e.Interface)
	}
	if pod.Labels[kubevirtv1.AppLabel] != kubevirt.LauncherLabelValue || pod.Labels[kubevirt.VMINameLabel] != vmi.Name ||
		pod.Annotations[kubevirtv1.DomainAnnotation] != vmi.Name {
		t.Errorf("launcher pod labels %v / annotations %v lack what ipkeeper keys on", pod.Labels, pod.Annotations)
	}
	if ref := metav1.GetControllerOf(&pod); ref == nil || ref.UID != vmi.UID {
		t.Errorf("launcher pod controller = %+v, want the VMI (uid %s)", ref, vmi.UID)
	}
}
