// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Cluster is ipkeeper as a cluster runs it, on this one machine:
//
//   - the control plane (etcd, kube-apiserver, kube-controller-manager with
//     the garbage collector);
//   - ipkeeper-controller as a process, its webhook registered with the API
//     server (self-managed certificates);
//   - one ipkeeper-agent process per node;
//   - per node, the real Multus thin plugin as the node's CNI: it reads the
//     pod and its NADs from the API server and delegates to the real bridge
//     plugin, which delegates IPAM to the ipkeeper shim the agent installed;
//   - per node, a simulated kubelet (no kubelet can run here): it creates a
//     network namespace per pod sandbox and runs Multus ADD, and when a pod
//     is being deleted it runs Multus DEL, removes the namespace and then
//     removes the pod object, as a kubelet does.
//
// KubeVirt's real virt-controller runs against the control plane (VM ->
// VMI -> launcher pods, migration target pods, hotplug and unplug on the
// live launcher's networks annotation); KV drives it and simulates what
// runs on nodes (see launcher.go): virt-handler, and Multus' dynamic
// networks controller, which attaches a hot-plugged network to a running
// sandbox through the NAD's own plugins.
type Cluster struct {
	CP         *framework.ControlPlane
	Controller *framework.ControllerProcess
	Nodes      []*Node
	KV         *framework.KubeVirt
	dir        string
	bins       *framework.Binaries

	mu        sync.Mutex
	sandboxes map[types.UID]*Sandbox
	// made are the sandboxes not torn down yet, the pods' current ones
	// and others: one whose ADD failed and whose DEL failed too, one a
	// newer sandbox of its pod replaced. The kubelet loop retries the
	// failed ones; Stop removes them all.
	made     map[*Sandbox]struct{}
	stop     context.CancelFunc
	loopDone chan struct{}
	closers  []io.Closer
}

// nodePlugins are the reference plugins in every node's CNI bin dir.
var nodePlugins = []string{"bridge", "macvlan", "loopback", "host-local"}

// Node is one simulated node: an agent and the node's CNI bin dir.
type Node struct {
	Name   string
	Agent  *framework.AgentProcess
	BinDir string
	// CNILog receives the plugins' stderr (Multus' log).
	CNILog string
	dir    string
	bins   *framework.Binaries
	kube   string
	multus *libcni.NetworkConfigList
	cni    *libcni.CNIConfig
	// exec runs plugins with the node's agent socket (cni uses it too).
	exec *socketExec
}

// Sandbox is a pod's network namespace, attached through Multus.
type Sandbox struct {
	// Pod is the test's copy of the pod; the kubelet loop uses only uid.
	Pod         *corev1.Pod
	uid         types.UID
	Node        *Node
	NetNS       *NetNS
	ContainerID string
	rt          *libcni.RuntimeConf

	// mu serialises teardown (the kubelet loop and KV may both finish a
	// deletion); torn is set once it succeeded.
	mu   sync.Mutex
	torn bool
	// failed: its ADD failed; it is torn down, and again (every
	// failedRetryEvery, from triedAt) until that works.
	failed  bool
	triedAt time.Time
	// nets are a launcher's networks by pod interface name (launcher.go).
	nets map[string]*attachment
}

// socketExec gives the plugins the node's agent socket through the
// environment, as /run/ipkeeper/agent.sock would on a real node: several
// agents share this machine. Multus and bridge pass their environment on
// to their delegates.
type socketExec struct {
	invoke.DefaultExec
	socket string
}

func (s *socketExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	return s.DefaultExec.ExecPlugin(ctx, path, stdin, append(environ, cniproto.SocketPathEnv+"="+s.socket))
}

// StartCluster starts the controller and one agent per node name.
func StartCluster(ctx context.Context, cp *framework.ControlPlane, bins *framework.Binaries, dir string, nodes ...string) (*Cluster, error) {
	return StartClusterWith(ctx, cp, bins, dir, nil, nodes...)
}

