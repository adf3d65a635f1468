// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Settings of the simulated cluster.
const (
	numNodes      = 3
	namespace     = "chaos"
	controllerNS  = "ipkeeper-system"
	gcGracePeriod = 3 * time.Second
	// claimWaitTimeout is how long a launcher's ADD waits for its claim's
	// addresses: short, so that a claim the controller has not filled (it
	// is down, or the claim's request is refused) costs an operation
	// seconds, not the agent's default half minute.
	claimWaitTimeout  = 3 * time.Second
	readyTimeout      = 2 * time.Minute
	cniRequestTimeout = 60 * time.Second
)

// network is one NAD and its CNI config, as Multus would pass it.
type network struct {
	nad  string // NetworkAttachmentDefinition name in namespace
	name string // CNI network name
	pool string // the IPPool its addresses belong to
	// key is what its pool's reservations are named from (the pool's
	// lock key, IPPool.LockKey): an inline pool's network name, which
	// differs from the pool's name when the network's name is not an
	// object name; a named pool's name.
	key    string
	config map[string]any
}

// netConf renders the CNI config for one request; static adds the
// runtimeConfig.ips Multus passes for an annotation's "ips".
func (n *network) netConf(static string) json.RawMessage {
	c := map[string]any{}
	for k, v := range n.config {
		c[k] = v
	}
	if static != "" {
		c["runtimeConfig"] = map[string]any{"ips": []string{static}}
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // maps of plain values always marshal
	}
	return b
}

// The networks: a /24 for ordinary and static-IP pods (its inline pool is
// made by ipkeeper-controller from the NAD); a network whose name is not
// an object name (its inline pool is named by a hash, its reservations
// from the network name); two networks drawing from one
// explicit pool, a /28 the schedule drives past capacity, which the
// pool-edit operation grows, shrinks and otherwise edits under them and whose released
// addresses cool down; and a dual-stack network with persistent IPs for
// claim-backed pods, whose inline pool also serves pods without a claim.
var networks = map[string]*network{
	"pods": {nad: "pods", name: "chaos-pods", pool: "chaos-pods", key: "chaos-pods", config: map[string]any{
		"cniVersion": "1.0.0", "name": "chaos-pods", "type": "bridge",
		"ipam": map[string]any{"type": "ipkeeper", "range": "10.60.0.0/24", "gateway": "10.60.0.1"},
	}},
	poolOdd: {nad: "odd", name: oddNetwork, pool: naming.InlinePool(oddNetwork), key: oddNetwork, config: map[string]any{
		"cniVersion": "1.0.0", "name": oddNetwork, "type": "bridge",
		"ipam": map[string]any{"type": "ipkeeper", "range": "10.63.0.0/27"},
	}},
	"small": {nad: "small", name: "chaos-small", pool: smallPool, key: smallPool, config: map[string]any{
		"cniVersion": "1.0.0", "name": "chaos-small", "type": "bridge",
		"ipam": map[string]any{"type": "ipkeeper", "pool": smallPool},
	}},
	"small-b": {nad: "small-b", name: "chaos-small-b", pool: smallPool, key: smallPool, config: map[string]any{
		"cniVersion": "1.0.0", "name": "chaos-small-b", "type": "bridge",
		"ipam": map[string]any{"type": "ipkeeper", "pool": smallPool},
	}},
	poolSticky: {nad: "sticky", name: "chaos-sticky", pool: stickyPool, key: stickyPool, config: map[string]any{
		"cniVersion": "1.0.0", "name": "chaos-sticky", "type": "bridge",
		"ipam": map[string]any{"type": "ipkeeper", "pool": stickyPool, "sticky_mac": true},
	}},
	"vm": {nad: "vm", name: "chaos-vm", pool: "chaos-vm", key: "chaos-vm", config: map[string]any{
		"cniVersion": "1.0.0", "name": "chaos-vm", "type": "bridge", "allowPersistentIPs": true,
		"ipam": map[string]any{"type": "ipkeeper", "ipRanges": []any{
			map[string]any{"range": "10.62.0.0/24"}, map[string]any{"range": "fd62::/120"},
		}},
	}},
}

