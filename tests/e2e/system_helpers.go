// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/macaddr"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// BridgeNAD creates a NAD for a bridge network (a new host bridge, deleted
// when t ends) delegating IPAM to ipkeeper with the given ipam keys.
func (c *Cluster) BridgeNAD(t testing.TB, namespace, name, network string, persistent bool, ipam map[string]any) {
	t.Helper()
	bridge := "ipkc" + UniqueSuffix(8)
	DeleteHostLinkOnCleanup(t, bridge)
	ipam["type"] = "ipkeeper"
	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": network, "type": "bridge", "bridge": bridge,
		"allowPersistentIPs": persistent, "ipam": ipam,
	})
	if err != nil {
		t.Fatal(err)
	}
	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: string(conf)},
	}
	if err := c.CP.Client.Create(context.Background(), nad); err != nil {
		t.Fatalf("creating NAD %s/%s: %v", namespace, name, err)
	}
}

// CreatePod creates a pod bound to node, as the scheduler would have,
// with networks (when not empty) as its Multus networks annotation. The
// tests or the cluster's kubelet then play the runtime for it.
func (c *Cluster) CreatePod(t testing.TB, namespace, name, node, networks string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if networks != "" {
		pod.Annotations = map[string]string{multus.Annotation: networks}
	}
	if err := c.CP.Client.Create(context.Background(), pod); err != nil {
		t.Fatalf("creating pod %s/%s: %v", namespace, name, err)
	}
	return pod
}

// PlainPod creates an ordinary pod on node attached to nad as net1.
func (c *Cluster) PlainPod(t testing.TB, namespace, name, node, nad string) *corev1.Pod {
	t.Helper()
	return c.CreatePod(t, namespace, name, node, fmt.Sprintf(`[{"name":%q,"interface":"net1"}]`, nad))
}

// MustRun is RunPod that fails t.
func (c *Cluster) MustRun(t testing.TB, pod *corev1.Pod) *Sandbox {
	t.Helper()
	s, err := c.RunPod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// MustAddr is Addr that fails t.
func (s *Sandbox) MustAddr(t testing.TB, ifname string) netip.Prefix {
	t.Helper()
	p, err := s.Addr(context.Background(), ifname)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// MustMAC returns the MAC of ifname in the sandbox.
func (s *Sandbox) MustMAC(t testing.TB, ifname string) string {
	t.Helper()
	mac, err := s.NetNS.MAC(context.Background(), ifname)
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// WaitClaimIPs waits until the claim exists with status.ips set.
func (c *Cluster) WaitClaimIPs(t testing.TB, namespace, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := framework.Eventually(context.Background(), 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := c.CP.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &claim)
		return err == nil && len(claim.Status.IPs) > 0, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("IPAMClaim %s/%s never got addresses: %v", namespace, name, err)
	}
	return &claim
}

// WaitClaimMAC waits until the claim's MAC label (macaddr.Label) says mac,
// as `kubectl get ipamclaims -L ipkeeper.io/mac` shows it.
func (c *Cluster) WaitClaimMAC(t testing.TB, namespace, name, mac string) {
	t.Helper()
	hw, err := net.ParseMAC(mac)
	if err != nil {
		t.Fatal(err)
	}
	want := macaddr.LabelValue(hw)
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := framework.Eventually(context.Background(), 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := c.CP.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &claim)
		return err == nil && claim.Labels[macaddr.Label] == want, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("IPAMClaim %s/%s: label %s is %q, want %q: %v", namespace, name, macaddr.Label, claim.Labels[macaddr.Label], want, err)
	}
}

// WaitClaim waits until the claim exists.
func (c *Cluster) WaitClaim(t testing.TB, namespace, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := framework.Eventually(context.Background(), 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := c.CP.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &claim)
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("IPAMClaim %s/%s never appeared: %v", namespace, name, err)
	}
	return &claim
}

// WaitGone waits until obj no longer exists.
func (c *Cluster) WaitGone(t testing.TB, obj client.Object) {
	t.Helper()
	if err := framework.WaitGone(context.Background(), c.CP.Client, obj, 90*time.Second); err != nil {
		t.Fatal(err)
	}
}

// podOf reads a pod live, as the kubelet sees it when it runs the sandbox.
func (c *Cluster) podOf(t testing.TB, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	var live corev1.Pod
	if err := c.CP.Client.Get(context.Background(), client.ObjectKeyFromObject(p), &live); err != nil {
		t.Fatal(err)
	}
	return &live
}

// StartVM starts vm through the real virt-controller, runs its launcher
// pod on node and returns the VMI and the launcher's sandbox.
func (c *Cluster) StartVM(t testing.TB, vm *kubevirtv1.VirtualMachine, node string) (*kubevirtv1.VirtualMachineInstance, *Sandbox) {
	t.Helper()
	vmi, pod, err := c.KV.Start(context.Background(), vm, node)
	if err != nil {
		t.Fatal(err)
	}
	return vmi, c.MustSandbox(t, pod)
}

// CreateVM creates a stopped VM through the API, as a user does.
func (c *Cluster) CreateVM(t testing.TB, namespace, name string, networks ...framework.VMNetwork) *kubevirtv1.VirtualMachine {
	t.Helper()
	vm, err := c.KV.CreateVM(context.Background(), namespace, name, networks...)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// MustSandbox is the running sandbox of pod.
func (c *Cluster) MustSandbox(t testing.TB, pod *corev1.Pod) *Sandbox {
	t.Helper()
	s := c.Sandbox(pod.UID)
	if s == nil {
		t.Fatalf("pod %s/%s has no running sandbox", pod.Namespace, pod.Name)
	}
	return s
}

// repoFile is a path in the checkout.
func repoFile(t testing.TB, rel string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root + "/" + rel
}