// StartClusterWith is StartCluster with extra ipkeeper-controller flags.
func StartClusterWith(ctx context.Context, cp *framework.ControlPlane, bins *framework.Binaries, dir string, controllerArgs []string, nodes ...string) (_ *Cluster, err error) {
	c := &Cluster{CP: cp, dir: dir, bins: bins, sandboxes: map[types.UID]*Sandbox{}, made: map[*Sandbox]struct{}{}}
	c.KV = &framework.KubeVirt{C: cp.Client, RealMultus: true, Timeout: 2 * time.Minute, Kubelet: framework.PodRunner{
		Run: c.runLauncher, Detach: c.detachLauncher, Stop: c.stopLauncher,
	}}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := c.KV.SetFeatureGate(ctx, true); err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{}
	ns.Name = ControllerNamespace
	if err := cp.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if c.Controller, err = framework.StartControllerProcess(framework.ControllerProcessOptions{
		Binary: bins.Controller, Kubeconfig: cp.KubeconfigPath, Dir: dir,
		Namespace: ControllerNamespace, WebhookConfigName: WebhookConfigName, GCGracePeriod: 2 * time.Second,
		ExtraArgs: controllerArgs,
	}); err != nil {
		return nil, err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/mutate-v1-pod", c.Controller.WebhookPort)
	if err := cp.RegisterPodWebhook(ctx, WebhookConfigName, "", url, nil); err != nil {
		return nil, err
	}
	if err := c.Controller.WaitReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	for _, name := range nodes {
		n, err := c.startNode(ctx, name)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	probeNS := &corev1.Namespace{}
	probeNS.GenerateName = "probe-"
	if err := cp.Client.Create(ctx, probeNS); err != nil {
		return nil, err
	}
	if err := cp.WaitWebhookCalled(ctx, probeNS.Name); err != nil {
		return nil, fmt.Errorf("the API server does not call the controller's webhook: %w; controller log:\n%s", err, c.Controller.Tail(40))
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	c.stop, c.loopDone = cancel, make(chan struct{})
	go c.kubelet(loopCtx)
	return c, nil
}

func (c *Cluster) startNode(ctx context.Context, name string) (*Node, error) {
	n := &Node{Name: name, dir: filepath.Join(c.dir, name), bins: c.bins, kube: c.CP.KubeconfigPath}
	if err := framework.EnsureNode(ctx, c.CP.Client, name); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := n.StartAgent(ctx); err != nil {
		return nil, err
	}
	n.BinDir = filepath.Join(n.dir, "opt-cni-bin")
	if err := os.MkdirAll(n.BinDir, 0o755); err != nil {
		return nil, err
	}
	links := map[string]string{"multus": c.CP.Tools.Multus, "ipkeeper": filepath.Join(n.Agent.CNIBinDir, "ipkeeper")}
	for _, p := range nodePlugins {
		links[p] = filepath.Join(c.CP.Tools.CNIPluginsDir, p)
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(n.BinDir, name)); err != nil && !os.IsExist(err) {
			return nil, err
		}
	}
	raw, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "multus-cni-network",
		"plugins": []any{map[string]any{
			"type":       "multus",
			"kubeconfig": c.CP.KubeconfigPath,
			"binDir":     n.BinDir,
			"cniDir":     filepath.Join(n.dir, "multus-cache"),
			// The cluster network is not under test: loopback stands for it.
			"delegates": []any{map[string]any{"cniVersion": "1.0.0", "name": "cluster", "plugins": []any{map[string]any{"type": "loopback"}}}},
		}},
	})
	if err != nil {
		return nil, err
	}
	if n.multus, err = libcni.NetworkConfFromBytes(raw); err != nil {
		return nil, err
	}
	// Plugins' stderr (Multus logs there) goes to the node's CNI log.
	n.CNILog = filepath.Join(n.dir, "cni.log")
	cniLog, err := os.OpenFile(n.CNILog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, cniLog)
	n.exec = &socketExec{
		DefaultExec: invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: cniLog}, PluginDecoder: version.PluginDecoder{}},
		socket:      n.Agent.Socket,
	}
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{n.BinDir}, filepath.Join(n.dir, "cni-cache"), n.exec)
	return n, nil
}

