// SPDX-License-Identifier: Apache-2.0

// Package claims keeps one IPAMClaim per (KubeVirt VM, persistent-IP
// network), named by naming.ClaimFor, for as long as the VM or one of its
// launcher pods needs it, unless another controller (ipam-extensions)
// makes the claims (Maker): then it makes and adopts none, and releases
// only those carrying its label.
//
// Three reconcilers share the work, one per file:
//
//   - VMReconciler creates the claims of a VM as soon as the VM exists,
//     running or not, so the first launcher pod finds them ready;
//   - VMIReconciler does the same for standalone VMIs (no VM);
//   - ClaimReleaser releases a claim (removes the kubevirt.io/persistent-ipam
//     finalizer and deletes it) once its owner is gone or being deleted, or
//     the network was unplugged, and no VMI or launcher pod still uses it.
//
// Creating and releasing are split because they are triggered by different
// objects: creation by the VM, release by the last user going away. Release
// never trusts the cache alone: the owner's absence and the users' absence
// are confirmed with live reads first, because a released claim takes the
// VM's addresses with it.
//
// Policy changes (the PersistentIPs gate turned off, a NAD's
// allowPersistentIPs removed) stop new claims but never delete existing ones:
// deleting a claim is the one step that loses a VM's address.
package claims
