// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The real virt-controller (Options.VirtController) runs as KubeVirt
// ships it, against this control plane, with no virt-api (so no defaulting
// webhooks: VM templates must be explicit), no virt-handler and no kubelet.
// What it needs, found by running it against this control plane:
//   - the CRDs generated from the same module (hack/tools.sh does it);
//   - namespace kubevirt (its default without a service-account file) and the
//     KubeVirt CR kubevirt/kubevirt with a non-empty status.phase, or it
//     ignores the CR's configuration;
//   - schedulable Nodes for its launcher pods' nodeSelector
//     (EnsureSchedulableNode);
//   - no certificates: it logs their absence at level "fatal" and goes on.
// One per API server: it takes the lease kubevirt/virt-controller.

// KubeVirtControllerServiceAccount is the ServiceAccount (in
// KubeVirtNamespace) virt-controller runs as in a KubeVirt install; the
// virt-controller of tests authenticates as its user.
const KubeVirtControllerServiceAccount = "kubevirt-controller"

// VirtControllerLease is the lease the running virt-controller holds.
const VirtControllerLease = "virt-controller"

// SchedulableLabel marks the nodes virt-controller's launcher pods select.
const SchedulableLabel = "kubevirt.io/schedulable"

type virtControllerProc struct {
	cmd  *exec.Cmd
	done chan error
}

// StartVirtController writes the KubeVirt CR virt-controller reads, starts
// it, and returns once it holds its lease (it then runs its controllers).
// Start calls it for Options.VirtController; a test that installs
// KubeVirt later (InstallKubeVirtCRDs) calls it then.
func (cp *ControlPlane) StartVirtController(ctx context.Context) error {
	if cp.virtController != nil {
		return errors.New("virt-controller already runs on this control plane")
	}
	if err := requireExecutables(cp.Tools.VirtController); err != nil {
		return err
	}
	cp.virtControllerWanted = true
	if err := cp.ensureKubeVirtCR(ctx); err != nil {
		return err
	}
	log, err := cp.newLog("virt-controller")
	if err != nil {
		return err
	}
	launcher := "virt-launcher"
	if cp.lab {
		launcher = LauncherImage
	}
	cmd := exec.Command(cp.Tools.VirtController,
		"--kubeconfig", cp.virtControllerKubeconfig,
		"--launcher-image", launcher,
		// --port 0: not the default 8182, which parallel control planes share.
		"--listen", "127.0.0.1", "--port", "0",
	)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting virt-controller: %w", err)
	}
	p := &virtControllerProc{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	cp.virtController = p

	var lease coordinationv1.Lease
	key := client.ObjectKey{Namespace: KubeVirtNamespace, Name: VirtControllerLease}
	if err := Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		select {
		case err := <-p.done:
			p.done <- err
			return false, fmt.Errorf("virt-controller exited during startup: %w (log: %s)", err, log.path)
		default:
		}
		if err := cp.Client.Get(ctx, key, &lease); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	}); err != nil {
		return fmt.Errorf("virt-controller did not take its lease %s: %w (log: %s)", key, err, log.path)
	}
	return nil
}

// RestartVirtControllerIfExited starts virt-controller again if it has
// exited, as a kubelet restarts a crashed container: it exits when it
// loses its lease, for example while the API server is down longer than
// its renew deadline. It reports whether it started it again.
// A start that failed before the process ran (the API server down) is
// tried again too.
func (cp *ControlPlane) RestartVirtControllerIfExited(ctx context.Context) (bool, error) {
	p := cp.virtController
	if p == nil {
		if !cp.virtControllerWanted {
			return false, nil
		}
		return true, cp.StartVirtController(ctx)
	}
	select {
	case err := <-p.done:
		p.done <- err
	default:
		return false, nil
	}
	cp.virtController = nil
	return true, cp.StartVirtController(ctx)
}

// ensureKubeVirtCR creates namespace kubevirt and the KubeVirt CR with
// status.phase Deployed (through the status subresource), as virt-operator
// would have left it.
func (cp *ControlPlane) ensureKubeVirtCR(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KubeVirtNamespace}}
	if err := cp.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", KubeVirtNamespace, err)
	}
	kv := &kubevirtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Namespace: KubeVirtNamespace, Name: "kubevirt"},
		Spec: kubevirtv1.KubeVirtSpec{Configuration: kubevirtv1.KubeVirtConfiguration{
			DeveloperConfiguration: &kubevirtv1.DeveloperConfiguration{FeatureGates: []string{}},
		}},
	}
	if cp.lab {
		// Real guests: QEMU's emulation where this machine has no working
		// KVM (kvmWorks).
		kv.Spec.Configuration.DeveloperConfiguration.UseEmulation = !kvmWorks()
	}
	if err := cp.Client.Create(ctx, kv); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the KubeVirt CR: %w", err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Deployed"}}`))
	if err := cp.Client.Status().Patch(ctx, kv, patch); err != nil {
		return fmt.Errorf("setting the KubeVirt CR's phase: %w", err)
	}
	return nil
}

func (p *virtControllerProc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// EnsureSchedulableNode creates a Node the real virt-controller counts as
// schedulable (label kubevirt.io/schedulable=true, condition Ready), as
// virt-handler and the kubelet would have left it. Nothing heartbeats it:
// without virt-handler's heartbeat annotation virt-controller treats the
// node as responsive.
func (cp *ControlPlane) EnsureSchedulableNode(ctx context.Context, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		corev1.LabelHostname: name, SchedulableLabel: "true",
	}}}
	if err := cp.Client.Create(ctx, node); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return fmt.Errorf("reading node %s: %w", name, err)
		}
	}
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	if err := cp.Client.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("marking node %s Ready: %w", name, err)
	}
	return nil
}

// HasVirtController reports whether the real virt-controller runs here.
func (cp *ControlPlane) HasVirtController() bool { return cp.virtController != nil }

// ExplicitVMTemplate is VMTemplate with what virt-api's defaulting webhook
// would add, since nothing defaults a VM here: machine type q35, guest
// memory and its request, and a firmware UUID (without one, v1.7's VM
// controller patches a UUID in after the start and flags the VM
// RestartRequired).
func ExplicitVMTemplate(uuid types.UID, networks ...VMNetwork) kubevirtv1.VirtualMachineInstanceSpec {
	spec := VMTemplate(networks...)
	mem := resource.MustParse("128Mi")
	spec.Domain.Machine = &kubevirtv1.Machine{Type: "q35"}
	spec.Domain.Memory = &kubevirtv1.Memory{Guest: &mem}
	spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: mem}
	spec.Domain.Firmware = &kubevirtv1.Firmware{UUID: uuid}
	return spec
}
