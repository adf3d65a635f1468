// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/webhook"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// An operator (HCO) reverting the KubeVirt CR drops the PersistentIPs
// gate while VMs use their claims; ipkeeper-controller runs as the tests
// run it (--require-kubevirt-feature-gate=true, the default). The claim
// of a VM made while the gate was on stays as it is, with its addresses,
// and its launcher keeps them; a VM made while the gate is off gets no
// claim and one Warning event that says why and what to do (a VM without
// a persistent-IP network, or with its claims, gets none); the gate back
// on, it gets its claim, and the first VM's next launcher gets its old
// address. Each launcher's CNI ADD goes to the real ipkeeper agent of its
// node.
func TestGateRemovedKeepsClaimsAndTellsNewVMs(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	t.Cleanup(func() { _ = e.kv.SetFeatureGate(context.Background(), true) })
	suffix := e.ns[len(e.ns)-5:]
	confs := map[string]string{"blue": bridgeNAD("gate-blue-"+suffix, true), "plain": bridgeNAD("gate-plain-"+suffix, false)}
	for nad, conf := range confs {
		e.nad(t, nad, conf)
	}
	node := "node-gate-" + suffix
	agent := cp.StartAgent(t, node)
	var mu sync.Mutex
	added := map[string][]string{} // "<pod>/<interface>" -> addresses its ADD got
	e.kv.Kubelet.Run = func(ctx context.Context, pod *corev1.Pod, ifaces []string) (map[string][]string, error) {
		elems, err := multus.ParseElements(pod.Annotations[multus.Annotation], pod.Namespace)
		if err != nil {
			return nil, err
		}
		out := map[string][]string{}
		for _, el := range elems {
			if !slices.Contains(ifaces, el.Interface) {
				continue
			}
			res, err := agent.Add(ctx, pod, el.Interface, json.RawMessage(confs[el.Name]))
			if err != nil {
				return nil, fmt.Errorf("ADD %s/%s %s: %w", pod.Name, el.Name, el.Interface, err)
			}
			for _, ip := range res.IPs {
				out[el.Interface] = append(out[el.Interface], ip.Address.IP.String())
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for iface, ips := range out {
			added[pod.Name+"/"+iface] = ips
		}
		return out, nil
	}
	addedTo := func(pod *corev1.Pod) []string {
		mu.Lock()
		defer mu.Unlock()
		return added[pod.Name+"/"+kubevirt.PodInterfaceName("blue")]
	}
	blue := kubevirt.PodInterfaceName("blue")
	warnings := func() float64 {
		return controllerCounter("ipkeeper_controller_claims_persistent_ips_disabled_total", "", "")
	}

	// Gate on: VM A gets its claim, the claim its address, the launcher
	// the claim's address.
	vmA, err := e.kv.CreateVM(ctx, e.ns, "vm-a", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	claimA := waitFilled(t, e.ns, "vm-a.blue")
	addrA := bareIP(t, claimA.Status.IPs[0])
	_, launcherA, err := e.kv.Start(ctx, vmA, node)
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, launcherA)[blue]; got != "vm-a.blue" {
		t.Fatalf("gate on: VM A's launcher references %q, want vm-a.blue", got)
	}
	if got := addedTo(launcherA); !slices.Equal(got, []string{addrA}) {
		t.Fatalf("gate on: VM A's launcher got %v, want its claim's %s", got, addrA)
	}

	// The gate removed from the KubeVirt CR, as HCO does when it reverts
	// a direct edit.
	var kvCR kubevirtv1.KubeVirt
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: framework.KubeVirtNamespace, Name: "kubevirt"}, &kvCR); err != nil {
		t.Fatal(err)
	}
	told := gateNoticeCount(t, &kvCR)
	if err := e.kv.SetFeatureGate(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := cp.WaitWebhookReferences(ctx, e.ctrl.WebhookConfig, webhook.ReferencesExisting); err != nil {
		t.Fatal(err)
	}
	// The KubeVirt CR is told what the gate's absence means and what to
	// do, once, before any VM is made (claims.GateNotice).
	waitEvent(t, &kvCR, string(claims.ReasonGateOff), claims.GateOffMessage)
	before := warnings()
	vmB, err := e.kv.CreateVM(ctx, e.ns, "vm-b", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	vmC, err := e.kv.CreateVM(ctx, e.ns, "vm-c", framework.VMNetwork{Name: "plain", NAD: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, vmB, string(claims.ReasonPersistentIPsDisabled), `network "blue" allows persistent IPs but gets no IPAMClaim: `+
		`the PersistentIPs feature gate is not listed in the KubeVirt CR (spec.configuration.developerConfiguration.featureGates)`)
	msg := gateOffEvents(t, vmB)[0].Message
	if !containsAll(msg, "this VirtualMachine's launcher pods get addresses that do not persist",
		"--require-kubevirt-feature-gate=false", "kubevirt.kubevirt.io/jsonpatch", "docs/kubevirt.md") {
		t.Errorf("event message %q does not say what to do", msg)
	}
	// (VMs other tests left behind may be counted too: at least one.)
	if told := warnings(); told < before+1 {
		t.Errorf("ipkeeper_controller_claims_persistent_ips_disabled_total went from %v to %v, want it counted", before, told)
	}
	// Every VM looked at again with the gate off (the cache that
	// reconciled VM B already shows it off), VM B twice more: VM B is not
	// told again (checked below, once the events are all in).
	reconciled := reconciles("vm-claims")
	for _, vm := range []*kubevirtv1.VirtualMachine{vmA, vmB, vmC, vmB} {
		if err := framework.Touch(ctx, cp.Client, vm); err != nil {
			t.Fatal(err)
		}
	}
	waitReconciled(t, "vm-claims", reconciled, 4)
	if _, err := e.claim(ctx, "vm-b.blue"); !apierrors.IsNotFound(err) {
		t.Fatalf("gate off: VM B's claim: %v, want none", err)
	}

	// VM A's claim is as it was: same object, same addresses, not being
	// deleted, its reservation held; the claim release controller looks at
	// it (through the running launcher) and keeps it; and the launcher,
	// which references it, still gets its address from the agent.
	after, err := e.claim(ctx, "vm-a.blue")
	if err != nil {
		t.Fatalf("gate off: VM A's claim: %v", err)
	}
	if after.UID != claimA.UID || after.DeletionTimestamp != nil || !slices.Equal(after.Status.IPs, claimA.Status.IPs) ||
		!slices.Contains(after.Finalizers, claims.Finalizer) {
		t.Fatalf("gate off: VM A's claim changed: uid %s (was %s), deleting %v, ips %v (were %v), finalizers %v",
			after.UID, claimA.UID, after.DeletionTimestamp != nil, after.Status.IPs, claimA.Status.IPs, after.Finalizers)
	}
	controllerRef(t, after, vmA, "VirtualMachine")
	assertKeptAfterReconcile(t, e, launcherA, "vm-a.blue")
	if held := claimReservations(t, "vm-a.blue", e.ns); !slices.Equal(held, []string{addrA}) {
		t.Fatalf("gate off: reservations of vm-a.blue = %v, want [%s]", held, addrA)
	}
	var live corev1.Pod
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(launcherA), &live); err != nil {
		t.Fatal(err)
	}
	res, err := agent.Add(ctx, &live, blue, json.RawMessage(confs["blue"]))
	if err != nil {
		t.Fatalf("gate off: ADD for VM A's launcher: %v", err)
	}
	if len(res.IPs) != 1 || res.IPs[0].Address.IP.String() != addrA {
		t.Fatalf("gate off: VM A's launcher got %v, want its claim's %s", res.IPs, addrA)
	}
	// VM A restarted with the gate off: its new launcher still references
	// the claim (the webhook references claims that exist) and gets the
	// claim's address.
	if err := e.kv.Stop(ctx, vmA); err != nil {
		t.Fatal(err)
	}
	_, restarted, err := e.kv.Start(ctx, vmA, node)
	if err != nil {
		t.Fatalf("gate off: restarting VM A: %v", err)
	}
	if got := refs(t, restarted)[kubevirt.PodInterfaceName("blue")]; got != "vm-a.blue" {
		t.Fatalf("gate off: VM A's new launcher references %q, want its claim vm-a.blue", got)
	}
	if res, err = agent.Add(ctx, restarted, blue, json.RawMessage(confs["blue"])); err != nil {
		t.Fatalf("gate off: ADD for VM A's new launcher: %v", err)
	}
	if len(res.IPs) != 1 || res.IPs[0].Address.IP.String() != addrA {
		t.Fatalf("gate off: VM A's new launcher got %v, want its claim's %s", res.IPs, addrA)
	}

	// The gate back on: VM B gets its claim at once (no change to it).
	if err := e.kv.SetFeatureGate(ctx, true); err != nil {
		t.Fatal(err)
	}
	claimB := waitFilled(t, e.ns, "vm-b.blue")
	// Told once while the gate was off, however often the CR was looked at
	// (the recorder sends events in the background: wait for the first).
	var n int32
	_ = framework.Eventually(ctx, 10*time.Second, 100*time.Millisecond, func(context.Context) (bool, error) {
		n = gateNoticeCount(t, &kvCR)
		return n > told, nil
	})
	if n != told+1 {
		t.Errorf("the KubeVirt CR was told %d times that the gate is off, want once (%d before)", n-told, told)
	}
	controllerRef(t, claimB, vmB, "VirtualMachine")
	if bareIP(t, claimB.Status.IPs[0]) == addrA {
		t.Fatalf("VM B's claim got VM A's address %s", addrA)
	}
	// Events reach the API server in the order they were recorded: once
	// this one is there, any repeat of the warning is too.
	waitEvent(t, vmB, string(claims.ReasonClaimCreated), "vm-b.blue")
	if got := gateOffEvents(t, vmB); len(got) != 1 || got[0].Count > 1 || got[0].Type != corev1.EventTypeWarning {
		var seen []string
		for _, ev := range got {
			seen = append(seen, fmt.Sprintf("%s, count %d", ev.Type, ev.Count))
		}
		t.Errorf("VM B: %s events %v, want one Warning, count 1", claims.ReasonPersistentIPsDisabled, seen)
	}
	// VM A has its claim; VM C has no network that allows persistent IPs.
	for _, vm := range []*kubevirtv1.VirtualMachine{vmA, vmC} {
		if got := gateOffEvents(t, vm); len(got) != 0 {
			t.Errorf("%s lacks no claim, yet was told: %q", vm.Name, got[0].Message)
		}
	}

	// VM A's next launcher references its claim and gets its old address.
	if err := cp.WaitWebhookReferences(ctx, e.ctrl.WebhookConfig, webhook.ReferencesAll); err != nil {
		t.Fatal(err)
	}
	if err := e.kv.Stop(ctx, vmA); err != nil {
		t.Fatal(err)
	}
	_, again, err := e.kv.Start(ctx, vmA, node)
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, again)[blue]; got != "vm-a.blue" {
		t.Fatalf("VM A restarted: launcher references %q, want vm-a.blue", got)
	}
	if got := addedTo(again); !slices.Equal(got, []string{addrA}) {
		t.Fatalf("VM A restarted: launcher got %v, want its old %s", got, addrA)
	}
}

// bareIP drops the prefix length of a claim's address.
func bareIP(t *testing.T, cidr string) string {
	t.Helper()
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		t.Fatalf("claim address %q: %v", cidr, err)
	}
	return p.Addr().String()
}

