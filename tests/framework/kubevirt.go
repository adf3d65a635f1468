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
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// KubeVirtSim stands in for virt-controller where none runs (a control
// plane started without Options.RealVirtController); where it runs, use
// KubeVirt, which drives the real one. It writes to the API what
// virt-controller writes:
//
//   - a VM (created stopped) -> on start a VMI of the same name, controlled
//     by the VM (blockOwnerDeletion), copying the template spec;
//   - a virt-launcher pod per VMI, controlled by the VMI, with KubeVirt's
//     labels (kubevirt.io=virt-launcher, kubevirt.io/created-by,
//     vm.kubevirt.io/name), the kubevirt.io/domain annotation and the Multus
//     networks annotation with KubeVirt's hashed pod interface names;
//   - migration: a second launcher pod for the same VMI, labelled with the
//     migration job UID, next to a VirtualMachineInstanceMigration object;
//   - hotplug / unplug: VM spec -> VMI spec -> launcher pod annotation.
//
// What it does not simulate: virt-handler, the guest, VMI phases and
// KubeVirt's own finalizers (a VMI here is deleted at once, and its pods are
// then collected by the garbage collector through their owner references).
type KubeVirtSim struct {
	C client.Client
	// HoldFinalizer, when set, is added to every launcher pod so a test can
	// keep a deleted pod "terminating" (standing for a slow kubelet) and then
	// let it go with Release.
	HoldFinalizer string
}

// KubeVirtNamespace holds the simulated KubeVirt CR.
const KubeVirtNamespace = "kubevirt"

// VMNetwork is one secondary network of a simulated VM.
type VMNetwork struct {
	// Name is the logical network name (spec.networks[].name).
	Name string
	// NAD is multus.networkName: "nad" or "namespace/nad".
	NAD string
}

// SetFeatureGate turns KubeVirt's PersistentIPs feature gate on or off.
func (s *KubeVirtSim) SetFeatureGate(ctx context.Context, on bool) error {
	return SetPersistentIPsGate(ctx, s.C, on)
}

// SetPersistentIPsGate turns KubeVirt's PersistentIPs feature gate on or
// off in the KubeVirt CR kubevirt/kubevirt, creating the CR (and its
// namespace) if there is none. It patches only the feature gate list,
// guarded by the resourceVersion it read: the CR is shared by every test
// of a control plane, and virt-controller reads its status.phase.
func SetPersistentIPsGate(ctx context.Context, c client.Client, on bool) error {
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
				gates = append(gates, kubevirt.PersistentIPsGate)
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
			gates = slices.DeleteFunc(slices.Clone(dc.FeatureGates), func(g string) bool { return g == kubevirt.PersistentIPsGate })
		}
		if on {
			gates = append(gates, kubevirt.PersistentIPsGate)
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
	spec.Domain.Devices.Interfaces = append(spec.Domain.Devices.Interfaces, kubevirtv1.Interface{Name: n.Name, InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}})
}

// CreateVM creates a stopped VM.
func (s *KubeVirtSim) CreateVM(ctx context.Context, ns, name string, networks ...VMNetwork) (*kubevirtv1.VirtualMachine, error) {
	halted := kubevirtv1.RunStrategyHalted
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: &halted,
			Template:    &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: VMTemplate(networks...)},
		},
	}
	if err := s.C.Create(ctx, vm); err != nil {
		return nil, fmt.Errorf("creating VirtualMachine %s/%s: %w", ns, name, err)
	}
	return vm, nil
}

