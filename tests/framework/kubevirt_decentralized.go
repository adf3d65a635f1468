// SPDX-License-Identifier: Apache-2.0

package framework

// KubeVirt's decentralized live migration inside one cluster (feature gate
// DecentralizedLiveMigration, alpha in v1.8): a VM of namespace A moves to
// a receiver VM of namespace B, a VM created with runStrategy
// WaitAsReceiver. The user writes two VirtualMachineInstanceMigrations
// with one migrationID: spec.sendTo (namespace A, names the source VMI)
// and spec.receive (namespace B, names the receiver VMI).
//
// Real here: KubeVirt's virt-controller v1.8.2, which does all of its
// part: the receiver VMI (annotation kubevirt.io/create-migration-target,
// phase WaitingForSync; pkg/virt-controller/watch/vm/vm.go startVMI), both
// migrations' phases (watch/migration/migration.go processMigrationPhase),
// the state it initialises on both VMIs (decentralized.go
// initializeMigrateSourceState, initializeMigrateTargetState,
// updateVMIMigrationSourceWithPodInfo), the receiver's target launcher pod
// in namespace B (migration.go sync, handleTargetPodCreation), its handoff
// (handleTargetPodHandoff), the receiver VMI's phases
// (watch/vmi/lifecycle.go), and at the end the source VM halted and the
// receiver VM's runStrategy restored (watch/vm/vm.go syncRunStrategy).
//
// Simulated, because they cannot run here (on top of what
// KubeVirt.Simulated lists: scheduler, kubelet, Multus' network-status,
// virt-handler for ordinary VMs):
//
//   - KubeVirt's synchronization controller (cmd/synchronization-controller,
//     a separate binary whose two sides exchange the VMIs' status over
//     gRPC): syncSourceToTarget and syncTargetToSource copy, as its
//     pkg/synchronization-controller/synchronization-controller.go does,
//     the source VMI's status.migrationState.sourceState (and its legacy
//     fields) into the receiver VMI, and the receiver's targetState (and
//     its legacy fields, with completed and failed) into the source VMI.
//     They run on every poll of the waits of a migration in progress, as
//     the real one runs on every change of the VMIs. Not simulated: its
//     finalizer on the migrations
//     (synchronization.kubevirt.io/migrationFinalizer), its
//     DecentralizedLiveMigrationFailure VMI condition (informative: it
//     blocks nothing in virt-controller), cancelling through a deleted
//     migration, and the migrated volumes (the test VMs have none);
//   - virt-handler, on the source node and on the target node, for the
//     steps of the migration (pkg/virt-handler/migration-source.go,
//     migration-target.go), each write naming the function it follows;
//   - virt-handler's node labeller: the CPU vendor label on the source and
//     the target node (CPUVendorLabel). virt-controller copies the source
//     node's CPU labels into sourceState.nodeSelectors
//     (updateVMIMigrationSourceWithPodInfo, getNodeSelectorsFromNodeName)
//     and the receiver's migration leaves WaitingForSync only once they
//     are not empty (VirtualMachineInstance.IsMigrationSourceSynchronized);
//     empty, they are dropped from the JSON (omitempty) and the
//     migration waits for ever;
//   - virt-api's admission: the feature gate must be on in the KubeVirt CR
//     for a WaitAsReceiver VM and for sendTo/receive migrations
//     (admitters/vms-admitter.go, migration-create-admitter.go).
//     virt-controller itself does not read the gate, nor the KubeVirt CR's
//     status.synchronizationAddresses (virt-operator's; virt-controller
//     only copies them into the migrations' status,
//     setSynchronizationAddressStatus): connectURL is DecentralizedSyncAddress.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DecentralizedLiveMigrationGate is KubeVirt's feature gate for
// decentralized live migration (alpha in v1.8, so off unless listed).
const DecentralizedLiveMigrationGate = "DecentralizedLiveMigration"

// DecentralizedSyncAddress is the synchronization controller's address:
// the sendTo migrations' connectURL (what a user reads from the KubeVirt
// CR's status.synchronizationAddresses) and the syncAddress the simulated
// controller advertises on both sides (getLocalSynchronizationAddress: its
// pod's address, port 9185). In one cluster both sides are one controller.
const DecentralizedSyncAddress = "127.0.0.1:9185"

// CPUVendorLabel is the CPU vendor label the simulated node labeller puts
// on the nodes of a decentralized migration (kubevirtv1.CPUModelVendorLabel
// plus the vendor).
const CPUVendorLabel = kubevirtv1.CPUModelVendorLabel + "GenuineIntel"

// DecentralizedSimulated names what a decentralized migration adds to the
// simulated parts Simulated lists, for the test's output.
func (k *KubeVirt) DecentralizedSimulated() string {
	return "decentralized live migration: real virt-controller (both migrations, the receiver VMI and its target pod, handoff, " +
		"source VM halted, receiver VM runStrategy restored); simulated: KubeVirt's synchronization controller " +
		"(sourceState/targetState copies between the source and receiver VMIs, synchronization-controller.go " +
		"SyncSourceMigrationStatus/SyncTargetMigrationStatus), virt-handler on the source and target nodes " +
		"(migration-source.go, migration-target.go), its node labeller (" + CPUVendorLabel + "), virt-api's feature gate check"
}

