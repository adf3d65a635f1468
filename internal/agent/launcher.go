// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
)

// mayUseClaim refuses a pod that is not a launcher of the claim's owner;
// it is the agent's one rule for who may use a claim. A claim owned by a
// VM or VMI (claimowner.Of, the rule the controller and the webhook apply)
// holds that VM's addresses; any other pod naming it would take them over.
// The pod's identity is claimowner.LauncherVMI: its controller reference
// to the VMI, whose UID its kubevirt.io/created-by label must repeat, and
// whose name must be the owner's (a VM's VMI has the VM's name; a VMI
// owner by name and UID). Only KubeVirt's controller may write or change
// them, which the launcher-identity admission policy enforces in the API
// server, so the pod read (no other round trip) is enough. Claims no VM or
// VMI owns (made by other tools) may be used by any pod of the namespace.
func (a *Agent) mayUseClaim(pod *corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim) error {
	owner, ok := claimowner.Of(claim)
	if !ok {
		return nil
	}
	refuse := func(why string, args ...any) error {
		return fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name,
			claimowner.NotRunBy(claim.Namespace, claim.Name, owner, fmt.Sprintf(why, args...))))
	}
	vmiName, vmiUID, problem := claimowner.LauncherVMI(pod)
	if problem != "" {
		return refuse("%s", problem)
	}
	if !owner.RunsVMI(vmiName, vmiUID) {
		return refuse("this pod launches VirtualMachineInstance %s (uid %s)", vmiName, vmiUID)
	}
	return nil
}