// webhookConfig is the controller's MutatingWebhookConfiguration.
const webhookConfig = "ipkeeper-chaos"

// oddNetwork is a CNI network name that is not an object name.
const oddNetwork = "Chaos_Odd.Net"

// node is one simulated node: an agent process and whether it is up.
type node struct {
	name   string
	opts   framework.AgentProcessOptions
	client *cniproto.Client

	// life is held while the agent is killed and started again (or its
	// node deleted and made again): one at a time.
	life  sync.Mutex
	mu    sync.Mutex
	proc  *framework.AgentProcess
	up    bool
	epoch int // incremented on every kill
}

// state returns whether the agent is up and its epoch.
func (n *node) state() (bool, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.up, n.epoch
}

// controller is the ipkeeper-controller process.
type controller struct {
	mu   sync.Mutex
	proc *framework.ControllerProcess
	up   bool
}

// cluster is the system under test.
type cluster struct {
	cp    *framework.ControlPlane
	proxy *apiProxy
	bins  *framework.Binaries
	dir   string
	nodes []*node
	ctrl  *controller

	apiMu sync.Mutex // held while kube-apiserver restarts
	// crashes counts processes that exited before they were ready.
	crashes atomic.Int64
}

// startCluster starts the control plane, the proxy, the controller and
// one agent process per node, and creates the namespace and the NADs.
func startCluster(ctx context.Context, seed uint64, race bool) (_ *cluster, err error) {
	// Short: agent sockets live in here (unix socket paths are limited).
	dir, err := os.MkdirTemp("", "ipkchaos-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, ctrl: &controller{}}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	build := framework.BuildBinaries
	if race {
		build = framework.BuildRaceBinaries
	}
	if c.bins, err = build(ctx, root, filepath.Join(dir, "bin")); err != nil {
		return nil, err
	}
	if c.cp, err = framework.Start(ctx, framework.Options{VirtController: true}); err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	if c.proxy, err = newAPIProxy(c.cp.Config, seed+2); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "proxy.kubeconfig")
	if err := writeKubeconfig(kubeconfig, c.proxy.URL()); err != nil {
		return nil, err
	}
	for _, ns := range []string{namespace, controllerNS} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if err := c.cp.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	small := &ipkv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: smallPool},
		Spec: smallSpec(poolShape{})}
	if err := c.cp.Client.Create(ctx, small); err != nil {
		return nil, fmt.Errorf("creating IPPool %s: %w", smallPool, err)
	}
	sticky := &ipkv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: stickyPool}, Spec: ipkv1alpha1.IPPoolSpec{
		Ranges: []ipkv1alpha1.PoolRange{{Range: stickyRange}}, ReuseCooldown: &ipkv1alpha1.Duration{Duration: stickyCooldown}}}
	if err := c.cp.Client.Create(ctx, sticky); err != nil {
		return nil, fmt.Errorf("creating IPPool %s: %w", stickyPool, err)
	}
	for _, n := range networks {
		raw, err := json.Marshal(n.config)
		if err != nil {
			return nil, err
		}
		nad := &nadv1.NetworkAttachmentDefinition{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: n.nad},
			Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: string(raw)},
		}
		if err := c.cp.Client.Create(ctx, nad); err != nil {
			return nil, fmt.Errorf("creating NAD %s: %w", n.nad, err)
		}
	}

	c.ctrl.proc, err = framework.StartControllerProcess(framework.ControllerProcessOptions{
		Binary: c.bins.Controller, Kubeconfig: kubeconfig, Dir: dir, Namespace: controllerNS,
		WebhookConfigName: webhookConfig, GCGracePeriod: gcGracePeriod,
		// The controller makes the inline pools, the VMs' claims, fills
		// every claim (reserves and records its addresses), runs the
		// reservation garbage collector and the VMs' launcher webhook.
		// Without leader election a restarted controller does not wait out
		// the killed one's lease.
		// Blocks empty for 3 s are given back, so give-backs race the
		// agents' allocations in them all through a run.
		// It checks every second for ipam-extensions' webhook, which the
		// run installs and removes (makerops.go).
		ExtraArgs: []string{"--leader-elect=false", "--block-empty-grace=3s", "--claims-controller-check-interval=1s"},
	})
	if err != nil {
		return nil, err
	}
	// Its pod webhook serves the VMs' launchers (vmops.go), in their
	// namespace and their receivers' (vmmoveops.go) only; the API server calls it directly (the proxy's
	// faults are the controller's own requests').
	url := fmt.Sprintf("https://127.0.0.1:%d/mutate-v1-pod", c.ctrl.proc.WebhookPort)
	if err := c.cp.RegisterPodWebhook(ctx, webhookConfig, vmNamespace, url, nil, vmRecvNamespace); err != nil {
		return nil, err
	}
	if err := c.ctrl.proc.WaitReady(ctx, readyTimeout); err != nil {
		return nil, err
	}
	c.ctrl.up = true

	for i := range numNodes {
		name := fmt.Sprintf("chaos-node-%d", i)
		if err := framework.EnsureNode(ctx, c.cp.Client, name); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		n := &node{name: name, opts: framework.AgentProcessOptions{
			Binary: c.bins.Agent, Kubeconfig: kubeconfig, NodeName: name, Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)),
			// The VMs' webhook configuration is ipkeeper-chaos: the agents
			// read it to tell whether it makes every claim reference
			// (a launcher it missed then gets the claim its VM implies).
			ExtraArgs: []string{"--claim-wait-timeout=" + claimWaitTimeout.String(), "--webhook-configuration-name=" + webhookConfig},
		}}
		if n.proc, err = framework.StartAgentProcess(n.opts); err != nil {
			return nil, err
		}
		n.client = &cniproto.Client{SocketPath: n.proc.Socket, Timeout: cniRequestTimeout}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := n.proc.WaitReady(ctx, readyTimeout); err != nil {
			return nil, err
		}
		n.up = true
	}
	return c, nil
}