// Start does what virt-controller does when a VM is started: a VMI from
// the template, then its launcher pod (on node, "" for unscheduled).
func (s *KubeVirtSim) Start(ctx context.Context, vm *kubevirtv1.VirtualMachine, node string) (*kubevirtv1.VirtualMachineInstance, *corev1.Pod, error) {
	if err := s.C.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		return nil, nil, fmt.Errorf("reading VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	always := kubevirtv1.RunStrategyAlways
	vm.Spec.RunStrategy = &always
	if err := s.C.Update(ctx, vm); err != nil {
		return nil, nil, fmt.Errorf("starting VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       vm.Namespace,
			Name:            vm.Name,
			Labels:          map[string]string{kubevirtv1.VirtualMachineLabel: vm.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)},
		},
		Spec: *vm.Spec.Template.Spec.DeepCopy(),
	}
	if err := s.C.Create(ctx, vmi); err != nil {
		return nil, nil, fmt.Errorf("creating VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	pod, err := s.LauncherPod(ctx, vmi, node, "")
	return vmi, pod, err
}

// CreateVMI creates a standalone VMI (no VM) and its launcher pod.
func (s *KubeVirtSim) CreateVMI(ctx context.Context, ns, name, node string, networks ...VMNetwork) (*kubevirtv1.VirtualMachineInstance, *corev1.Pod, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       VMTemplate(networks...),
	}
	if err := s.C.Create(ctx, vmi); err != nil {
		return nil, nil, fmt.Errorf("creating VirtualMachineInstance %s/%s: %w", ns, name, err)
	}
	pod, err := s.LauncherPod(ctx, vmi, node, "")
	return vmi, pod, err
}

// Stop does what stopping a VM does: the VMI is deleted (its pods follow).
func (s *KubeVirtSim) Stop(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	if err := s.C.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		return fmt.Errorf("reading VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	halted := kubevirtv1.RunStrategyHalted
	vm.Spec.RunStrategy = &halted
	if err := s.C.Update(ctx, vm); err != nil {
		return fmt.Errorf("stopping VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name}}
	if err := s.C.Delete(ctx, vmi, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting VirtualMachineInstance %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return nil
}

// LauncherPod creates a virt-launcher pod for vmi, as virt-controller
// renders it (migrationUID set: a migration target pod).
func (s *KubeVirtSim) LauncherPod(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, node string, migrationUID types.UID) (*corev1.Pod, error) {
	annotation, err := NetworksAnnotation(vmi)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    vmi.Namespace,
			GenerateName: "virt-launcher-" + vmi.Name + "-",
			Labels: map[string]string{
				kubevirtv1.AppLabel:       kubevirt.LauncherLabelValue,
				kubevirtv1.CreatedByLabel: string(vmi.UID),
				kubevirt.VMINameLabel:     vmi.Name,
			},
			Annotations: map[string]string{
				kubevirtv1.DomainAnnotation: vmi.Name,
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, kubevirtv1.VirtualMachineInstanceGroupVersionKind)},
		},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "compute", Image: "quay.io/kubevirt/virt-launcher:v1.8.2"}},
		},
	}
	if annotation != "" {
		pod.Annotations[multus.Annotation] = annotation
	}
	if migrationUID != "" {
		pod.Labels[kubevirtv1.MigrationJobLabel] = string(migrationUID)
	}
	if s.HoldFinalizer != "" {
		pod.Finalizers = []string{s.HoldFinalizer}
	}
	if err := s.C.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("creating the launcher pod of %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return pod, nil
}