// CreateReceiverVM creates a VM with runStrategy WaitAsReceiver in ns
// (NewVM's template, with the annotation kubevirt.io/restore-run-strategy
// Always, as KubeVirt's own tests make receivers) and waits for the
// receiver VMI virt-controller creates for it: annotated
// kubevirt.io/create-migration-target "true", phase WaitingForSync. As
// virt-api would, it refuses unless DecentralizedLiveMigrationGate is on.
func (k *KubeVirt) CreateReceiverVM(ctx context.Context, ns, name string, networks ...VMNetwork) (*kubevirtv1.VirtualMachine, *kubevirtv1.VirtualMachineInstance, error) {
	if err := k.requireDecentralizedGate(ctx, "VM "+ns+"/"+name+" with runStrategy "+string(kubevirtv1.RunStrategyWaitAsReceiver)); err != nil {
		return nil, nil, err
	}
	vm := NewVM(ns, name, networks...)
	receive := kubevirtv1.RunStrategyWaitAsReceiver
	vm.Spec.RunStrategy = &receive
	vm.Annotations = map[string]string{kubevirtv1.RestoreRunStrategy: string(kubevirtv1.RunStrategyAlways)}
	if err := k.C.Create(ctx, vm); err != nil {
		return nil, nil, fmt.Errorf("creating receiver VirtualMachine %s/%s: %w", ns, name, err)
	}
	vmi, err := k.waitVMI(ctx, vm)
	if err != nil {
		return vm, nil, err
	}
	if err := k.wait(ctx, "receiver VMI "+ns+"/"+name+" WaitingForSync", func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return false, err
		}
		return vmi.IsMigrationTarget() && vmi.Status.Phase == kubevirtv1.WaitingForSync, nil
	}); err != nil {
		return vm, vmi, err
	}
	return vm, vmi, nil
}

// DecentralizedMigration is one decentralized migration in progress, from
// StartDecentralizedMigration. Its objects are refreshed by each of its
// methods.
type DecentralizedMigration struct {
	// Source is the migrating VMI, Receiver the receiver VM's VMI.
	Source, Receiver *kubevirtv1.VirtualMachineInstance
	// SendMigration (spec.sendTo, the source's namespace) and
	// ReceiveMigration (spec.receive, the receiver's namespace).
	SendMigration, ReceiveMigration *kubevirtv1.VirtualMachineInstanceMigration
	// SourcePod is the source's launcher, TargetPod virt-controller's
	// target launcher in the receiver's namespace.
	SourcePod, TargetPod *corev1.Pod
	// Trace lists, with the time since the start, what the simulated
	// parts wrote and what they saw virt-controller write, in order.
	Trace []string

	k     *KubeVirt
	node  string
	start time.Time
	seen  map[string]string
}

// StartDecentralizedMigration starts the decentralized migration of source
// (a running VMI) to the receiver VMI of receiverVM (CreateReceiverVM) on
// node: it creates the sendTo migration in the source's namespace and the
// receive migration in the receiver's, both with migrationID id; the
// simulated synchronization controller copies the VMIs' states until the
// real virt-controller creates the receiver's target launcher pod in the
// receiver's namespace; that pod is bound to node and run (the kubelet's
// Run hook, k.Kubelet.Run, runs the CNI ADD as for any launcher) and
// virt-controller hands the migration to the target node's virt-handler.
// It returns once the target pod runs next to the source and both
// migrations are PreparingTarget. The source's node and node get the CPU
// vendor label (CPUVendorLabel).
func (k *KubeVirt) StartDecentralizedMigration(ctx context.Context, source *kubevirtv1.VirtualMachineInstance, receiverVM *kubevirtv1.VirtualMachine, node, id string) (*DecentralizedMigration, error) {
	if err := k.requireDecentralizedGate(ctx, "a decentralized migration (sendTo/receive)"); err != nil {
		return nil, err
	}
	m := &DecentralizedMigration{k: k, node: node, start: time.Now(), seen: map[string]string{}}
	m.Source = source.DeepCopy()
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(m.Source), m.Source); err != nil {
		return nil, fmt.Errorf("reading source VirtualMachineInstance %s/%s: %w", source.Namespace, source.Name, err)
	}
	if !m.Source.IsRunning() {
		return nil, fmt.Errorf("source VMI %s/%s is %s, not Running", m.Source.Namespace, m.Source.Name, m.Source.Status.Phase)
	}
	var err error
	if m.SourcePod, err = k.LauncherPod(ctx, m.Source); err != nil {
		return nil, err
	}
	m.Receiver = &kubevirtv1.VirtualMachineInstance{}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(receiverVM), m.Receiver); err != nil {
		return nil, fmt.Errorf("reading the receiver VMI of VM %s/%s: %w", receiverVM.Namespace, receiverVM.Name, err)
	}
	if !m.Receiver.IsMigrationTarget() {
		return nil, fmt.Errorf("VMI %s/%s is not a receiver (no %s annotation)", m.Receiver.Namespace, m.Receiver.Name, kubevirtv1.CreateMigrationTarget)
	}
	if err := k.ensureNode(ctx, node); err != nil {
		return nil, err
	}
	for _, n := range []string{m.Source.Status.NodeName, node} {
		if err := k.labelCPUVendor(ctx, n); err != nil {
			return nil, err
		}
	}

	m.SendMigration = &kubevirtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Source.Namespace, GenerateName: "send-" + m.Source.Name + "-"},
		Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: m.Source.Name,
			SendTo: &kubevirtv1.VirtualMachineInstanceMigrationSource{MigrationID: id, ConnectURL: DecentralizedSyncAddress}},
	}
	if err := k.C.Create(ctx, m.SendMigration); err != nil {
		return nil, fmt.Errorf("creating the sendTo migration of %s/%s: %w", m.Source.Namespace, m.Source.Name, err)
	}
	m.note("user: created sendTo migration %s/%s (migrationID %s)", m.SendMigration.Namespace, m.SendMigration.Name, id)
	m.ReceiveMigration = &kubevirtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Receiver.Namespace, GenerateName: "receive-" + m.Receiver.Name + "-"},
		Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: m.Receiver.Name,
			Receive: &kubevirtv1.VirtualMachineInstanceMigrationTarget{MigrationID: id}},
	}
	if err := k.C.Create(ctx, m.ReceiveMigration); err != nil {
		return m, fmt.Errorf("creating the receive migration of %s/%s: %w", m.Receiver.Namespace, m.Receiver.Name, err)
	}
	m.note("user: created receive migration %s/%s (migrationID %s)", m.ReceiveMigration.Namespace, m.ReceiveMigration.Name, id)

	// Synchronization, until virt-controller creates the target pod: the
	// sendTo migration goes Synchronizing -> Pending -> Scheduling
	// (virt-controller writes the source's sourceState, pod and node
	// included), the receive one WaitingForSync -> Pending (once the
	// receiver has that sourceState) and then creates the pod.
	if err := m.until(ctx, "virt-controller's target pod for receiver VMI "+m.Receiver.Namespace+"/"+m.Receiver.Name, func(ctx context.Context) (bool, error) {
		pods, err := k.pods(ctx, m.Receiver)
		if err != nil {
			return false, err
		}
		for i := range pods {
			if pods[i].DeletionTimestamp == nil && types.UID(pods[i].Labels[kubevirtv1.MigrationJobLabel]) == m.ReceiveMigration.UID {
				m.TargetPod = &pods[i]
				return true, nil
			}
		}
		return false, nil
	}, noFailure); err != nil {
		return m, err
	}
	m.note("virt-controller: created target pod %s/%s", m.TargetPod.Namespace, m.TargetPod.Name)
	m.note("kubelet: binding target pod to %s and running it (Kubelet.Run: CNI ADD); %s", node, m.syncState())
	target, err := k.bindAndRun(ctx, m.TargetPod, node)
	if err != nil {
		return m, err
	}
	m.TargetPod = target
	if err := m.refresh(ctx); err != nil {
		return m, err
	}
	m.note("kubelet: target pod Running and Ready; %s", m.syncState())

	// virt-controller hands the receive migration to the target node
	// (handleTargetPodHandoff writes the receiver's targetState: pod,
	// node, virtualMachineInstanceUID); the synchronization controller
	// carries it to the source, whose migration then prepares the target
	// too.
	if err := m.until(ctx, "both migrations PreparingTarget", func(context.Context) (bool, error) {
		return m.SendMigration.Status.Phase == kubevirtv1.MigrationPreparingTarget &&
			m.ReceiveMigration.Status.Phase == kubevirtv1.MigrationPreparingTarget, nil
	}, noFailure); err != nil {
		return m, err
	}
	return m, nil
}