// StartAgent (re)starts the node's agent and waits until it serves.
func (n *Node) StartAgent(ctx context.Context) error {
	a, err := framework.StartAgentProcess(framework.AgentProcessOptions{Binary: n.bins.Agent, Kubeconfig: n.kube, NodeName: n.Name, Dir: n.dir})
	if err != nil {
		return err
	}
	n.Agent = a
	return a.WaitReady(ctx, 2*time.Minute)
}

// Node returns the node named name.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// RunPod does what the kubelet does for a new pod bound to its node: a
// sandbox network namespace, then the node's CNI (Multus) ADD.
func (c *Cluster) RunPod(ctx context.Context, pod *corev1.Pod) (*Sandbox, error) {
	n := c.Node(pod.Spec.NodeName)
	if n == nil {
		return nil, fmt.Errorf("pod %s/%s is bound to %q, not a node of this cluster", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	s := &Sandbox{Pod: pod.DeepCopy(), uid: pod.UID, Node: n, ContainerID: hex.EncodeToString(id)}
	name := "ipkc-" + s.ContainerID[:10]
	if out, err := ipCmd(ctx, "netns", "add", name); err != nil {
		return nil, fmt.Errorf("creating sandbox netns: %w: %s", err, out)
	}
	if out, err := ipCmd(ctx, "-n", name, "link", "set", "lo", "up"); err != nil {
		return nil, fmt.Errorf("setting lo up: %w: %s", err, out)
	}
	s.NetNS = &NetNS{Name: name, Path: filepath.Join("/var/run/netns", name)}
	s.rt = &libcni.RuntimeConf{
		ContainerID: s.ContainerID,
		NetNS:       s.NetNS.Path,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", pod.Namespace},
			{"K8S_POD_NAME", pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", s.ContainerID},
			{"K8S_POD_UID", string(pod.UID)},
		},
	}
	c.mu.Lock()
	c.sandboxes[pod.UID] = s
	c.made[s] = struct{}{}
	c.mu.Unlock()
	addCtx, cancel := context.WithTimeout(ctx, cniTimeout)
	defer cancel()
	if _, err := n.cni.AddNetworkList(addCtx, n.multus, s.rt); err != nil {
		// As the kubelet does, tear the failed sandbox down (the kubelet
		// loop again until its DEL works); the pod is retried later.
		s.mu.Lock()
		s.failed, s.triedAt = true, time.Now()
		s.mu.Unlock()
		c.mu.Lock()
		if c.sandboxes[s.uid] == s {
			delete(c.sandboxes, s.uid)
		}
		c.mu.Unlock()
		c.teardown(ctx, s)
		return nil, fmt.Errorf("ADD of pod %s/%s on %s: %w", pod.Namespace, pod.Name, n.Name, err)
	}
	return s, nil
}

// teardown runs Multus DEL and removes the sandbox namespace; it keeps the
// sandbox for a retry when DEL fails (the agent may be down).
func (c *Cluster) teardown(ctx context.Context, s *Sandbox) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.torn {
		return true
	}
	delCtx, cancel := context.WithTimeout(ctx, cniTimeout)
	defer cancel()
	for iface, a := range s.nets {
		if !a.hot {
			continue
		}
		if err := s.Node.cni.DelNetworkList(delCtx, a.conf, a.rt); err != nil {
			return false
		}
		delete(s.nets, iface)
	}
	if err := s.Node.cni.DelNetworkList(delCtx, s.Node.multus, s.rt); err != nil {
		return false
	}
	s.torn = true
	_, _ = ipCmd(ctx, "netns", "delete", s.NetNS.Name)
	c.mu.Lock()
	if c.sandboxes[s.uid] == s { // not a newer sandbox of the pod
		delete(c.sandboxes, s.uid)
	}
	delete(c.made, s)
	c.mu.Unlock()
	return true
}

// kubelet finishes pod deletions: sandboxes of terminating or vanished
// pods are torn down (retried until DEL succeeds) and terminating pods are
// then removed from the API.
func (c *Cluster) kubelet(ctx context.Context) {
	defer close(c.loopDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		// Sandboxes first, then pods: a sandbox is judged only against a
		// list that began after it was made, so the pod of a sandbox made
		// during a slow list is not taken for gone.
		c.mu.Lock()
		known := make([]*Sandbox, 0, len(c.sandboxes))
		for _, s := range c.sandboxes {
			known = append(known, s)
		}
		made := make([]*Sandbox, 0, len(c.made))
		for s := range c.made {
			made = append(made, s)
		}
		c.mu.Unlock()
		now := time.Now()
		for _, s := range made {
			if s.retryTeardown(now) {
				c.teardown(ctx, s)
			}
		}
		var pods corev1.PodList
		if err := c.CP.Client.List(ctx, &pods); err != nil {
			continue
		}
		live := map[types.UID]bool{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if c.Node(p.Spec.NodeName) == nil {
				continue
			}
			live[p.UID] = true
			if p.DeletionTimestamp == nil || len(p.Finalizers) > 0 {
				continue
			}
			if s := c.Sandbox(p.UID); s != nil && !c.teardown(ctx, s) {
				continue
			}
			uid := p.UID
			_ = c.CP.Client.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
		}
		for _, s := range known {
			if !live[s.uid] {
				c.teardown(ctx, s)
			}
		}
	}
}

// Sandbox returns the running sandbox of a pod, or nil.
func (c *Cluster) Sandbox(uid types.UID) *Sandbox {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sandboxes[uid]
}

// failedRetryEvery spaces the kubelet loop's teardowns of a failed
// sandbox whose DEL failed (each execs Multus and the plugins).
const failedRetryEvery = 2 * time.Second

// retryTeardown reports whether the kubelet loop should tear s down again
// now: its ADD failed, so did its teardown, and it was not tried lately.
func (s *Sandbox) retryTeardown(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.failed || s.torn || now.Sub(s.triedAt) < failedRetryEvery {
		return false
	}
	s.triedAt = now
	return true
}

// Stop stops the kubelet loop, tears down the sandboxes left, and stops the
// agents and the controller. It returns the network namespaces it could not
// remove.
func (c *Cluster) Stop() []string {
	if c.stop != nil {
		c.stop()
		<-c.loopDone
	}
	c.mu.Lock()
	var left []*Sandbox
	for s := range c.made {
		left = append(left, s)
	}
	c.mu.Unlock()
	var leaked []string
	for _, s := range left {
		if !c.teardown(context.Background(), s) {
			_, _ = ipCmd(context.Background(), "netns", "delete", s.NetNS.Name)
		}
		if _, err := os.Stat(s.NetNS.Path); err == nil {
			leaked = append(leaked, s.NetNS.Name)
		}
	}
	for _, n := range c.Nodes {
		if n.Agent != nil {
			_ = n.Agent.Stop()
		}
	}
	if c.Controller != nil {
		c.Controller.Stop()
	}
	for _, cl := range c.closers {
		_ = cl.Close()
	}
	return leaked
}

// Addr returns the one address of ifname in the sandbox (ip addr).
func (s *Sandbox) Addr(ctx context.Context, ifname string) (netip.Prefix, error) {
	addrs, err := s.NetNS.Addrs(ctx, ifname)
	if err != nil {
		return netip.Prefix{}, err
	}
	if len(addrs) != 1 {
		return netip.Prefix{}, fmt.Errorf("pod %s/%s: %s has addresses %v, want one", s.Pod.Namespace, s.Pod.Name, ifname, addrs)
	}
	return addrs[0], nil
}

// NewNamespace creates a namespace for one test (deleted when t ends) and
// dumps what matters in it if t fails.
func (c *Cluster) NewNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := c.CP.NewNamespace(t, prefix)
	c.DumpOnFailure(t, ns)
	return ns
}

