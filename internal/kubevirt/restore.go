// SPDX-License-Identifier: Apache-2.0

package kubevirt

// LastRestoreAnnotation is the annotation KubeVirt's restore controller
// writes on every VM it restores or creates from a snapshot
// ("<restore name>-<restore UID>"; pkg/storage/snapshot/restore.go in
// v1.8.2). A VirtualMachineClone makes its target VM through such a
// restore, so the clone carries it too, and clone filters never remove it.
const LastRestoreAnnotation = "restore.kubevirt.io/lastRestoreUID"

// MadeByRestore reports whether a VM's metadata annotations say KubeVirt
// made or rewrote it from a snapshot: a clone, a restore as a new VM, or
// a restore over the same VM. Its template annotations were then copied
// from the source.
func MadeByRestore(annotations map[string]string) bool {
	_, ok := annotations[LastRestoreAnnotation]
	return ok
}