// Complete finishes the migration successfully, as the nodes' virt-handlers
// and the synchronization controller do: the target listens, the source
// starts, the domain arrives on the target, the target marks the receiver
// VMI's migration completed and owns it (node, phase Running, the target
// pod its active pod), the completion is synchronised to the source, whose
// virt-handler marks it Succeeded, and its launcher exits. virt-controller
// moves both migrations to Succeeded, halts the source VM (and deletes its
// VMI, and with it the sendTo migration, which SendMigration keeps as last
// read) and restores the receiver VM's runStrategy. It returns once it has
// (the source VMI gone).
//
// Once the target reported the migration completed, the source's domain
// is gone and its launcher exits whatever the API server answers: if a
// later step fails (a fault of the API), the source's sandbox is still
// torn down, as its kubelet would (endSourceIfCompleted), and the error
// is returned.
func (m *DecentralizedMigration) Complete(ctx context.Context) (err error) {
	k := m.k
	if err := m.targetListens(ctx); err != nil {
		return err
	}
	// Source virt-handler: libvirt started the migration
	// (migration-source.go setMigrationProgressStatus, startTimestamp from
	// the domain's migration metadata); the synchronization controller
	// copies it to the receiver (copyCommonLegacyFields), whose migration
	// runs too.
	if err := m.write(ctx, m.Source, "source virt-handler: migration started (startTimestamp)", migrationState(map[string]any{
		"startTimestamp": metav1.Now(),
	})); err != nil {
		return err
	}
	if err := m.untilPhases(ctx, kubevirtv1.MigrationRunning, kubevirtv1.MigrationRunning); err != nil {
		return err
	}
	// Target virt-handler: the domain arrived and runs
	// (migration-target.go updateStatus: targetNodeDomainDetected,
	// targetNodeDomainReadyTimestamp, and the same in targetState);
	// virt-controller then stamps the target pod
	// (kubevirt.io/migration-target-ready-timestamp, processMigrationPhase
	// Running).
	now := metav1.Now()
	if err := m.write(ctx, m.Receiver, "target virt-handler: domain detected and running on the target", migrationState(map[string]any{
		"targetNodeDomainDetected": true, "targetNodeDomainReadyTimestamp": now,
		"targetState": map[string]any{"domainDetected": true, "domainReadyTimestamp": now},
	})); err != nil {
		return err
	}
	if err := m.until(ctx, "target pod "+m.TargetPod.Name+" stamped "+kubevirtv1.MigrationTargetReadyTimestamp, func(ctx context.Context) (bool, error) {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(m.TargetPod), m.TargetPod); err != nil {
			return false, err
		}
		_, ok := m.TargetPod.Annotations[kubevirtv1.MigrationTargetReadyTimestamp]
		return ok, nil
	}, noFailure); err != nil {
		return err
	}
	// Target virt-handler: libvirt reports the migration done
	// (migration-target.go ackMigrationCompletion: endTimestamp, the VMI
	// now on this node), then finalizeMigration (completed), then
	// finalCleanup (the VMI no longer a migration target: label
	// kubevirt.io/migrationTargetNodeName and annotation
	// kubevirt.io/create-migration-target dropped).
	if err := m.write(ctx, m.Receiver, "target virt-handler: migration ended (endTimestamp, nodeName)", map[string]any{
		"metadata": map[string]any{"labels": map[string]any{kubevirtv1.NodeNameLabel: m.node}},
		"status": map[string]any{
			"nodeName": m.node, "migrationTransport": kubevirtv1.MigrationTransportUnix,
			"migrationState": map[string]any{"endTimestamp": metav1.Now()},
		},
	}); err != nil {
		return err
	}
	sourceEnded := false
	defer func() {
		if err != nil && !sourceEnded {
			err = errors.Join(err, m.endSourceIfCompleted(context.WithoutCancel(ctx)))
		}
	}()
	if err := m.write(ctx, m.Receiver, "target virt-handler: migration finalized (completed)", migrationState(map[string]any{"completed": true})); err != nil {
		return err
	}
	// virt-controller: the receive migration Succeeded; the
	// synchronization controller copies completed to the source
	// (copyLegacyTargetFields), whose migration Succeeded too.
	if err := m.untilPhases(ctx, kubevirtv1.MigrationSucceeded, kubevirtv1.MigrationSucceeded); err != nil {
		return err
	}
	if err := m.write(ctx, m.Receiver, "target virt-handler: final cleanup (no longer a migration target)", map[string]any{
		"metadata": map[string]any{
			"labels":      map[string]any{kubevirtv1.MigrationTargetNodeNameLabel: nil},
			"annotations": map[string]any{kubevirtv1.CreateMigrationTarget: nil},
		},
	}); err != nil {
		return err
	}
	// Target virt-handler's VM controller, which owns the VMI now: the
	// guest runs here (pkg/virt-handler/vm.go updateVMIStatus: phase
	// from the domain, conditions, interfaces).
	if err := k.reportGuest(ctx, m.Receiver, m.TargetPod, nil); err != nil {
		return err
	}
	m.note("target virt-handler: receiver VMI reported Running on %s", m.node)
	// Source virt-handler: the migration completed and the target runs
	// the domain, so the source VMI Succeeded (migration-source.go
	// updateStatus); its launcher exits (kubelet).
	if err := m.write(ctx, m.Source, "source virt-handler: source VMI Succeeded", map[string]any{
		"status": map[string]any{"phase": kubevirtv1.Succeeded},
	}); err != nil {
		return err
	}
	if err := k.setPodEnded(ctx, m.SourcePod, corev1.PodSucceeded); err != nil {
		return err
	}
	sourceEnded = true
	m.note("kubelet: source pod %s Succeeded", m.SourcePod.Name)

	// virt-controller: the source VM halted (vm.go syncRunStrategy), the
	// receiver VM back to its restore-run-strategy, the receiver VMI
	// Running on node with the target pod as its active pod.
	sourceVM := ownerVM(m.Source)
	receiverVM := ownerVM(m.Receiver)
	if err := k.wait(ctx, "virt-controller's end of the decentralized migration", func(ctx context.Context) (bool, error) {
		if sourceVM != nil {
			if err := k.C.Get(ctx, client.ObjectKeyFromObject(sourceVM), sourceVM); err != nil {
				return false, err
			}
			if sourceVM.Spec.RunStrategy == nil || *sourceVM.Spec.RunStrategy != kubevirtv1.RunStrategyHalted {
				return false, nil
			}
		}
		if receiverVM != nil {
			if err := k.C.Get(ctx, client.ObjectKeyFromObject(receiverVM), receiverVM); err != nil {
				return false, err
			}
			if want, ok := receiverVM.Annotations[kubevirtv1.RestoreRunStrategy]; ok &&
				(receiverVM.Spec.RunStrategy == nil || string(*receiverVM.Spec.RunStrategy) != want) {
				return false, nil
			}
		}
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(m.Receiver), m.Receiver); err != nil {
			return false, err
		}
		_, active := m.Receiver.Status.ActivePods[m.TargetPod.UID]
		return m.Receiver.IsRunning() && m.Receiver.Status.NodeName == m.node && active, nil
	}); err != nil {
		return err
	}
	m.note("virt-controller: source VM halted, receiver VM runStrategy restored, receiver VMI Running on %s", m.node)
	if err := k.FinishVMI(ctx, m.Source); err != nil {
		return err
	}
	m.note("virt-controller: source VMI %s/%s gone", m.Source.Namespace, m.Source.Name)
	// With its VMI, virt-controller deletes the sendTo migration
	// (migration.go execute: "Deleting migration for deleted vmi"); it
	// stays here as last read (Succeeded).
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(m.ReceiveMigration), m.ReceiveMigration); err != nil {
		return fmt.Errorf("reading VirtualMachineInstanceMigration %s/%s: %w", m.ReceiveMigration.Namespace, m.ReceiveMigration.Name, err)
	}
	return nil
}

