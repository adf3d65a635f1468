// SPDX-License-Identifier: Apache-2.0

package nodes

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Lab is the cluster the lane's scenarios share: the control plane, two
// real nodes, Multus and ipkeeper installed as they ship.
type Lab struct {
	cp    *framework.ControlPlane
	nodes []*framework.RealNode
}

// lab is set by TestRealNodes for its subtests.
var lab *Lab

// labPodTimeout bounds a pod's start on a real node.
const labPodTimeout = 2 * time.Minute

// TestRealNodes starts the lab once and runs every scenario in it.
func TestRealNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lab = startLab(ctx, t)
	t.Run("PodOnIpkeeperNetwork", testPodOnIpkeeperNetwork)
	// The VM scenarios side by side: their guests idle once booted, and
	// each has its own namespace, network and pool. The pods' runs alone
	// before them: the migration's deletes ipkeeper's pods, and the pods'
	// CHECK asks an agent.
	t.Run("VMs", func(t *testing.T) {
		t.Run("VMOnIpkeeperNetwork", parallel(testVMOnIpkeeperNetwork))
		t.Run("VMLiveMigration", parallel(testVMLiveMigration))
		t.Run("VMGuestNetworkConfig", parallel(testVMGuestNetworkConfig))
	})
}

// startLab starts the control plane, two real nodes, Multus, ipkeeper
// installed as it ships and KubeVirt's node side, with the persistent IPs
// feature gate on; tb's cleanup stops them all (after its own cleanups
// registered later, such as namespaces', have run).
func startLab(ctx context.Context, tb testing.TB) *Lab {
	tb.Helper()
	start := time.Now()
	cp, err := framework.Start(ctx, framework.Options{Lab: true, VirtController: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			cp.DumpLogs(os.Stderr, 40)
		}
		if err := cp.Stop(); err != nil {
			tb.Errorf("stopping the control plane: %v", err)
		}
	})
	l := &Lab{cp: cp}
	l.nodes = cp.StartRealNodes(ctx, tb, 2)
	tb.Logf("real nodes %s and %s Ready after %s (simulated: nothing of a node)",
		l.nodes[0].Name, l.nodes[1].Name, time.Since(start).Round(time.Second))
	cp.InstallMultus(ctx, tb, l.nodes)
	cp.InstallIpkeeper(ctx, tb, l.nodes)
	tb.Logf("Multus and ipkeeper running on both nodes after %s", time.Since(start).Round(time.Second))
	cp.InstallKubeVirtNode(ctx, tb, l.nodes)
	if err := framework.SetPersistentIPsGate(ctx, cp.Client, true); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("KubeVirt's virt-handler running on both nodes after %s", time.Since(start).Round(time.Second))
	return l
}

func parallel(f func(*testing.T)) func(*testing.T) {
	return func(t *testing.T) {
		t.Parallel()
		f(t)
	}
}

// Namespace creates a namespace for one scenario, deleted when it ends.
func (l *Lab) Namespace(_ context.Context, t testing.TB, prefix string) string {
	t.Helper()
	return l.cp.NewNamespace(t, "lab-"+prefix)
}

