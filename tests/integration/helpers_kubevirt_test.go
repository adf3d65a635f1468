// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// VMs here are run by KubeVirt's real virt-controller, which the shared
// control plane runs: the tests write what a user writes (VMs, runStrategy,
// migrations, NIC hotplug), virt-controller writes VMIs and launcher pods,
// and framework.KubeVirt simulates only the scheduler, the kubelet, Multus'
// network-status and virt-handler. The real ipkeeper-controller
// (in-process), its webhook (registered with the real API server) and
// kube-controller-manager's garbage collector react to them.

type kvEnv struct {
	ns   string
	kv   *framework.KubeVirt
	ctrl *framework.Controller
}

func startKubeVirtEnv(t *testing.T, tweaks ...func(*manager.Options)) *kvEnv {
	t.Helper()
	ns := cp.NewNamespace(t, "kv")
	env := &kvEnv{ns: ns, kv: newKubeVirt(t)}
	env.ctrl = cp.StartController(t, ns, tweaks...)
	t.Cleanup(func() { env.settle(t) })
	return env
}

// settle runs before the test's controller stops and its namespace goes
// (cleanups run last first): the simulated nodes stop the test's VMs, the
// VMs are deleted, and their claims and the claims' reservations are
// released while the controller still runs. Otherwise that release would
// happen during a later test, whose controller counts it.
func (e *kvEnv) settle(t testing.TB) {
	ctx := context.Background()
	if err := e.kv.StopAll(ctx, e.ns); err != nil {
		t.Logf("stopping the VMs of %s: %v", e.ns, err)
	}
	var vms kubevirtv1.VirtualMachineList
	if err := cp.Client.List(ctx, &vms, client.InNamespace(e.ns)); err != nil {
		t.Logf("listing the VMs of %s: %v", e.ns, err)
	}
	for i := range vms.Items {
		_ = cp.Client.Delete(ctx, &vms.Items[i])
	}
	// A pod of the test's own that references a claim (an impostor, a
	// copied launcher) keeps that claim in use; no kubelet finishes a
	// graceful deletion here, so such pods are removed at once.
	if err := cp.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(e.ns), client.GracePeriodSeconds(0)); err != nil {
		t.Logf("deleting the pods of %s: %v", e.ns, err)
	}
	// Best effort: a test may keep a claim on purpose.
	if err := framework.Eventually(ctx, 10*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		var claims ipamclaimsv1alpha1.IPAMClaimList
		if err := cp.Client.List(ctx, &claims, client.InNamespace(e.ns)); err != nil {
			return false, err
		}
		for _, c := range claims.Items {
			if metav1.GetControllerOf(&c) != nil {
				return false, nil // a VM's claim not released yet
			}
		}
		var list ipkeeperv1alpha1.IPReservationList
		if err := cp.Client.List(ctx, &list); err != nil {
			return false, err
		}
		for _, r := range list.Items {
			if r.Spec.Owner.Namespace != e.ns || r.Spec.Owner.Kind != ipkeeperv1alpha1.OwnerIPAMClaim || r.Spec.Released() {
				continue // not the test's, or released already (cooling down)
			}
			err := cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: r.Spec.Owner.Name}, &ipamclaimsv1alpha1.IPAMClaim{})
			if apierrors.IsNotFound(err) {
				return false, nil // its claim is gone: the collector has not released it yet
			}
		}
		return true, nil
	}); err != nil {
		t.Logf("the VMs of %s did not release everything: %v", e.ns, err)
	}
}

// newKubeVirt is the VM driver on the shared control plane; it names in
// the test's output what it simulates.
func newKubeVirt(t testing.TB) *framework.KubeVirt {
	t.Helper()
	kv := &framework.KubeVirt{C: cp.Client}
	t.Log(kv.Simulated())
	return kv
}

func (e *kvEnv) nad(t testing.TB, name, config string) {
	t.Helper()
	n := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: config},
	}
	if err := cp.Client.Create(context.Background(), n); err != nil {
		t.Fatalf("creating NAD %s: %v", name, err)
	}
}

// bridgeNAD is a bridge network delegating to ipkeeper; persistent sets
// allowPersistentIPs. Each test's network is a separate L2 network reusing
// one range, which ipam.network_name declares.
func bridgeNAD(network string, persistent bool) string {
	return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","bridge":"br-%s","allowPersistentIPs":%t,"ipam":{"type":"ipkeeper","range":"10.77.0.0/24","network_name":%q}}`, network, network, persistent, network)
}

func (e *kvEnv) claim(ctx context.Context, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	var c ipamclaimsv1alpha1.IPAMClaim
	err := cp.Client.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &c)
	return &c, err
}

// waitClaim waits until the claim exists and returns it.
func (e *kvEnv) waitClaim(t testing.TB, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var c *ipamclaimsv1alpha1.IPAMClaim
	if err := framework.Eventually(context.Background(), 90*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		var err error
		c, err = e.claim(ctx, name)
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("IPAMClaim %s/%s never appeared: %v", e.ns, name, err)
	}
	return c
}

// waitNoClaims waits until the namespace has no IPAMClaim left.
func (e *kvEnv) waitNoClaims(t testing.TB) {
	t.Helper()
	var left []string
	if err := framework.Eventually(context.Background(), 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		var list ipamclaimsv1alpha1.IPAMClaimList
		if err := cp.Client.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
			return false, err
		}
		left = left[:0]
		for _, c := range list.Items {
			left = append(left, fmt.Sprintf("%s (finalizers %v, deleting %v)", c.Name, c.Finalizers, c.DeletionTimestamp != nil))
		}
		return len(list.Items) == 0, nil
	}); err != nil {
		t.Fatalf("claims left in %s: %v: %v", e.ns, left, err)
	}
}

