// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LiveUpdateNADRefGate is KubeVirt's feature gate for live NAD swap
// (beta in v1.8, so off unless listed).
const LiveUpdateNADRefGate = "LiveUpdateNADRef"

// Live NAD swap as KubeVirt v1.8.2 does it (the real virt-controller does
// every step but the last, which is virt-handler's):
//
//   - the user changes spec.template.spec.networks[].multus.networkName of
//     a running VM;
//   - virt-controller's VM controller copies the new NAD name into the
//     VMI's spec.networks (pkg/network/controllers/vm.go, syncNetworks,
//     only with LiveUpdateNADRef on; no RestartRequired for it,
//     pkg/network/vmliveupdate/restart.go);
//   - its VMI controller sees the VMI's NAD differ from the one the live
//     pod's network-status names for that pod interface and sets the VMI
//     condition MigrationRequired=True, reason AutoMigrationDueToLiveUpdate
//     (pkg/network/migration/evaluator.go, watch/vmi/lifecycle.go
//     syncMigrationRequiredCondition); the source pod's networks
//     annotation is not changed;
//   - a migration moves the VM: the workload updater creates one
//     (kubevirt-workload-update-*) when the KubeVirt CR's
//     workloadUpdateStrategy lists LiveMigrate, else the user does; the
//     target pod's networks annotation is generated from the VMI spec: the
//     new NAD, with the same interface name (pod<hash of the logical
//     network name>);
//   - the target's virt-handler removes MigrationRequired once the domain
//     runs there (pkg/virt-handler/migration-target.go); only then does
//     virt-controller mark the migration Succeeded (watch/migration,
//     migration.go). The source pod ends (Succeeded) and stays until the
//     VMI goes. A failed migration leaves MigrationRequired=True, so the
//     workload updater would retry.

// SwapNAD points the VM's network at another NAD (the user's step) and
// waits for the real virt-controller to carry it into the VMI spec and
// mark the VMI MigrationRequired=True. The VM keeps running on its source
// pod until a migration (Migrate with HandlerDropsMigrationRequired
// running) moves it.
func (k *KubeVirt) SwapNAD(ctx context.Context, vm *kubevirtv1.VirtualMachine, network, nad string) (*kubevirtv1.VirtualMachineInstance, error) {
	return k.setNAD(ctx, vm, network, nad, true)
}

// SwapNADBack points the VM's network back at the NAD its launcher pod
// runs with (after a failed swap migration) and waits for virt-controller
// to carry it into the VMI spec and drop MigrationRequired.
func (k *KubeVirt) SwapNADBack(ctx context.Context, vm *kubevirtv1.VirtualMachine, network, nad string) (*kubevirtv1.VirtualMachineInstance, error) {
	return k.setNAD(ctx, vm, network, nad, false)
}

func (k *KubeVirt) setNAD(ctx context.Context, vm *kubevirtv1.VirtualMachine, network, nad string, migrationRequired bool) (*kubevirtv1.VirtualMachineInstance, error) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return err
		}
		for i := range vm.Spec.Template.Spec.Networks {
			if n := &vm.Spec.Template.Spec.Networks[i]; n.Name == network && n.Multus != nil {
				n.Multus.NetworkName = nad
				return k.C.Update(ctx, vm)
			}
		}
		return fmt.Errorf("VirtualMachine %s/%s has no Multus network %q", vm.Namespace, vm.Name, network)
	})
	if err != nil {
		return nil, fmt.Errorf("swapping network %q of VirtualMachine %s/%s to NAD %s: %w", network, vm.Namespace, vm.Name, nad, err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name}}
	err = k.wait(ctx, fmt.Sprintf("VMI %s on NAD %s, MigrationRequired %v", vm.Name, nad, migrationRequired), func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		onNAD := slices.ContainsFunc(vmi.Spec.Networks, func(n kubevirtv1.Network) bool {
			return n.Name == network && n.Multus != nil && n.Multus.NetworkName == nad
		})
		required := slices.ContainsFunc(vmi.Status.Conditions, func(c kubevirtv1.VirtualMachineInstanceCondition) bool {
			return c.Type == kubevirtv1.VirtualMachineInstanceMigrationRequired && c.Status == corev1.ConditionTrue
		})
		return onNAD && required == migrationRequired, nil
	})
	if err != nil {
		return vmi, fmt.Errorf("%w (VMI networks %+v, conditions %+v, interfaces %+v)", err, vmi.Spec.Networks, vmi.Status.Conditions, vmi.Status.Interfaces)
	}
	return vmi, nil
}

// HandlerDropsMigrationRequired simulates the target virt-handler's part
// of a swap migration that Migrate does not do: once the VMI's migration
// state says the domain runs on the target, it removes the VMI's
// MigrationRequired condition, as migration-target.go does. It runs until
// the returned stop is called.
func (k *KubeVirt) HandlerDropsMigrationRequired(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	key := client.ObjectKeyFromObject(vmi) // Migrate rewrites vmi meanwhile
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cur := &kubevirtv1.VirtualMachineInstance{}
			if err := k.C.Get(ctx, key, cur); err == nil {
				ms := cur.Status.MigrationState
				required := slices.ContainsFunc(cur.Status.Conditions, func(c kubevirtv1.VirtualMachineInstanceCondition) bool {
					return c.Type == kubevirtv1.VirtualMachineInstanceMigrationRequired
				})
				if ms != nil && ms.TargetNodeDomainReadyTimestamp != nil && required {
					_ = k.patchVMI(ctx, cur, func(v *kubevirtv1.VirtualMachineInstance) (map[string]any, error) {
						conds := slices.DeleteFunc(slices.Clone(v.Status.Conditions), func(c kubevirtv1.VirtualMachineInstanceCondition) bool {
							return c.Type == kubevirtv1.VirtualMachineInstanceMigrationRequired
						})
						return map[string]any{"status": map[string]any{"conditions": conds}}, nil
					})
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}