// endSourceIfCompleted is the source kubelet's part of a Complete that
// failed after the target reported the migration completed (the write
// may also have landed with its answer lost): once the receiver VMI reads
// as completed, the source's sandbox is torn down. Read for up to the
// KubeVirt timeout (the API server may be restarting); a receiver not
// completed keeps the source running.
func (m *DecentralizedMigration) endSourceIfCompleted(ctx context.Context) error {
	var completed bool
	err := m.k.wait(ctx, "the receiver VMI's migration state, to end the source after a failed completion", func(ctx context.Context) (bool, error) {
		var vmi kubevirtv1.VirtualMachineInstance
		if err := m.k.C.Get(ctx, client.ObjectKeyFromObject(m.Receiver), &vmi); err != nil {
			return false, err
		}
		ms := vmi.Status.MigrationState
		completed = ms != nil && ms.Completed && !ms.Failed
		return true, nil
	})
	if err != nil || !completed {
		return err
	}
	m.note("kubelet: source pod %s's sandbox torn down (the migration completed; a later step failed)", m.SourcePod.Name)
	return m.k.stopSandbox(ctx, m.SourcePod)
}

// Fail ends the migration as failed before it started: the target
// launcher exits (its containers end, phase Failed; say virt-launcher or
// the target virt-handler's preparation failed) while both migrations
// prepare the target. virt-controller marks the receiver VMI's migration
// state failed and completed (migration.go sync,
// handleMarkMigrationFailedOnVMI: the target pod went down before
// virt-handler started the migration), fails the receive migration
// (updateStatus: target pod down), deletes the target pod
// (decentralized.go handlePostHandoffMigrationCancel) and puts the
// receiver VMI back to WaitingForSync (lifecycle.go); the synchronization
// controller copies completed and failed to the source VMI
// (copyLegacyTargetFields), whose migration virt-controller fails too
// ("source node reported migration failed"). The source VMI keeps running
// on its node. It returns once all that is done.
func (m *DecentralizedMigration) Fail(ctx context.Context) error {
	if err := m.k.setPodEnded(ctx, m.TargetPod, corev1.PodFailed); err != nil {
		return err
	}
	m.note("kubelet: target pod %s Failed", m.TargetPod.Name)
	return m.untilFailed(ctx, true)
}