// writeKubeconfig writes a kubeconfig for the proxy (plain HTTP on
// loopback; the proxy authenticates upstream).
func writeKubeconfig(path, server string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["chaos"] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos["chaos"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["chaos"] = &clientcmdapi.Context{Cluster: "chaos", AuthInfo: "chaos"}
	cfg.CurrentContext = "chaos"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing proxy kubeconfig: %w", err)
	}
	return nil
}

// maxCrashRestarts bounds how often a process that exits before it is
// ready (for example because the API server is down while it starts) is
// started again, as the kubelet restarts a crashed container.
const maxCrashRestarts = 10

// restartAgent kills n's agent with SIGKILL and starts it again; it
// returns once the new process is ready.
func (c *cluster) restartAgent(ctx context.Context, n *node) error {
	n.life.Lock()
	defer n.life.Unlock()
	return c.restartAgentDoing(ctx, n, nil)
}

// restartAgentDoing kills n's agent, runs whileDown (if any), and starts
// the agent again; the caller holds n.life.
func (c *cluster) restartAgentDoing(ctx context.Context, n *node, whileDown func() error) error {
	n.mu.Lock()
	n.up = false
	n.epoch++
	n.proc.Kill()
	n.mu.Unlock()
	if whileDown != nil {
		if err := whileDown(); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		proc, err := framework.StartAgentProcess(n.opts)
		if err != nil {
			return err
		}
		n.mu.Lock()
		n.proc = proc
		n.mu.Unlock()
		err = proc.WaitReady(ctx, readyTimeout)
		if err == nil {
			break
		}
		if exited, _ := proc.Exited(); !exited || attempt == maxCrashRestarts {
			return err
		}
		c.crashes.Add(1)
	}
	n.mu.Lock()
	n.up = true
	n.mu.Unlock()
	return nil
}

