// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WaitsAsReceiver reports whether owner is a VM waiting to receive a
// decentralized live migration (runStrategy WaitAsReceiver): its VMI is
// made by the migration, from another namespace or cluster.
func WaitsAsReceiver(owner client.Object) bool {
	vm, ok := owner.(*kubevirtv1.VirtualMachine)
	return ok && vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == kubevirtv1.RunStrategyWaitAsReceiver
}