// FailAfterStart ends the migration as failed after it started: the target
// listens (both migrations TargetReady), then the source virt-handler
// reports that libvirt failed the migration (migration-source.go
// setMigrationProgressStatus: startTimestamp, endTimestamp, failed,
// failureReason), so virt-controller fails the sendTo migration; the
// synchronization controller copies the timestamps (not failed:
// copyLegacySourceFields does not) to the receiver, whose migration runs;
// then the target launcher exits (phase Failed), virt-controller fails the
// receive migration, deletes the target pod and puts the receiver VMI back
// to WaitingForSync. KubeVirt v1.8.2 leaves the receiver VMI's migration
// state neither failed nor completed here: lifecycle.go sets them for a
// receiver losing its pod but patches only phase, conditions and a few
// other fields of a Scheduled VMI (prepareVMIPatch), and
// handleMarkMigrationFailedOnVMI skips a migration that started. The
// source VMI keeps running, its migration state failed.
func (m *DecentralizedMigration) FailAfterStart(ctx context.Context) error {
	k := m.k
	if err := m.targetListens(ctx); err != nil {
		return err
	}
	now := metav1.Now()
	if err := m.write(ctx, m.Source, "source virt-handler: migration failed", migrationState(map[string]any{
		"startTimestamp": now, "endTimestamp": now, "failed": true,
		"failureReason": "simulated by the test: decentralized live migration failed",
	})); err != nil {
		return err
	}
	if err := m.until(ctx, "sendTo migration "+m.SendMigration.Name+" Failed", func(context.Context) (bool, error) {
		return m.SendMigration.Status.Phase == kubevirtv1.MigrationFailed, nil
	}, m.failureOf(m.ReceiveMigration)); err != nil {
		return err
	}
	// The target launcher exits: its incoming domain never arrived.
	if err := k.setPodEnded(ctx, m.TargetPod, corev1.PodFailed); err != nil {
		return err
	}
	m.note("kubelet: target pod %s Failed", m.TargetPod.Name)
	return m.untilFailed(ctx, false)
}

// untilFailed waits for virt-controller's end of a failed migration: both
// migrations Failed, the target pod gone (the kubelet finishing its
// deletion), the receiver VMI WaitingForSync (with its migration state
// failed if receiverFailed), the source VMI Running with its migration
// state failed.
func (m *DecentralizedMigration) untilFailed(ctx context.Context, receiverFailed bool) error {
	k := m.k
	if err := m.until(ctx, "both migrations Failed, the target pod gone and the receiver VMI waiting again", func(ctx context.Context) (bool, error) {
		var pod corev1.Pod
		err := k.C.Get(ctx, client.ObjectKeyFromObject(m.TargetPod), &pod)
		switch {
		case err == nil && pod.UID == m.TargetPod.UID:
			if pod.DeletionTimestamp != nil {
				return false, k.FinishPodDeletion(ctx, &pod)
			}
			return false, nil
		case err != nil && !apierrors.IsNotFound(err):
			return false, err
		}
		rms, sms := m.Receiver.Status.MigrationState, m.Source.Status.MigrationState
		return m.SendMigration.Status.Phase == kubevirtv1.MigrationFailed && m.ReceiveMigration.Status.Phase == kubevirtv1.MigrationFailed &&
			m.Receiver.Status.Phase == kubevirtv1.WaitingForSync && (!receiverFailed || rms != nil && rms.Failed) &&
			m.Source.IsRunning() && sms != nil && sms.Failed, nil
	}, func(*DecentralizedMigration) error { return nil }); err != nil {
		return err
	}
	m.note("virt-controller: both migrations Failed, target pod gone, receiver VMI %s", m.Receiver.Status.Phase)
	return nil
}

// targetListens is the target virt-handler's first report
// (migration-target.go updateStatus: the migration proxy listens,
// targetNodeAddress and targetDirectMigrationNodePorts, in targetState
// too); the synchronization controller copies it to the source
// (copyLegacyTargetFields), and both migrations are TargetReady.
func (m *DecentralizedMigration) targetListens(ctx context.Context) error {
	ports := map[string]int{"49152": 0, "49153": 49153}
	if err := m.write(ctx, m.Receiver, "target virt-handler: migration target listening", migrationState(map[string]any{
		"targetNodeAddress": "127.0.0.1", "targetDirectMigrationNodePorts": ports,
		"targetState": map[string]any{"nodeAddress": "127.0.0.1", "directMigrationNodePorts": ports},
	})); err != nil {
		return err
	}
	return m.untilPhases(ctx, kubevirtv1.MigrationTargetReady, kubevirtv1.MigrationTargetReady)
}

// untilPhases waits, synchronising, for the sendTo migration to reach send
// and the receive migration recv.
func (m *DecentralizedMigration) untilPhases(ctx context.Context, send, recv kubevirtv1.VirtualMachineInstanceMigrationPhase) error {
	return m.until(ctx, fmt.Sprintf("sendTo migration %s and receive migration %s", send, recv), func(context.Context) (bool, error) {
		return m.SendMigration.Status.Phase == send && m.ReceiveMigration.Status.Phase == recv, nil
	}, noFailure)
}

// noFailure is until's check that neither migration failed.
func noFailure(m *DecentralizedMigration) error {
	for _, mig := range []*kubevirtv1.VirtualMachineInstanceMigration{m.SendMigration, m.ReceiveMigration} {
		if mig.Status.Phase == kubevirtv1.MigrationFailed {
			return fmt.Errorf("migration %s/%s failed: %+v", mig.Namespace, mig.Name, mig.Status.Conditions)
		}
	}
	return nil
}

// failureOf is until's check that mig did not fail.
func (m *DecentralizedMigration) failureOf(mig *kubevirtv1.VirtualMachineInstanceMigration) func(*DecentralizedMigration) error {
	return func(*DecentralizedMigration) error {
		if mig.Status.Phase == kubevirtv1.MigrationFailed {
			return fmt.Errorf("migration %s/%s failed: %+v", mig.Namespace, mig.Name, mig.Status.Conditions)
		}
		return nil
	}
}