// restartController kills the controller with SIGKILL and starts it again.
func (c *cluster) restartController(ctx context.Context) error {
	return c.restartControllerAfter(ctx, nil)
}

// restartControllerAfter kills ipkeeper-controller, calls gate (if set)
// while it is down, then starts it again.
func (c *cluster) restartControllerAfter(ctx context.Context, gate func(context.Context)) error {
	c.ctrl.mu.Lock()
	defer c.ctrl.mu.Unlock()
	c.ctrl.up = false
	c.ctrl.proc.Kill()
	if gate != nil {
		gate(ctx)
	}
	for attempt := 0; ; attempt++ {
		if err := c.ctrl.proc.Restart(); err != nil {
			return err
		}
		err := c.ctrl.proc.WaitReady(ctx, readyTimeout)
		if err == nil {
			break
		}
		if !c.ctrl.proc.Exited() || attempt == maxCrashRestarts {
			return err
		}
		c.crashes.Add(1)
	}
	c.ctrl.up = true
	return nil
}

// apiStopTimeout is how long kube-apiserver gets for a graceful shutdown
// before it is killed.
const apiStopTimeout = 10 * time.Second

// restartAPIServer restarts kube-apiserver, keeping etcd.
func (c *cluster) restartAPIServer(ctx context.Context) (killed bool, err error) {
	c.apiMu.Lock()
	defer c.apiMu.Unlock()
	return c.cp.RestartAPIServer(ctx, apiStopTimeout)
}

// logs returns the path of every ipkeeper process log.
func (c *cluster) logs() []string {
	out := []string{c.ctrl.proc.LogPath}
	for _, n := range c.nodes {
		out = append(out, n.proc.LogPath)
	}
	return out
}

// panics scans the process logs for Go panics and, in race-detector
// builds, data races (I5).
func (c *cluster) panics() []string {
	var out []string
	for _, path := range c.logs() {
		data, err := os.ReadFile(path)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: unreadable: %v", path, err))
			continue
		}
		for i, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "panic:") || strings.Contains(line, "WARNING: DATA RACE") {
				out = append(out, fmt.Sprintf("%s:%d: %s", path, i+1, line))
			}
		}
	}
	return out
}

func (c *cluster) stop() {
	var errs []error
	for _, n := range c.nodes {
		if n.proc != nil {
			if exited, _ := n.proc.Exited(); !exited {
				if err := n.proc.Stop(); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if c.ctrl.proc != nil {
		c.ctrl.proc.Stop()
	}
	if c.proxy != nil {
		c.proxy.close()
	}
	if c.cp != nil {
		if err := c.cp.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: stopping the cluster: %v\n", err)
	}
}

// The shared pool of the small networks. Its quota, set from its
// creation on, so that no agent ever saw the pool without it, is below
// its size: the small networks' pods and the Cluster API claims, all of
// the run's namespace, hit it, released addresses cooling down included.
const (
	smallPool     = "chaos-small"
	smallCooldown = 2 * time.Second
	smallQuota    = 11
)

// The pool of the sticky_mac network: released addresses cool down long
// enough for a pod presenting their MAC to come back for them.
const (
	stickyPool     = "chaos-sticky"
	stickyRange    = "10.66.0.0/26"
	stickyCooldown = 20 * time.Second
)

// cooldownOf is the reuse cooldown of a pool of the run.
func cooldownOf(pool string) time.Duration {
	switch pool {
	case smallPool:
		return smallCooldown
	case stickyPool:
		return stickyCooldown
	}
	for _, p := range vmPools {
		if p.name == pool {
			return p.cooldown
		}
	}
	return 0
}
