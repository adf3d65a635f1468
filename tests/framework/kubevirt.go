// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
)

// KubeVirtNamespace holds the KubeVirt CR.
const KubeVirtNamespace = "kubevirt"

// VMNetwork is one secondary network of a VM in tests.
type VMNetwork struct {
	// Name is the logical network name (spec.networks[].name).
	Name string
	// NAD is multus.networkName: "nad" or "namespace/nad".
	NAD string
	// MAC is the interface's own macAddress; "" for none.
	MAC string
}

// SetPersistentIPsGate turns KubeVirt's PersistentIPs feature gate on or
// off (SetKubeVirtGate).
func SetPersistentIPsGate(ctx context.Context, c client.Client, on bool) error {
	return SetKubeVirtGate(ctx, c, kubevirt.PersistentIPsGate, on)
}

// SetKubeVirtGate turns one KubeVirt feature gate on or off in the KubeVirt
// CR kubevirt/kubevirt, creating the CR (and its namespace) if there is
// none. It patches only the feature gate list, guarded by the
// resourceVersion it read: the CR is shared by every test of a control
// plane, and virt-controller reads its status.phase.
func SetKubeVirtGate(ctx context.Context, c client.Client, gate string, on bool) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KubeVirtNamespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", KubeVirtNamespace, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		kv := &kubevirtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: KubeVirtNamespace, Name: "kubevirt"}}
		err := c.Get(ctx, client.ObjectKeyFromObject(kv), kv)
		if apierrors.IsNotFound(err) {
			gates := []string{}
			if on {
				gates = append(gates, gate)
			}
			kv.Spec.Configuration.DeveloperConfiguration = &kubevirtv1.DeveloperConfiguration{FeatureGates: gates}
			if err := c.Create(ctx, kv); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return apierrors.NewConflict(kubevirtv1.Resource("kubevirts"), kv.Name, err)
				}
				return fmt.Errorf("creating the KubeVirt CR: %w", err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the KubeVirt CR: %w", err)
		}
		var gates []string
		if dc := kv.Spec.Configuration.DeveloperConfiguration; dc != nil {
			gates = slices.DeleteFunc(slices.Clone(dc.FeatureGates), func(g string) bool { return g == gate })
		}
		if on {
			gates = append(gates, gate)
		}
		if gates == nil {
			gates = []string{}
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": kv.ResourceVersion},
			"spec":     map[string]any{"configuration": map[string]any{"developerConfiguration": map[string]any{"featureGates": gates}}},
		})
		if err != nil {
			return err
		}
		return c.Patch(ctx, kv, client.RawPatch(types.MergePatchType, patch))
	})
}

// VMTemplate builds a VMI spec with a pod network and the given secondary
// networks, each on a bridge-bound interface.
func VMTemplate(networks ...VMNetwork) kubevirtv1.VirtualMachineInstanceSpec {
	spec := kubevirtv1.VirtualMachineInstanceSpec{
		Networks: []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
	}
	spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{{Name: "default", InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}}}
	for _, n := range networks {
		addNetwork(&spec, n)
	}
	return spec
}

func addNetwork(spec *kubevirtv1.VirtualMachineInstanceSpec, n VMNetwork) {
	spec.Networks = append(spec.Networks, kubevirtv1.Network{Name: n.Name, NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: n.NAD}}})
	spec.Domain.Devices.Interfaces = append(spec.Domain.Devices.Interfaces, kubevirtv1.Interface{Name: n.Name, MacAddress: n.MAC, InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}})
}