// until waits for cond; each poll first runs the simulated synchronization
// controller, then reads both VMIs and both migrations (recording in Trace
// what changed) and checks them with fatal, whose error ends the wait at
// once.
func (m *DecentralizedMigration) until(ctx context.Context, what string, cond func(context.Context) (bool, error), fatal func(*DecentralizedMigration) error) error {
	pollCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var fatalErr error
	err := m.k.wait(pollCtx, what, func(ctx context.Context) (bool, error) {
		if err := m.synchronize(ctx); err != nil {
			return false, err
		}
		if err := m.refresh(ctx); err != nil {
			return false, err
		}
		if err := fatal(m); err != nil {
			fatalErr = err
			cancel()
			return false, err
		}
		return cond(ctx)
	})
	if fatalErr != nil {
		return fmt.Errorf("waiting for %s: %w", what, fatalErr)
	}
	return err
}

// write merge-patches vmi as a node's virt-handler does in one step and
// records it.
func (m *DecentralizedMigration) write(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, what string, patch map[string]any) error {
	if err := m.k.patchVMI(ctx, vmi, func(*kubevirtv1.VirtualMachineInstance) (map[string]any, error) { return patch, nil }); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	m.note("%s on %s/%s", what, vmi.Namespace, vmi.Name)
	return nil
}

// synchronize is one round of KubeVirt's synchronization controller on
// both sides.
func (m *DecentralizedMigration) synchronize(ctx context.Context) error {
	if err := m.syncSourceToTarget(ctx); err != nil {
		return err
	}
	return m.syncTargetToSource(ctx)
}

// syncSourceToTarget is the source side's handleSourceState (its VMI's
// status, with sourceState.syncAddress set to its own address, sent over
// gRPC) and the target side's SyncSourceMigrationStatus
// (synchronization-controller.go): the receiver VMI gets the source's
// sourceState and the legacy fields copyLegacySourceFields copies
// (sourceNode, sourcePod, sourcePersistentStatePVCName, and
// copyCommonLegacyFields' migration policy and configuration, start and
// end timestamps), and its migrationMethod.
func (m *DecentralizedMigration) syncSourceToTarget(ctx context.Context) error {
	k := m.k
	src, send := &kubevirtv1.VirtualMachineInstance{}, &kubevirtv1.VirtualMachineInstanceMigration{}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(m.Source), src); err != nil {
		return client.IgnoreNotFound(err)
	}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(m.SendMigration), send); err != nil {
		return client.IgnoreNotFound(err)
	}
	ms := src.Status.MigrationState
	// execute/getMigrationForVMI: the VMI's sendTo migration is the one
	// its sourceState names; handleSourceState: nothing without both
	// states, nor without a target address and a migration UID.
	if send.DeletionTimestamp != nil || ms == nil || ms.SourceState == nil || ms.TargetState == nil ||
		ms.SourceState.MigrationUID != send.UID || ms.TargetState.SyncAddress == nil || ms.SourceState.MigrationUID == "" {
		return nil
	}
	remote := src.Status.DeepCopy()
	if s := remote.MigrationState.SourceState; s.SyncAddress == nil || *s.SyncAddress == "" {
		s.SyncAddress = ptrTo(DecentralizedSyncAddress)
	}
	// SyncSourceMigrationStatus, on the receiving side.
	recv, recvMig := &kubevirtv1.VirtualMachineInstance{}, &kubevirtv1.VirtualMachineInstanceMigration{}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(m.ReceiveMigration), recvMig); err != nil {
		return client.IgnoreNotFound(err)
	}
	if recvMig.IsFinal() || recvMig.Spec.Receive == nil || recvMig.Spec.Receive.MigrationID != send.Spec.SendTo.MigrationID {
		return nil
	}
	if err := k.C.Get(ctx, client.ObjectKey{Namespace: recvMig.Namespace, Name: recvMig.Spec.VMIName}, recv); err != nil {
		return client.IgnoreNotFound(err)
	}
	updated := recv.DeepCopy()
	if updated.Status.MigrationState == nil {
		updated.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{}
	}
	if uid := updated.Status.MigrationState.MigrationUID; uid != "" && uid != recvMig.UID {
		return nil
	}
	updated.Status.MigrationState.SourceState = remote.MigrationState.SourceState.DeepCopy()
	copyLegacySourceFields(updated.Status.MigrationState, remote.MigrationState)
	updated.Status.MigrationMethod = remote.MigrationMethod
	if equality.Semantic.DeepEqual(recv.Status, updated.Status) {
		return nil
	}
	written, err := k.replaceMigrationState(ctx, recv, updated)
	if err != nil || !written {
		return err
	}
	m.note("synchronization controller: source -> receiver (sourceState%s)", sourceStateSummary(updated.Status.MigrationState))
	return nil
}

// syncTargetToSource is the target side's handleTargetState (the receiver
// VMI's status, with targetState.syncAddress set to its own address) and
// the source side's SyncTargetMigrationStatus: the source VMI gets the
// receiver's targetState and the legacy fields copyLegacyTargetFields
// copies (target node, pod, address, ports, domain detected and ready,
// common fields, completed and failed).
func (m *DecentralizedMigration) syncTargetToSource(ctx context.Context) error {
	k := m.k
	recv, recvMig := &kubevirtv1.VirtualMachineInstance{}, &kubevirtv1.VirtualMachineInstanceMigration{}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(m.Receiver), recv); err != nil {
		return client.IgnoreNotFound(err)
	}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(m.ReceiveMigration), recvMig); err != nil {
		return client.IgnoreNotFound(err)
	}
	ms := recv.Status.MigrationState
	if recvMig.DeletionTimestamp != nil || ms == nil || ms.TargetState == nil || ms.SourceState == nil ||
		ms.TargetState.MigrationUID != recvMig.UID || ms.SourceState.SyncAddress == nil {
		return nil
	}
	remote := recv.Status.DeepCopy()
	if t := remote.MigrationState.TargetState; t.SyncAddress == nil || *t.SyncAddress == "" {
		t.SyncAddress = ptrTo(DecentralizedSyncAddress)
	}
	// SyncTargetMigrationStatus, on the sending side.
	src, send := &kubevirtv1.VirtualMachineInstance{}, &kubevirtv1.VirtualMachineInstanceMigration{}
	if err := k.C.Get(ctx, client.ObjectKeyFromObject(m.SendMigration), send); err != nil {
		return client.IgnoreNotFound(err)
	}
	if send.IsFinal() || send.Spec.SendTo == nil || send.Spec.SendTo.MigrationID != recvMig.Spec.Receive.MigrationID {
		return nil
	}
	if err := k.C.Get(ctx, client.ObjectKey{Namespace: send.Namespace, Name: send.Spec.VMIName}, src); err != nil {
		return client.IgnoreNotFound(err)
	}
	updated := src.DeepCopy()
	if updated.Status.MigrationState == nil {
		updated.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{}
	}
	if uid := updated.Status.MigrationState.MigrationUID; uid != "" && uid != send.UID {
		return nil
	}
	updated.Status.MigrationState.TargetState = remote.MigrationState.TargetState.DeepCopy()
	copyLegacyTargetFields(updated.Status.MigrationState, remote.MigrationState)
	if equality.Semantic.DeepEqual(src.Status.MigrationState, updated.Status.MigrationState) {
		return nil
	}
	written, err := k.replaceMigrationState(ctx, src, updated)
	if err != nil || !written {
		return err
	}
	m.note("synchronization controller: receiver -> source (targetState%s)", targetStateSummary(updated.Status.MigrationState))
	return nil
}