// DumpOnFailure prints component logs and the objects that matter when t fails.
func (c *Cluster) DumpOnFailure(t testing.TB, namespace string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "--- ipkeeper-controller log (%s)\n%s\n", c.Controller.LogPath, c.Controller.Tail(60))
		for _, n := range c.Nodes {
			fmt.Fprintf(&b, "--- ipkeeper-agent %s log (%s)\n%s\n", n.Name, n.Agent.LogPath, n.Agent.Tail(30))
			fmt.Fprintf(&b, "--- CNI plugins' log on %s (%s)\n%s\n", n.Name, n.CNILog, framework.TailFile(n.CNILog, 15))
		}
		ctx := context.Background()
		var claims ipamclaimsv1alpha1.IPAMClaimList
		if err := c.CP.Client.List(ctx, &claims, client.InNamespace(namespace)); err == nil {
			b.WriteString("--- IPAMClaims\n")
			for _, cl := range claims.Items {
				fmt.Fprintf(&b, "%s network=%s iface=%s ips=%v finalizers=%v deleting=%v owners=%v\n", cl.Name, cl.Spec.Network, cl.Spec.Interface, cl.Status.IPs, cl.Finalizers, cl.DeletionTimestamp != nil, cl.OwnerReferences)
			}
		}
		var res ipkv1alpha1.IPReservationList
		if err := c.CP.Client.List(ctx, &res); err == nil {
			b.WriteString("--- IPReservations\n")
			lines := []string{}
			for _, r := range res.Items {
				lines = append(lines, fmt.Sprintf("%s %s owner=%s %s/%s node=%s", r.Spec.Network, r.Spec.IP, r.Spec.Owner.Kind, r.Spec.Owner.Namespace, r.Spec.Owner.Name, r.Spec.Node))
			}
			sort.Strings(lines)
			b.WriteString(strings.Join(lines, "\n") + "\n")
		}
		var pods corev1.PodList
		if err := c.CP.Client.List(ctx, &pods, client.InNamespace(namespace)); err == nil {
			b.WriteString("--- pods\n")
			for _, p := range pods.Items {
				fmt.Fprintf(&b, "%s node=%s deleting=%v networks=%s\n", p.Name, p.Spec.NodeName, p.DeletionTimestamp != nil, p.Annotations[multus.Annotation])
			}
		}
		var migs kubevirtv1.VirtualMachineInstanceMigrationList
		if err := c.CP.Client.List(ctx, &migs, client.InNamespace(namespace)); err == nil && len(migs.Items) > 0 {
			b.WriteString("--- VirtualMachineInstanceMigrations\n")
			for _, m := range migs.Items {
				fmt.Fprintf(&b, "%s vmi=%s phase=%s conditions=%+v\n", m.Name, m.Spec.VMIName, m.Status.Phase, m.Status.Conditions)
			}
		}
		var vmis kubevirtv1.VirtualMachineInstanceList
		if err := c.CP.Client.List(ctx, &vmis, client.InNamespace(namespace)); err == nil && len(vmis.Items) > 0 {
			b.WriteString("--- VirtualMachineInstances\n")
			for _, v := range vmis.Items {
				fmt.Fprintf(&b, "%s phase=%s node=%s conditions=%+v\n", v.Name, v.Status.Phase, v.Status.NodeName, v.Status.Conditions)
			}
		}
		vc := filepath.Join(c.CP.Dir, "virt-controller.log")
		fmt.Fprintf(&b, "--- virt-controller log (%s)\n%s\n", vc, framework.TailFile(vc, 30))
		// Into a file kept with the run's logs, not the test's output: a
		// CI log's tail then ends with the failure itself.
		path := filepath.Join(c.dir, "failure-"+strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+".txt")
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Log(b.String())
			return
		}
		t.Logf("logs and objects at the failure: %s", path)
	})
}

// ControllerNamespace is the controller's own namespace in e2e runs.
const ControllerNamespace = "ipkeeper-system"

// WebhookConfigName is the MutatingWebhookConfiguration e2e runs register:
// the shipped name, which the agents read by default.
const WebhookConfigName = "ipkeeper"