// claimReservations lists the addresses reserved for a claim.
func claimReservations(t *testing.T, claim, ns string) []string {
	t.Helper()
	var list ipkeeperv1alpha1.IPReservationList
	if err := cp.Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range list.Items {
		if r.Spec.Owner.Kind == ipkeeperv1alpha1.OwnerIPAMClaim && r.Spec.Owner.Namespace == ns && r.Spec.Owner.Name == claim {
			out = append(out, r.Spec.IP)
		}
	}
	return out
}

// gateOffEvents lists the PersistentIPsDisabled events on a VM.
func gateOffEvents(t *testing.T, vm *kubevirtv1.VirtualMachine) []corev1.Event {
	t.Helper()
	var events corev1.EventList
	if err := cp.Client.List(context.Background(), &events, client.InNamespace(vm.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == vm.UID && ev.Reason == string(claims.ReasonPersistentIPsDisabled) {
			out = append(out, ev)
		}
	}
	return out
}

// gateNoticeCount is how many times the KubeVirt CR was told the gate is
// off: an event's count grows when the recorder aggregates a repeat.
func gateNoticeCount(t *testing.T, kv *kubevirtv1.KubeVirt) int32 {
	t.Helper()
	var events corev1.EventList
	if err := cp.Client.List(context.Background(), &events, client.InNamespace(kv.Namespace)); err != nil {
		t.Fatal(err)
	}
	var n int32
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == kv.UID && ev.Reason == string(claims.ReasonGateOff) {
			n += max(ev.Count, 1)
		}
	}
	return n
}