// replaceMigrationState writes updated's migrationState and
// migrationMethod over orig's, as the synchronization controller's
// patchVMI does (a JSON patch guarded by what it read; here the
// resourceVersion), and nothing once orig's migration completed.
func (k *KubeVirt) replaceMigrationState(ctx context.Context, orig, updated *kubevirtv1.VirtualMachineInstance) (bool, error) {
	if orig.Status.MigrationState != nil && orig.Status.MigrationState.Completed {
		return false, nil
	}
	ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": orig.ResourceVersion}}
	if !equality.Semantic.DeepEqual(orig.Status.MigrationMethod, updated.Status.MigrationMethod) {
		ops = append(ops, map[string]any{"op": "add", "path": "/status/migrationMethod", "value": updated.Status.MigrationMethod})
	}
	ops = append(ops, map[string]any{"op": "add", "path": "/status/migrationState", "value": updated.Status.MigrationState})
	raw, err := json.Marshal(ops)
	if err != nil {
		return false, err
	}
	if err := k.C.Patch(ctx, orig, client.RawPatch(types.JSONPatchType, raw)); err != nil {
		return false, fmt.Errorf("writing the migration state of VMI %s/%s as the synchronization controller: %w", orig.Namespace, orig.Name, err)
	}
	return true, nil
}

// copyLegacySourceFields is synchronization-controller.go's.
func copyLegacySourceFields(dst, remote *kubevirtv1.VirtualMachineInstanceMigrationState) {
	dst.SourceNode = remote.SourceState.Node
	if remote.SourceState.PersistentStatePVCName != nil {
		dst.SourcePersistentStatePVCName = *remote.SourceState.PersistentStatePVCName
	}
	dst.SourcePod = remote.SourceState.Pod
	copyCommonLegacyFields(dst, remote)
}

// copyLegacyTargetFields is synchronization-controller.go's.
func copyLegacyTargetFields(dst, remote *kubevirtv1.VirtualMachineInstanceMigrationState) {
	t := remote.TargetState
	dst.TargetNode = t.Node
	if t.AttachmentPodUID != nil {
		dst.TargetAttachmentPodUID = *t.AttachmentPodUID
	}
	dst.TargetCPUSet = t.CPUSet
	dst.TargetDirectMigrationNodePorts = t.DirectMigrationNodePorts
	if t.NodeAddress != nil {
		dst.TargetNodeAddress = *t.NodeAddress
	}
	dst.TargetNodeDomainDetected = t.DomainDetected
	dst.TargetNodeDomainReadyTimestamp = t.DomainReadyTimestamp
	if t.NodeTopology != nil {
		dst.TargetNodeTopology = *t.NodeTopology
	}
	if t.PersistentStatePVCName != nil {
		dst.TargetPersistentStatePVCName = *t.PersistentStatePVCName
	}
	dst.TargetPod = t.Pod
	copyCommonLegacyFields(dst, remote)
	dst.Completed = remote.Completed
	dst.Failed = remote.Failed
}

// copyCommonLegacyFields is synchronization-controller.go's.
func copyCommonLegacyFields(dst, remote *kubevirtv1.VirtualMachineInstanceMigrationState) {
	if remote.MigrationPolicyName != nil {
		dst.MigrationPolicyName = remote.MigrationPolicyName
	}
	if remote.MigrationConfiguration != nil {
		dst.MigrationConfiguration = remote.MigrationConfiguration
	}
	if remote.StartTimestamp != nil {
		dst.StartTimestamp = remote.StartTimestamp
	}
	if remote.EndTimestamp != nil {
		dst.EndTimestamp = remote.EndTimestamp
	}
}