// waitGone waits until obj no longer exists.
func waitGone(t testing.TB, obj client.Object) {
	t.Helper()
	if err := framework.WaitGone(context.Background(), cp.Client, obj, 60*time.Second); err != nil {
		t.Fatal(err)
	}
}

// refs returns the claim reference per pod interface of a launcher pod, read live.
func refs(t testing.TB, pod *corev1.Pod) map[string]string {
	t.Helper()
	var live corev1.Pod
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &live); err != nil {
		t.Fatalf("reading pod: %v", err)
	}
	elems, err := multus.ParseElements(live.Annotations[multus.Annotation], live.Namespace)
	if err != nil {
		t.Fatalf("pod %s networks annotation: %v", live.Name, err)
	}
	out := map[string]string{}
	for _, e := range elems {
		out[e.Interface] = e.ClaimRef
	}
	return out
}

// waitEvent waits for an event on obj with reason whose message contains want.
func waitEvent(t testing.TB, obj client.Object, reason, want string) {
	t.Helper()
	var seen []string
	if err := framework.Eventually(context.Background(), 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := cp.Client.List(ctx, &events, client.InNamespace(obj.GetNamespace())); err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, ev := range events.Items {
			if ev.InvolvedObject.UID != obj.GetUID() {
				continue
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
			if ev.Reason == reason && strings.Contains(ev.Message, want) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no %s event containing %q on %s; events: %q", reason, want, obj.GetName(), seen)
	}
}

// controllerCounter reads a counter from the in-process controller's
// (process-wide) registry; label "" sums every series.
func controllerCounter(name, label, value string) float64 {
	return framework.CounterWhere(metrics.Registry, name, label, value)
}

// waitReconciled waits until controller has finished at least n more
// reconciles than before: proof that an object was looked at, for tests that
// assert something did not happen.
func waitReconciled(t testing.TB, controllerName string, before float64, n int) {
	t.Helper()
	if err := framework.Eventually(context.Background(), 30*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) {
		return reconciles(controllerName) >= before+float64(n), nil
	}); err != nil {
		t.Fatalf("controller %s did not reconcile: %v", controllerName, err)
	}
}

func reconciles(controllerName string) float64 {
	return controllerCounter("controller_runtime_reconcile_total", "controller", controllerName)
}

func controllerRef(t testing.TB, c *ipamclaimsv1alpha1.IPAMClaim, owner client.Object, kind string) {
	t.Helper()
	ref := metav1.GetControllerOf(c)
	if ref == nil || ref.UID != owner.GetUID() || ref.Kind != kind || ref.APIVersion != kubevirtv1.SchemeGroupVersion.String() ||
		ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Fatalf("claim %s controller reference = %+v, want %s %s (uid %s) with blockOwnerDeletion", c.Name, ref, kind, owner.GetName(), owner.GetUID())
	}
}

func newFlags() *flag.FlagSet { return flag.NewFlagSet("test", flag.ContinueOnError) }

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// assertKeptAfterReconcile makes the claim release controller look at
// claim again (through the pod that references it) and checks the claim
// survived that look.
func assertKeptAfterReconcile(t *testing.T, e *kvEnv, pod *corev1.Pod, claim string) {
	t.Helper()
	before := reconciles("claim-release")
	if err := framework.Touch(context.Background(), cp.Client, pod); err != nil {
		t.Fatal(err)
	}
	waitReconciled(t, "claim-release", before, 1)
	c, err := e.claim(context.Background(), claim)
	if err != nil {
		t.Fatalf("claim %s released while pod %s still uses it: %v", claim, pod.Name, err)
	}
	if !slices.Contains(c.Finalizers, claims.Finalizer) {
		t.Fatalf("claim %s lost its finalizer while pod %s still uses it", claim, pod.Name)
	}
}

// waitFor waits up to a minute for cond, failing the test with what.
func waitFor(t testing.TB, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := framework.Eventually(context.Background(), time.Minute, 100*time.Millisecond, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// runThroughAgents makes the simulated kubelet run each launcher's CNI ADD
// through the real ipkeeper agent of its node, with the config of the NAD
// its networks annotation names (confOf), for the interfaces being
// attached (a hotplug attaches only the new one); added, when set, is told
// what each pod's ADDs returned.
func runThroughAgents(kv *framework.KubeVirt, agents map[string]*framework.Agent, confOf func(nad string) json.RawMessage, added func(pod *corev1.Pod, ips []string)) {
	kv.Kubelet.Run = func(ctx context.Context, pod *corev1.Pod, ifaces []string) (map[string][]string, error) {
		elems, err := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
		if err != nil {
			return nil, err
		}
		out := map[string][]string{}
		var all []string
		for _, el := range elems {
			if !slices.Contains(ifaces, el.Interface) {
				continue
			}
			res, err := agents[pod.Spec.NodeName].Add(ctx, pod, el.Interface, confOf(el.Name))
			if err != nil {
				return nil, fmt.Errorf("ADD %s/%s %s: %w", pod.Namespace, pod.Name, el.Interface, err)
			}
			for _, ip := range res.IPs {
				out[el.Interface] = append(out[el.Interface], ip.Address.IP.String())
				all = append(all, ip.Address.IP.String())
			}
		}
		if added != nil {
			added(pod, all)
		}
		return out, nil
	}
}
