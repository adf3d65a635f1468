// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MigrationOption changes how Migrate's simulated nodes behave.
type MigrationOption func(*migrationOptions)

type migrationOptions struct {
	fail string
	// bothRun is called once the target pod runs, before the handover.
	bothRun func(ctx context.Context, source, target *corev1.Pod) error
}

// WhileBothRun calls check once the target launcher runs next to the
// source, before the migration completes or fails (a test asserts what
// both pods have while both run).
func WhileBothRun(check func(ctx context.Context, source, target *corev1.Pod) error) MigrationOption {
	return func(o *migrationOptions) { o.bothRun = check }
}

// FailMigration makes the migration fail after the target pod is ready,
// as virt-handler reports a failed libvirt migration: the VMI's migration
// state says failed, the migration object ends Failed, the target pod's
// containers end (phase Failed) and the VM stays on its source.
func FailMigration() MigrationOption {
	return func(o *migrationOptions) { o.fail = "simulated by the test: live migration failed" }
}

// Migrate live-migrates vmi to node through a real
// VirtualMachineInstanceMigration: virt-controller creates the target pod,
// which is bound to node and run; then virt-handler's migration state
// transitions follow, up to Succeeded (the VMI now on node, the source pod
// Succeeded) or, with FailMigration, Failed. It returns the migration and
// the target pod as they are at the end.
func (k *KubeVirt) Migrate(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, node string, opts ...MigrationOption) (*kubevirtv1.VirtualMachineInstanceMigration, *corev1.Pod, error) {
	var o migrationOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
		return nil, nil, fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	source, err := k.LauncherPod(ctx, vmi)
	if err != nil {
		return nil, nil, err
	}
	mig := &kubevirtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, GenerateName: "migration-" + vmi.Name + "-"},
		Spec:       kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
	}
	if err := k.C.Create(ctx, mig); err != nil {
		return nil, nil, fmt.Errorf("creating the migration of %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	target, err := k.waitPod(ctx, vmi, mig.UID)
	if err != nil {
		return mig, nil, err
	}
	if target, err = k.bindAndRun(ctx, target, node); err != nil {
		return mig, target, err
	}
	// virt-controller hands the migration to the nodes' handlers.
	if err := k.wait(ctx, "VMI "+vmi.Name+" migration state for "+target.Name, func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return false, err
		}
		ms := vmi.Status.MigrationState
		return ms != nil && ms.MigrationUID == mig.UID && ms.TargetPod == target.Name, nil
	}); err != nil {
		return mig, target, err
	}
	if o.bothRun != nil {
		if err := o.bothRun(ctx, source, target); err != nil {
			return mig, target, err
		}
	}
	// Target virt-handler: the target domain listens.
	if err := k.migrationStep(ctx, vmi, mig, kubevirtv1.MigrationTargetReady, migrationState(map[string]any{
		"targetNodeAddress": "127.0.0.1", "targetDirectMigrationNodePorts": map[string]int{"49152": 0, "49153": 49153},
	})); err != nil {
		return mig, target, err
	}
	now := metav1.Now()
	if o.fail != "" {
		// Source virt-handler: libvirt reports the migration failed.
		if err := k.migrationStep(ctx, vmi, mig, kubevirtv1.MigrationFailed, migrationState(map[string]any{
			"failed": true, "endTimestamp": now, "failureReason": o.fail,
		})); err != nil {
			return mig, target, err
		}
		// Target virt-handler cleans up: the target launcher exits and
		// the VMI is no longer marked for the target node.
		if err := k.patchVMI(ctx, vmi, func(*kubevirtv1.VirtualMachineInstance) (map[string]any, error) {
			return map[string]any{"metadata": map[string]any{"labels": map[string]any{kubevirtv1.MigrationTargetNodeNameLabel: nil}}}, nil
		}); err != nil {
			return mig, target, err
		}
		if err := k.setPodEnded(ctx, target, corev1.PodFailed); err != nil {
			return mig, target, err
		}
		return mig, target, nil
	}
	// Source: migration started; target: the domain arrived.
	if err := k.migrationStep(ctx, vmi, mig, kubevirtv1.MigrationRunning, migrationState(map[string]any{
		"startTimestamp": now, "targetNodeDomainReadyTimestamp": now, "targetNodeDomainDetected": true,
	})); err != nil {
		return mig, target, err
	}
	// Source: completed; the VMI now belongs to the target node.
	handOver := migrationState(map[string]any{"completed": true, "endTimestamp": metav1.Now()}, map[string]any{"nodeName": node})
	handOver["metadata"] = map[string]any{"labels": map[string]any{kubevirtv1.NodeNameLabel: node, kubevirtv1.MigrationTargetNodeNameLabel: nil}}
	if err := k.migrationStep(ctx, vmi, mig, kubevirtv1.MigrationSucceeded, handOver); err != nil {
		return mig, target, err
	}
	// The source launcher exits once its domain left.
	if err := k.setPodEnded(ctx, source, corev1.PodSucceeded); err != nil {
		return mig, target, err
	}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(target), target); err != nil {
		return mig, target, fmt.Errorf("reading pod %s/%s: %w", target.Namespace, target.Name, err)
	}
	return mig, target, nil
}

// migrationStep merge-patches the VMI as virt-handler does in a step of a
// migration, and waits for virt-controller to move the migration to phase.
func (k *KubeVirt) migrationStep(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, mig *kubevirtv1.VirtualMachineInstanceMigration,
	phase kubevirtv1.VirtualMachineInstanceMigrationPhase, patch map[string]any) error {
	if err := k.patchVMI(ctx, vmi, func(*kubevirtv1.VirtualMachineInstance) (map[string]any, error) { return patch, nil }); err != nil {
		return err
	}
	return k.wait(ctx, "migration "+mig.Name+" "+string(phase), func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(mig), mig); err != nil {
			return false, err
		}
		if mig.Status.Phase == kubevirtv1.MigrationFailed && phase != kubevirtv1.MigrationFailed {
			return false, fmt.Errorf("migration %s failed: %+v", mig.Name, mig.Status.Conditions)
		}
		return mig.Status.Phase == phase, nil
	})
}

// migrationState is a VMI patch of status.migrationState (and extra
// status fields).
func migrationState(state map[string]any, status ...map[string]any) map[string]any {
	st := map[string]any{"migrationState": state}
	for _, m := range status {
		for k, v := range m {
			st[k] = v
		}
	}
	return map[string]any{"status": st}
}
