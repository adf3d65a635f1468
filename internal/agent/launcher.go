// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
)

// mayUseClaim refuses a pod that is not a launcher of the claim's owner.
// A claim owned by a VM or VMI (claimowner.Of, the rule the controller and
// the webhook apply) holds that VM's addresses; any other pod naming it
// would take them over and rewrite ownerPod. Claims no VM or VMI owns
// (made by other tools) may be used by any pod of the namespace.
func (a *Agent) mayUseClaim(ctx context.Context, pod *corev1.Pod, claim *ipamclaimsv1alpha1.IPAMClaim) error {
	owner, ok := claimowner.Of(claim)
	if !ok {
		return nil
	}
	refuse := func(why string, args ...any) error {
		return fail(reasonInvalid, codeInvalidConfig, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name,
			claimowner.NotRunBy(claim.Namespace, claim.Name, owner, fmt.Sprintf(why, args...))))
	}
	vmiName, vmiUID, ok := claimowner.PodVMI(pod)
	if !ok {
		return refuse("this pod is no virt-launcher pod (no controller reference to a VirtualMachineInstance, no %s label)", kubevirtv1.CreatedByLabel)
	}
	launcher := claimowner.Launcher{VMIName: vmiName, VMIUID: vmiUID}
	if owner.Kind == claimowner.KindVM {
		// The pod names only its VMI; which VM controls that VMI is on
		// the VMI, read live (a VMI created a moment ago counts).
		vmi := &metav1.PartialObjectMetadata{}
		vmi.SetGroupVersionKind(kubevirtv1.VirtualMachineInstanceGroupVersionKind)
		err := a.pods.live.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: vmiName}, vmi)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			return refuse("the pod's VirtualMachineInstance %s does not exist", vmiName)
		case err != nil:
			return fail(reasonInternal, codeTryAgainLater, fmt.Errorf("pod %s/%s uses IPAMClaim %s/%s: reading its VirtualMachineInstance %s: %w",
				pod.Namespace, pod.Name, claim.Namespace, claim.Name, vmiName, err))
		case vmi.UID != vmiUID:
			return refuse("the pod names VirtualMachineInstance %s with uid %s, which is not the existing one (uid %s)", vmiName, vmiUID, vmi.UID)
		}
		launcher = claimowner.LauncherOf(vmi)
	}
	if !owner.Runs(launcher) {
		return refuse("this pod launches VirtualMachineInstance %s (uid %s)", vmiName, vmiUID)
	}
	return nil
}
