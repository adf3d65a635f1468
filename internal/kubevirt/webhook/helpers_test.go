// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"encoding/json"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// launcherScheme has what the pod mutator reads: pods, VMIs, claims, NADs.
func launcherScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubevirtv1.AddToScheme, ipamclaimsv1alpha1.AddToScheme, nadv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return scheme
}

// launcherPod is VMI vmi's virt-launcher pod with the networks annotation,
// encoded as an admission request carries it.
func launcherPod(t *testing.T, ns, vmi, annotation string) []byte {
	t.Helper()
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "virt-launcher-" + vmi + "-abcde",
			Labels:      map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue},
			Annotations: map[string]string{kubevirtv1.DomainAnnotation: vmi, multus.Annotation: annotation}}}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// launcherVMI is VMI name with one bridge interface, "blue", on NAD nad;
// with readsSecret its cloud-init volume names ipkeeper's guest network
// configuration Secret.
func launcherVMI(ns, name, nad string, readsSecret bool) *kubevirtv1.VirtualMachineInstance {
	v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	v.Spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{{Name: "blue", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}}}
	v.Spec.Networks = []kubevirtv1.Network{{Name: "blue", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: nad}}}}
	if readsSecret {
		v.Spec.Volumes = []kubevirtv1.Volume{{Name: "cloudinit", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{
			UserData: "#cloud-config", NetworkDataSecretRef: &corev1.LocalObjectReference{Name: guestnet.SecretName(name)}}}}}
	}
	return v
}

// nadOf is NetworkAttachmentDefinition ns/name with spec.config config.
func nadOf(ns, name, config string) *nadv1.NetworkAttachmentDefinition {
	return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}}
}