// Migrate starts a live migration of vmi to node: a migration object and a
// target launcher pod next to the source, which keeps running.
func (s *KubeVirtSim) Migrate(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, node string) (*corev1.Pod, error) {
	mig := &kubevirtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, GenerateName: "migration-" + vmi.Name + "-"},
		Spec:       kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
	}
	if err := s.C.Create(ctx, mig); err != nil {
		return nil, fmt.Errorf("creating the migration of %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return s.LauncherPod(ctx, vmi, node, mig.UID)
}

// Hotplug adds a secondary network to a running VM the way KubeVirt does:
// VM spec, then VMI spec, then the launcher pod's networks annotation.
func (s *KubeVirtSim) Hotplug(ctx context.Context, vm *kubevirtv1.VirtualMachine, pod *corev1.Pod, n VMNetwork) error {
	return s.changeNetworks(ctx, vm, pod, func(spec *kubevirtv1.VirtualMachineInstanceSpec) { addNetwork(spec, n) })
}

// Unplug marks a network's interface absent (hot-unplug) in the VM and VMI
// specs; SyncPodNetworks then does virt-controller's next step, rewriting
// the launcher pod's annotation without the element.
func (s *KubeVirtSim) Unplug(ctx context.Context, vm *kubevirtv1.VirtualMachine, network string) error {
	return s.changeSpecs(ctx, vm, func(spec *kubevirtv1.VirtualMachineInstanceSpec) {
		for i := range spec.Domain.Devices.Interfaces {
			if spec.Domain.Devices.Interfaces[i].Name == network {
				spec.Domain.Devices.Interfaces[i].State = kubevirtv1.InterfaceStateAbsent
			}
		}
	})
}

func (s *KubeVirtSim) changeNetworks(ctx context.Context, vm *kubevirtv1.VirtualMachine, pod *corev1.Pod, change func(*kubevirtv1.VirtualMachineInstanceSpec)) error {
	if err := s.changeSpecs(ctx, vm, change); err != nil {
		return err
	}
	return s.SyncPodNetworks(ctx, vm, pod)
}

func (s *KubeVirtSim) changeSpecs(ctx context.Context, vm *kubevirtv1.VirtualMachine, change func(*kubevirtv1.VirtualMachineInstanceSpec)) error {
	if err := s.C.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
		return fmt.Errorf("reading VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	change(&vm.Spec.Template.Spec)
	if err := s.C.Update(ctx, vm); err != nil {
		return fmt.Errorf("updating VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	var vmi kubevirtv1.VirtualMachineInstance
	if err := s.C.Get(ctx, client.ObjectKeyFromObject(vm), &vmi); err != nil {
		return fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	change(&vmi.Spec)
	if err := s.C.Update(ctx, &vmi); err != nil {
		return fmt.Errorf("updating VirtualMachineInstance %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return nil
}

// SyncPodNetworks rewrites the launcher pod's networks annotation from the
// VMI spec, as virt-controller does after a hotplug or unplug.
func (s *KubeVirtSim) SyncPodNetworks(ctx context.Context, vm *kubevirtv1.VirtualMachine, pod *corev1.Pod) error {
	var vmi kubevirtv1.VirtualMachineInstance
	if err := s.C.Get(ctx, client.ObjectKeyFromObject(vm), &vmi); err != nil {
		return fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	annotation, err := NetworksAnnotation(&vmi)
	if err != nil {
		return err
	}
	if err := s.C.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		return fmt.Errorf("reading launcher pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	// Elements still wanted keep what they had (the claim reference the
	// webhook added); new ones come as rendered.
	merged, err := mergeNetworks(pod.Annotations[multus.Annotation], annotation)
	if err != nil {
		return err
	}
	pod.Annotations[multus.Annotation] = merged
	if err := s.C.Update(ctx, pod); err != nil {
		return fmt.Errorf("updating launcher pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// Touch changes a label on obj (see the function Touch).
func (s *KubeVirtSim) Touch(ctx context.Context, obj client.Object) error {
	return Touch(ctx, s.C, obj)
}

// Release lets a held (terminating) pod go, as the kubelet does once the
// containers are gone.
func (s *KubeVirtSim) Release(ctx context.Context, pod *corev1.Pod) error {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
	if err := s.C.Patch(ctx, pod, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// NetworksAnnotation renders the Multus networks annotation virt-controller
// writes for a VMI: one element per secondary Multus network that is not
// being unplugged, with KubeVirt's hashed pod interface name.
func NetworksAnnotation(vmi *kubevirtv1.VirtualMachineInstance) (string, error) {
	var elems []multus.Element
	for _, n := range kubevirt.SecondaryNetworks(&vmi.Spec) {
		if n.Absent {
			continue
		}
		nad, err := multus.NADRef(n.NetworkName, vmi.Namespace)
		if err != nil {
			return "", fmt.Errorf("network %q: %w", n.Name, err)
		}
		elems = append(elems, multus.NewElement(nad.Namespace, nad.Name, kubevirt.PodInterfaceName(n.Name)))
	}
	if len(elems) == 0 {
		return "", nil
	}
	return multus.MarshalElements(elems)
}

// mergeNetworks keeps, for interfaces still wanted, the elements as they
// were (with any claim reference), and adds new ones as rendered.
func mergeNetworks(old, rendered string) (string, error) {
	before, err := multus.ParseElements(old, "")
	if err != nil {
		return "", fmt.Errorf("decoding the old networks annotation: %w", err)
	}
	after, err := multus.ParseElements(rendered, "")
	if err != nil {
		return "", fmt.Errorf("decoding the new networks annotation: %w", err)
	}
	byIface := map[string]multus.Element{}
	for _, e := range before {
		byIface[e.Interface] = e
	}
	for i, e := range after {
		if prev, ok := byIface[e.Interface]; ok {
			after[i] = prev
		}
	}
	return multus.MarshalElements(after)
}