// refresh reads both VMIs and both migrations and records what changed.
func (m *DecentralizedMigration) refresh(ctx context.Context) error {
	k := m.k
	for _, vmi := range []*kubevirtv1.VirtualMachineInstance{m.Source, m.Receiver} {
		if err := k.C.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return fmt.Errorf("reading VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
	}
	if err := m.refreshMigrations(ctx); err != nil {
		return err
	}
	m.observe("sendTo migration phase", string(m.SendMigration.Status.Phase))
	m.observe("receive migration phase", string(m.ReceiveMigration.Status.Phase))
	m.observe("source VMI phase", string(m.Source.Status.Phase))
	m.observe("receiver VMI phase", string(m.Receiver.Status.Phase))
	if ms := m.Source.Status.MigrationState; ms != nil {
		if ms.SourceState != nil && ms.SourceState.VirtualMachineInstanceUID != nil {
			m.observe("source VMI sourceState.virtualMachineInstanceUID", string(*ms.SourceState.VirtualMachineInstanceUID))
		}
		if ms.SourceState != nil && ms.SourceState.Pod != "" {
			m.observe("source VMI sourceState.pod", ms.SourceState.Pod)
		}
		if ms.TargetState != nil && ms.TargetState.VirtualMachineInstanceUID != nil {
			m.observe("source VMI targetState.virtualMachineInstanceUID", string(*ms.TargetState.VirtualMachineInstanceUID))
		}
	}
	if ms := m.Receiver.Status.MigrationState; ms != nil {
		if ms.SourceState != nil && ms.SourceState.VirtualMachineInstanceUID != nil {
			m.observe("receiver VMI sourceState.virtualMachineInstanceUID", string(*ms.SourceState.VirtualMachineInstanceUID))
		}
		if ms.TargetState != nil && ms.TargetState.VirtualMachineInstanceUID != nil {
			m.observe("receiver VMI targetState.virtualMachineInstanceUID", string(*ms.TargetState.VirtualMachineInstanceUID))
		}
		if ms.TargetState != nil && ms.TargetState.Pod != "" {
			m.observe("receiver VMI targetState.pod", ms.TargetState.Pod)
		}
	}
	m.observe("receiver VMI label "+kubevirtv1.MigrationTargetNodeNameLabel, m.Receiver.Labels[kubevirtv1.MigrationTargetNodeNameLabel])
	m.observe("source VMI migrationState completed/failed", endState(m.Source.Status.MigrationState))
	m.observe("receiver VMI migrationState completed/failed", endState(m.Receiver.Status.MigrationState))
	return nil
}

func (m *DecentralizedMigration) refreshMigrations(ctx context.Context) error {
	for _, mig := range []*kubevirtv1.VirtualMachineInstanceMigration{m.SendMigration, m.ReceiveMigration} {
		if err := m.k.C.Get(ctx, client.ObjectKeyFromObject(mig), mig); err != nil {
			return fmt.Errorf("reading VirtualMachineInstanceMigration %s/%s: %w", mig.Namespace, mig.Name, err)
		}
	}
	return nil
}

// observe records a value that changed since the last poll.
func (m *DecentralizedMigration) observe(what, value string) {
	if old, ok := m.seen[what]; ok && old == value || !ok && value == "" {
		return
	}
	m.seen[what] = value
	if value == "" {
		value = "(none)"
	}
	m.note("seen: %s = %s", what, value)
}

func (m *DecentralizedMigration) note(format string, args ...any) {
	m.Trace = append(m.Trace, fmt.Sprintf("%6dms %s", time.Since(m.start).Milliseconds(), fmt.Sprintf(format, args...)))
}

// syncState says which of the two VMI UIDs each side knows.
func (m *DecentralizedMigration) syncState() string {
	has := func(vmi *kubevirtv1.VirtualMachineInstance, target bool) bool {
		ms := vmi.Status.MigrationState
		if ms == nil {
			return false
		}
		if target {
			return ms.TargetState != nil && ms.TargetState.VirtualMachineInstanceUID != nil
		}
		return ms.SourceState != nil && ms.SourceState.VirtualMachineInstanceUID != nil
	}
	return fmt.Sprintf("receiver has sourceState.virtualMachineInstanceUID: %t, targetState.virtualMachineInstanceUID: %t; source has targetState.virtualMachineInstanceUID: %t",
		has(m.Receiver, false), has(m.Receiver, true), has(m.Source, true))
}

// endState is "completed/failed" once either is set.
func endState(ms *kubevirtv1.VirtualMachineInstanceMigrationState) string {
	if ms == nil || !ms.Completed && !ms.Failed {
		return ""
	}
	return fmt.Sprintf("%t/%t", ms.Completed, ms.Failed)
}

func sourceStateSummary(ms *kubevirtv1.VirtualMachineInstanceMigrationState) string {
	s := ms.SourceState
	out := fmt.Sprintf(": migrationUID %s, pod %q, node %q", s.MigrationUID, s.Pod, s.Node)
	if s.VirtualMachineInstanceUID != nil {
		out += ", virtualMachineInstanceUID " + string(*s.VirtualMachineInstanceUID)
	}
	if ms.StartTimestamp != nil {
		out += "; startTimestamp"
	}
	if ms.EndTimestamp != nil {
		out += "; endTimestamp"
	}
	return out
}

func targetStateSummary(ms *kubevirtv1.VirtualMachineInstanceMigrationState) string {
	t := ms.TargetState
	out := fmt.Sprintf(": migrationUID %s, pod %q, node %q", t.MigrationUID, t.Pod, t.Node)
	if t.VirtualMachineInstanceUID != nil {
		out += ", virtualMachineInstanceUID " + string(*t.VirtualMachineInstanceUID)
	}
	if t.NodeAddress != nil {
		out += ", nodeAddress"
	}
	if t.DomainReadyTimestamp != nil {
		out += ", domainReadyTimestamp"
	}
	return out + fmt.Sprintf("; completed %t, failed %t", ms.Completed, ms.Failed)
}

// ownerVM is the VM controlling vmi, or nil.
func ownerVM(vmi *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachine {
	owner := metav1.GetControllerOf(vmi)
	if owner == nil || owner.Kind != "VirtualMachine" {
		return nil
	}
	return &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: owner.Name}}
}

// labelCPUVendor puts CPUVendorLabel on node, as virt-handler's node
// labeller does on every KubeVirt node.
func (k *KubeVirt) labelCPUVendor(ctx context.Context, name string) error {
	node := &corev1.Node{}
	if err := k.C.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	if node.Labels[CPUVendorLabel] == "true" {
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+CPUVendorLabel+`":"true"}}}`))
	if err := k.C.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("labelling node %s %s: %w", name, CPUVendorLabel, err)
	}
	return nil
}

// requireDecentralizedGate refuses what virt-api's admission would refuse
// without DecentralizedLiveMigrationGate in the KubeVirt CR.
func (k *KubeVirt) requireDecentralizedGate(ctx context.Context, what string) error {
	kv := &kubevirtv1.KubeVirt{}
	if err := k.C.Get(ctx, client.ObjectKey{Namespace: KubeVirtNamespace, Name: "kubevirt"}, kv); err != nil {
		return fmt.Errorf("reading the KubeVirt CR: %w", err)
	}
	if dc := kv.Spec.Configuration.DeveloperConfiguration; dc != nil && slices.Contains(dc.FeatureGates, DecentralizedLiveMigrationGate) {
		return nil
	}
	return fmt.Errorf("virt-api would refuse %s: feature gate %s is not enabled in the KubeVirt CR", what, DecentralizedLiveMigrationGate)
}