// NAD creates a NetworkAttachmentDefinition and waits until the IPPool
// of its network (the controller makes an inline network's) is Ready.
//
// A VM created at once would still get its claim's MAC at its first start:
// the webhook refuses a launcher whose claim of an ipkeeper network is
// pending (its inline pool still being made, say) until the claim is
// filled, and virt-controller creates the pod again (docs/kubevirt.md, The
// MAC address). The lane once saw such a VM start first with a random MAC.
// Waiting here spares the scenarios those refusals and virt-controller's
// backoff after them, which would count against their timeouts.
func (l *Lab) NAD(ctx context.Context, t testing.TB, ns, name, config string) {
	t.Helper()
	nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}}
	if err := l.cp.Client.Create(ctx, nad); err != nil {
		t.Fatalf("creating NAD %s/%s: %v", ns, name, err)
	}
	var conf struct {
		Name string `json:"name"`
		IPAM struct {
			Type string `json:"type"`
			Pool string `json:"pool"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal([]byte(config), &conf); err != nil {
		t.Fatalf("NAD %s/%s: %v", ns, name, err)
	}
	if conf.IPAM.Type != "ipkeeper" {
		return // another IPAM (host-local, say): no pool to wait for
	}
	pool := conf.IPAM.Pool
	if pool == "" {
		pool = naming.InlinePool(conf.Name)
	}
	var p ipkv1.IPPool
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := l.cp.Client.Get(ctx, client.ObjectKey{Name: pool}, &p); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(p.Status.Conditions, ipkv1.PoolReady), nil
	}); err != nil {
		t.Fatalf("IPPool %s of NAD %s/%s not Ready after a minute: %+v", pool, ns, name, p.Status.Conditions)
	}
}

// Pod runs a busybox pod on node with the networks annotation and waits
// until it is Ready.
func (l *Lab) Pod(ctx context.Context, t *testing.T, ns, name, node string, networks ...string) *corev1.Pod {
	t.Helper()
	return l.PodRunning(ctx, t, ns, name, node, []string{"sleep", "3600"}, networks...)
}

// PodRunning is Pod running command.
func (l *Lab) PodRunning(ctx context.Context, t *testing.T, ns, name, node string, command []string, networks ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{"k8s.v1.cni.cncf.io/networks": strings.Join(networks, ",")}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: node},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "c", Image: framework.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: command}},
		},
	}
	if err := l.cp.Client.Create(ctx, pod); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, labPodTimeout, true, func(ctx context.Context) (bool, error) {
		return l.PodReady(ctx, t, pod), nil
	}); err != nil {
		out, _ := l.cp.Kubectl(ctx, nil, "describe", "pod", "-n", ns, name)
		t.Fatalf("pod %s/%s not Ready after %s:\n%s", ns, name, labPodTimeout, out)
	}
	return pod
}

// PodReady refreshes pod and reports whether it is Ready.
func (l *Lab) PodReady(ctx context.Context, t *testing.T, pod *corev1.Pod) bool {
	if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ExecIn runs a command in the pod's container through the API server and
// its node's kubelet (kubectl exec).
func (l *Lab) ExecIn(ctx context.Context, pod *corev1.Pod, args ...string) ([]byte, error) {
	return l.cp.Kubectl(ctx, nil, append([]string{"exec", "-n", pod.Namespace, pod.Name, "--"}, args...)...)
}

// InterfaceAddress is the IPv4 address the pod itself shows on iface.
func (l *Lab) InterfaceAddress(ctx context.Context, t *testing.T, pod *corev1.Pod, iface string) string {
	t.Helper()
	out, err := l.ExecIn(ctx, pod, "ip", "-4", "-o", "addr", "show", "dev", iface)
	if err != nil {
		t.Fatalf("reading %s in pod %s: %v", iface, pod.Name, err)
	}
	f := strings.Fields(string(out))
	for i := range f {
		if f[i] == "inet" && i+1 < len(f) {
			addr, _, _ := strings.Cut(f[i+1], "/")
			return addr
		}
	}
	t.Fatalf("pod %s has no IPv4 address on %s: %s", pod.Name, iface, out)
	return ""
}

// ReservationsOf lists the reservations whose owner is obj, a pod or an
// IPAMClaim (this UID).
func (l *Lab) ReservationsOf(ctx context.Context, t *testing.T, obj client.Object) []ipkv1.IPReservation {
	t.Helper()
	kind := ipkv1.OwnerPod
	if _, claim := obj.(*ipamclaimsv1alpha1.IPAMClaim); claim {
		kind = ipkv1.OwnerIPAMClaim
	}
	var list ipkv1.IPReservationList
	if err := l.cp.Client.List(ctx, &list); err != nil {
		t.Fatalf("listing reservations: %v", err)
	}
	var out []ipkv1.IPReservation
	for _, r := range list.Items {
		if r.Spec.Owner.Kind == kind && r.Spec.Owner.UID == obj.GetUID() {
			out = append(out, r)
		}
	}
	return out
}
