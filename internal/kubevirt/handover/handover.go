// SPDX-License-Identifier: Apache-2.0

// Package handover keeps a VM's addresses when KubeVirt's decentralized
// live migration moves it to a VM of another namespace of the cluster
// (a receiver VM, runStrategy WaitAsReceiver, and two
// VirtualMachineInstanceMigrations, one with sendTo, one with receive).
//
// The rule is a handover between two claims, never two holders and never
// a moment when the running VM's address is free:
//
//   - the receiver's claims are made waiting (claimstatus.ReceiverWaiting)
//     and get no addresses of their own;
//   - once KubeVirt synchronised the migration, each reservation of the
//     source's claim of the network is lent to the receiver's claim
//     (spec.lentTo) and the receiver's claim records those addresses: both
//     launchers run with them, which stay the source claim's;
//   - when the migration succeeded each passes to the receiver's claim
//     (spec.owner), and the source's claim is released (made anew for the
//     halted source VM); when it failed or was cancelled each is taken
//     back, and the receiver's claim is released (made anew, waiting).
//
// Whom to trust: the receiver VMI's status names its source VMI (UID) and
// the source's migration (UID), written by KubeVirt's synchronization
// controller; the source VMI's own status names that migration (written by
// virt-controller), and that migration, in the source's namespace, sends
// with the migrationID the receiver's migration receives. So the
// source's tenant asked for the move and KubeVirt paired the two.
package handover

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// indexVMIUID indexes VMIs by UID: a receiver's status names its source
// by UID only.
const indexVMIUID = "ipkeeper.vmiUID"

// SetupIndexes registers the index Judge reads.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &kubevirtv1.VirtualMachineInstance{}, indexVMIUID, func(o client.Object) []string {
		return []string{string(o.GetUID())}
	}); err != nil {
		return fmt.Errorf("indexing VirtualMachineInstances by UID: %w", err)
	}
	return nil
}

// Phase is where a receiver's migration is, as its VMI's status says.
type Phase int

const (
	// Unsynced: KubeVirt has not synchronised a source into the receiver
	// yet.
	Unsynced Phase = iota
	// Running: synchronised, neither completed nor failed.
	Running
	// Succeeded: the VM runs on the receiver's side.
	Succeeded
	// Failed: failed or cancelled; the VM stays on the source.
	Failed
)

// PhaseOf reads the receiver VMI's migration state and its newest
// receiving migration (nil when there is none). A receiver gone, being
// deleted or ended without completing is Failed; so is one whose
// receiving migration failed or was deleted (cancelled) after the sync:
// KubeVirt v1.8.2 leaves a receiver whose migration failed after it
// started with neither completed nor failed set, and only the migration
// says so.
func PhaseOf(vmi *kubevirtv1.VirtualMachineInstance, receive *kubevirtv1.VirtualMachineInstanceMigration) Phase {
	if vmi == nil || vmi.DeletionTimestamp != nil {
		return Failed
	}
	ms := vmi.Status.MigrationState
	synced := ms != nil && ms.SourceState != nil && ms.SourceState.VirtualMachineInstanceUID != nil && ms.SourceState.MigrationUID != ""
	switch {
	case ms != nil && ms.Completed && !ms.Failed:
		return Succeeded
	case ms != nil && ms.Failed, vmi.IsFinal():
		return Failed
	case !synced:
		return Unsynced
	case receive == nil || receive.DeletionTimestamp != nil || receive.Status.Phase == kubevirtv1.MigrationFailed:
		return Failed
	}
	return Running
}

// ReceivingMigration returns the newest migration of namespace receiving
// the VMI named vmi, or nil.
func ReceivingMigration(ctx context.Context, reader client.Reader, namespace, vmi string) (*kubevirtv1.VirtualMachineInstanceMigration, error) {
	var list kubevirtv1.VirtualMachineInstanceMigrationList
	if err := reader.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the VirtualMachineInstanceMigrations of %s: %w", namespace, err)
	}
	var newest *kubevirtv1.VirtualMachineInstanceMigration
	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.Receive == nil || m.Spec.VMIName != vmi {
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&m.CreationTimestamp) ||
			(newest.CreationTimestamp.Equal(&m.CreationTimestamp) && newest.Name < m.Name) {
			newest = m
		}
	}
	return newest, nil
}

// Judgement is what Judge found of a receiver's source.
type Judgement struct {
	// Source is the source VMI, in this cluster and trusted; nil otherwise.
	Source *kubevirtv1.VirtualMachineInstance
	// Remote: the source named is in no namespace of this cluster (another
	// cluster's): the receiver gets addresses of its own.
	Remote bool
	// Refused says why a source of this cluster is not trusted ("" when
	// it is, or none was found): the receiver's claims keep waiting. It
	// names no object of the source's namespace: the receiver's tenant
	// reads it.
	Refused string
}

// Judge finds and checks the source of a running receiver (PhaseOf
// Running) and its receiving migration, reading VMIs (with SetupIndexes'
// index) and the source's migrations through reader.
func Judge(ctx context.Context, reader client.Reader, receiver *kubevirtv1.VirtualMachineInstance, receive *kubevirtv1.VirtualMachineInstanceMigration) (Judgement, error) {
	src := receiver.Status.MigrationState.SourceState
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := reader.List(ctx, &vmis, client.MatchingFields{indexVMIUID: string(*src.VirtualMachineInstanceUID)}); err != nil {
		return Judgement{}, fmt.Errorf("looking for the source VMI of %s/%s: %w", receiver.Namespace, receiver.Name, err)
	}
	if len(vmis.Items) == 0 {
		return Judgement{Remote: true}, nil
	}
	source := &vmis.Items[0]
	switch {
	case source.UID == receiver.UID:
		return Judgement{Refused: "its migration state names itself as its source"}, nil
	case source.Namespace == receiver.Namespace:
		// Within a namespace a VM keeps its name's claims; a
		// decentralized migration between two VMs of one namespace is
		// possible but rare, and is handled as any other.
	}
	ms := source.Status.MigrationState
	if ms == nil || ms.SourceState == nil || ms.SourceState.MigrationUID != src.MigrationUID {
		return Judgement{Refused: "the source VMI its migration state names is not being sent by that migration"}, nil
	}
	send, err := migrationWithUID(ctx, reader, source.Namespace, src.MigrationUID)
	if err != nil {
		return Judgement{}, err
	}
	if send == nil || send.Spec.SendTo == nil || send.Spec.VMIName != source.Name || send.IsFinal() {
		return Judgement{Refused: "no migration of the source's namespace is sending the source VMI"}, nil
	}
	if receive != nil && receive.Spec.Receive.MigrationID == send.Spec.SendTo.MigrationID && !receive.IsFinal() {
		return Judgement{Source: source}, nil
	}
	return Judgement{Refused: "no migration receiving it has the migrationID the source's migration sends with"}, nil
}

// migrationWithUID returns the migration of namespace with that UID, or nil.
func migrationWithUID(ctx context.Context, reader client.Reader, namespace string, uid types.UID) (*kubevirtv1.VirtualMachineInstanceMigration, error) {
	var list kubevirtv1.VirtualMachineInstanceMigrationList
	if err := reader.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the VirtualMachineInstanceMigrations of %s: %w", namespace, err)
	}
	for i := range list.Items {
		if list.Items[i].UID == uid {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}
