// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// A real node (Options.Lab): Debian's containerd and runc, and the
// pinned kubelet, in network, mount and PID namespaces of their own. The
// node's PID 1 is this test binary (nodeInit), which makes the node's
// private mounts (below) and reaps orphans; killing it ends every process
// of the node, its containers included, and its namespaces with them.
// Each node has, bind-mounted from its own directory, what a kubelet and
// a container runtime keep per host; everything else is the host's, read
// as it is.
var nodeBinds = []string{
	"/var/lib/kubelet", "/var/lib/containerd", "/var/lib/cni", "/etc/cni", "/opt/cni",
	"/var/log/pods", "/var/log/containers",
	// virt-handler's node labeller writes the host's capabilities here.
	"/var/lib/kubevirt-node-labeller",
}

const (
	// nodeInitEnv names the node directory in the environment of nodeInit.
	nodeInitEnv = "IPKEEPER_NODE_INIT"
	// NodeSecondaryBridge is the bridge on every node whose uplink is the
	// lab's L2 segment: NADs of the bridge plugin name it to reach across
	// nodes.
	NodeSecondaryBridge = "l2br0"
	// nodeContainerdSocket is containerd's socket inside a node.
	nodeContainerdSocket = "/run/containerd/containerd.sock"
	// nodeReadyTimeout bounds a node's start until the API server says Ready.
	nodeReadyTimeout = 2 * time.Minute
)

// RealNode is one node of the lab.
type RealNode struct {
	// Name is the Node's name; LANIP its InternalIP; PodCIDR its pod network.
	Name, LANIP, PodCIDR string
	// Dir holds the node's state, configuration and logs.
	Dir string

	cp         *ControlPlane
	init       *exec.Cmd
	pid        int // the node's PID 1, as the host sees it
	cgroupRoot string
	procs      []*exec.Cmd
	madeDirs   []string // mount points this node created on the host
}

// nodeInit is the node's PID 1: it makes the node's mounts, says "ready"
// on stdout, and reaps until it is killed. It never returns.
func nodeInit(dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "node init:", err)
		os.Exit(1)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		fail(err)
	}
	if err := syscall.Mount("tmpfs", "/run", "tmpfs", 0, "mode=755"); err != nil {
		fail(err)
	}
	for _, b := range nodeBinds {
		if err := syscall.Mount(filepath.Join(dir, "fs", b), b, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			fail(fmt.Errorf("bind %s: %w", b, err))
		}
	}
	// Shared within the node, as systemd makes a host's mounts: a
	// container's Bidirectional volume and the kubelet's pod volumes
	// propagate. The private step above keeps the host out of it.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SHARED, ""); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGCHLD)
	for range sigs {
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// StartRealNodes starts n nodes and waits until each is Ready.
func (cp *ControlPlane) StartRealNodes(ctx context.Context, t testing.TB, n int) []*RealNode {
	t.Helper()
	if !cp.lab {
		t.Fatal("real nodes need a control plane started with Options.Lab")
	}
	if err := requireExecutables(cp.Tools.Kubelet); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("the real-node lane needs %s (Debian's containerd, runc and util-linux; .ci/run installs them): %v", bin, err)
		}
	}
	lockRealNodes(ctx, t)
	imagesDir := t.TempDir()
	images, err := writeNodeImages(cp.Tools, imagesDir)
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*RealNode, n)
	for i := range nodes {
		node, err := cp.startRealNode(ctx, i)
		if node != nil {
			t.Cleanup(func() {
				if t.Failed() {
					node.DumpLogs(os.Stderr, 80)
				}
				if err := node.Stop(); err != nil {
					t.Errorf("stopping node %s: %v", node.Name, err)
				}
			})
		}
		if err != nil {
			t.Fatalf("starting node %d: %v", i, err)
		}
		if err := node.ImportImages(ctx, images...); err != nil {
			t.Fatal(err)
		}
		nodes[i] = node
	}
	for _, node := range nodes {
		if err := node.waitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

func (cp *ControlPlane) startRealNode(ctx context.Context, i int) (_ *RealNode, err error) {
	name := "node-" + string(rune('a'+i))
	dir, err := os.MkdirTemp("", "ipkn-"+name+"-")
	if err != nil {
		return nil, err
	}
	node := &RealNode{Name: name, LANIP: nodeLANIP(i), PodCIDR: nodePodCIDR(i), Dir: dir, cp: cp,
		cgroupRoot: "/" + filepath.Base(dir)}
	for _, b := range nodeBinds {
		if err := os.MkdirAll(filepath.Join(dir, "fs", b), 0o755); err != nil {
			return node, err
		}
		if _, err := os.Stat(b); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(b, 0o755); err != nil {
				return node, err
			}
			node.madeDirs = append(node.madeDirs, b)
		}
	}
	if err := node.writeConfig(); err != nil {
		return node, err
	}
	if err := node.makeCgroupRoot(); err != nil {
		return node, err
	}

	self, err := os.Executable()
	if err != nil {
		return node, err
	}
	initLog, err := os.Create(filepath.Join(dir, "init.log"))
	if err != nil {
		return node, err
	}
	defer func() { _ = initLog.Close() }()
	init := exec.Command("unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc", "--", self)
	init.Env = append(os.Environ(), nodeInitEnv+"="+dir)
	init.Stderr = initLog
	stdout, err := init.StdoutPipe()
	if err != nil {
		return node, err
	}
	init.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := init.Start(); err != nil {
		return node, fmt.Errorf("starting the node's namespaces: %w", err)
	}
	node.init = init
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		return node, fmt.Errorf("the node's init did not start (%w); its log: %s", err, tail(filepath.Join(dir, "init.log"), 20))
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if node.pid, err = childOf(init.Process.Pid); err != nil {
		return node, err
	}
	if err := node.plugNetwork(); err != nil {
		return node, err
	}
	if err := node.start(ctx, "containerd", "containerd", "--config", filepath.Join(dir, "containerd.toml")); err != nil {
		return node, err
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := node.Exec(ctx, "ctr", "--address", nodeContainerdSocket, "version")
		return err == nil, nil
	}); err != nil {
		return node, fmt.Errorf("containerd of %s did not serve: %s", name, tail(filepath.Join(dir, "containerd.log"), 30))
	}
	if err := node.start(ctx, "kubelet", cp.Tools.Kubelet,
		"--config="+filepath.Join(dir, "kubelet.yaml"),
		"--kubeconfig="+filepath.Join(dir, "kubelet.kubeconfig"),
		"--hostname-override="+name,
		"--node-ip="+node.LANIP,
		"--v=2",
	); err != nil {
		return node, err
	}
	return node, nil
}

// childOf is the PID of the one child of pid (unshare --fork's).
func childOf(pid int) (int, error) {
	var children string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		children = strings.TrimSpace(string(b))
		return err == nil && children != "", nil
	})
	if err != nil {
		return 0, fmt.Errorf("finding the node's PID 1 (child of %d): %w", pid, err)
	}
	return strconv.Atoi(strings.Fields(children)[0])
}

// plugNetwork connects the node to the lab's LAN and L2 segment, and
// routes its pod network.
func (n *RealNode) plugNetwork() error {
	pid := strconv.Itoa(n.pid)
	lan, l2 := fmt.Sprintf("vlan-%s", n.Name[5:]), fmt.Sprintf("vl2-%s", n.Name[5:])
	lab := [][]string{
		{"link", "add", lan, "type", "veth", "peer", "name", "eth0", "netns", pid},
		{"link", "set", lan, "master", labLANBridge, "up"},
		{"link", "add", l2, "type", "veth", "peer", "name", "l2up", "netns", pid},
		{"link", "set", l2, "master", labL2Bridge, "up"},
		{"route", "add", n.PodCIDR, "via", n.LANIP},
	}
	for _, s := range lab {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	inNode := [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", fmt.Sprintf("%s/%d", n.LANIP, labLANPrefix), "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", labGatewayIP},
		{"link", "add", NodeSecondaryBridge, "type", "bridge"},
		{"link", "set", "l2up", "master", NodeSecondaryBridge, "up"},
		{"link", "set", NodeSecondaryBridge, "up"},
	}
	for _, s := range inNode {
		if _, err := n.Exec(context.Background(), append([]string{"ip"}, s...)...); err != nil {
			return err
		}
	}
	// The node routes its pods' traffic (the pod bridge is their gateway).
	_, err := n.Exec(context.Background(), "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	return err
}

// nsenterArgs run a command in the node's namespaces.
func (n *RealNode) nsenterArgs(args ...string) []string {
	return append([]string{"nsenter", "--target", strconv.Itoa(n.pid), "--mount", "--net", "--pid", "--"}, args...)
}

// Exec runs a command in the node's namespaces and returns its output.
func (n *RealNode) Exec(ctx context.Context, args ...string) ([]byte, error) {
	a := n.nsenterArgs(args...)
	out, err := exec.CommandContext(ctx, a[0], a[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("on %s: %s: %w: %s", n.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// start runs a daemon of the node, logging into Dir/<name>.log.
func (n *RealNode) start(_ context.Context, name string, args ...string) error {
	log, err := os.Create(filepath.Join(n.Dir, name+".log"))
	if err != nil {
		return err
	}
	a := n.nsenterArgs(args...)
	cmd := exec.Command(a[0], a[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting %s on %s: %w", name, n.Name, err)
	}
	go func() { _ = cmd.Wait(); _ = log.Close() }()
	n.procs = append(n.procs, cmd)
	return nil
}

// ImportImages loads image archives into the node's containerd, where the
// kubelet finds them, by name and by digest (repository@sha256:<manifest>),
// as a pull from a registry leaves them: the kubelet reports a container's
// imageID in that form, and KubeVirt names the kernel boot and container
// disk images of a migration's target launcher by it. (ctr's --digests
// names them import-<date>@..., which no pod names.)
func (n *RealNode) ImportImages(ctx context.Context, archives ...string) error {
	ctr := []string{"ctr", "--address", nodeContainerdSocket, "-n", "k8s.io", "images"}
	for _, a := range archives {
		if _, err := n.Exec(ctx, append(ctr, "import", a)...); err != nil {
			return fmt.Errorf("importing %s: %w", a, err)
		}
	}
	out, err := n.Exec(ctx, append(ctr, "ls")...)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	var tags [][2]string // name, digest
	for _, line := range strings.Split(string(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		have[f[0]] = true
		if !strings.Contains(f[0], "@") && strings.HasPrefix(f[2], "sha256:") {
			tags = append(tags, [2]string{f[0], f[2]})
		}
	}
	for _, tag := range tags {
		ref, err := name.ParseReference(tag[0])
		if err != nil {
			continue
		}
		byDigest := ref.Context().Name() + "@" + tag[1]
		if have[byDigest] {
			continue
		}
		if _, err := n.Exec(ctx, append(ctr, "tag", tag[0], byDigest)...); err != nil {
			return fmt.Errorf("naming %s by its digest: %w", tag[0], err)
		}
		have[byDigest] = true
	}
	return nil
}

// realNodesLock is held by the test process whose real nodes run:
// one lab's at a time on a machine. A node bind-mounts its own directories
// over host paths such as /var/lib/kubelet, made on the host when missing
// and removed when it stops; a second lab's nodes would lose their mounts
// to that removal and write into the host's directories.
const realNodesLock = "/run/lock/ipkeeper-real-nodes.lock"

// lockRealNodes waits for realNodesLock (flock, so a killed process
// releases it) and holds it until the test's cleanups, registered first,
// run last: after the nodes stopped.
func lockRealNodes(ctx context.Context, t testing.TB) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(realNodesLock), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(realNodesLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			t.Fatalf("locking %s: %v", realNodesLock, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			t.Fatalf("another test process's real nodes still run (%s held): %v", realNodesLock, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	t.Cleanup(func() { _ = f.Close() })
}

func (n *RealNode) waitReady(ctx context.Context) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, nodeReadyTimeout, true, func(ctx context.Context) (bool, error) {
		node, err := n.cp.Clientset.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready after %s: %w; kubelet log:\n%s", n.Name, nodeReadyTimeout, err, tail(filepath.Join(n.Dir, "kubelet.log"), 40))
	}
	return nil
}

// Stop ends every process of the node and removes what it left: its
// cgroups, the mount points it made on the host, its directory.
func (n *RealNode) Stop() error {
	if n.init != nil && n.init.Process != nil {
		if n.pid > 0 {
			_ = syscall.Kill(n.pid, syscall.SIGKILL)
		}
		_ = n.init.Process.Kill()
		_ = n.init.Wait()
	}
	for _, p := range n.procs {
		if p.Process != nil {
			_ = p.Process.Kill()
		}
	}
	var errs []error
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return n.removeCgroups() == nil, nil
	}); err != nil {
		errs = append(errs, fmt.Errorf("removing the cgroups of %s: %w", n.Name, n.removeCgroups()))
	}
	for _, d := range n.madeDirs {
		_ = os.Remove(d) // only while empty: another node may still use it
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DumpLogs writes the last lines of the node's daemons' logs to w.
func (n *RealNode) DumpLogs(w io.Writer, lines int) {
	for _, name := range []string{"init", "containerd", "kubelet"} {
		fmt.Fprintf(w, "----- %s %s (last %d lines) -----\n%s\n", n.Name, name, lines, tail(filepath.Join(n.Dir, name+".log"), lines))
	}
	// Every container's log, as the kubelet keeps it.
	logs, _ := filepath.Glob(filepath.Join(n.Dir, "fs/var/log/pods/*/*/*.log"))
	for _, l := range logs {
		rel, _ := filepath.Rel(filepath.Join(n.Dir, "fs/var/log/pods"), l)
		fmt.Fprintf(w, "----- %s container %s (last 20 lines) -----\n%s\n", n.Name, rel, tail(l, 20))
	}
}

// cgroupHierarchies are the cgroup mounts under /sys/fs/cgroup.
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		d := filepath.Join("/sys/fs/cgroup", e.Name())
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// makeCgroupRoot creates the node's cgroup root in every hierarchy (the
// kubelet's cgroupRoot must exist); a cpuset gets its parent's CPUs and
// memory nodes, which a new cgroup v1 cpuset lacks.
func (n *RealNode) makeCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, n.cgroupRoot)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// removeCgroups removes the node's cgroup trees, deepest first.
func (n *RealNode) removeCgroups() error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, n.cgroupRoot)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// writeConfig writes containerd's and the kubelet's configuration, the
// kubelet's node credentials, the pod network's CNI configuration and the
// reference plugins the node's image would carry.
func (n *RealNode) writeConfig() error {
	containerd := fmt.Sprintf(`version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing"]
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Root here lacks CAP_SYS_RESOURCE: the sandbox's default score (-998)
  # cannot be set, so scores are only raised.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
`, PauseImage)
	kubelet := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host has cgroup v1 only.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
# The lab's API server authenticates to no kubelet (no client
# certificate): logs and exec go through unauthenticated, on the LAN only.
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
failSwapOn: false
makeIPTablesUtilChains: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
fileCheckFrequency: 1s
syncFrequency: 5s
resolvConf: /etc/resolv.conf
staticPodPath: ""
`, n.cgroupRoot, nodeContainerdSocket, n.LANIP)
	podnet := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "podnet", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}}
]}`, n.PodCIDR, nodeGatewayOf(n.PodCIDR))
	user, err := n.cp.env.AddUser(envtest.User{Name: "system:node:" + n.Name, Groups: []string{"system:nodes"}}, n.cp.Config)
	if err != nil {
		return fmt.Errorf("provisioning the node's credentials: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if _, err := clientcmd.Load(kubeconfig); err != nil {
		return err
	}
	files := map[string]string{
		"containerd.toml":                     containerd,
		"kubelet.yaml":                        kubelet,
		"kubelet.kubeconfig":                  string(kubeconfig),
		"fs/etc/cni/net.d/10-podnet.conflist": podnet,
	}
	for f, content := range files {
		p := filepath.Join(n.Dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return err
		}
	}
	bin := filepath.Join(n.Dir, "fs/opt/cni/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		data, err := os.ReadFile(filepath.Join(n.cp.Tools.CNIPluginsDir, p))
		if err != nil {
			return fmt.Errorf("the node's CNI plugins: %w", err)
		}
		if err := os.WriteFile(filepath.Join(bin, p), data, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// tail returns the last lines of a file.
func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// SandboxOf is the ID of the pod's running sandbox on this node, as its
// containerd has it ("" when there is none).
func (n *RealNode) SandboxOf(ctx context.Context, t testing.TB, pod *corev1.Pod) string {
	t.Helper()
	out, err := n.Exec(ctx, "ctr", "--address", nodeContainerdSocket, "-n", "k8s.io", "tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	running := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] == "RUNNING" {
			running[f[0]] = true
		}
	}
	out, err = n.Exec(ctx, "ctr", "--address", nodeContainerdSocket, "-n", "k8s.io", "containers", "ls", "-q",
		fmt.Sprintf(`labels."io.kubernetes.pod.uid"==%s,labels."io.cri-containerd.kind"==sandbox`, pod.UID))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range strings.Fields(string(out)) {
		if running[id] {
			return id
		}
	}
	return ""
}

// Kill kills the process of a sandbox (its pause process) or a container
// by its containerd ID with SIGKILL, as a crash would: the kubelet sees
// it die (and makes a new sandbox, or restarts the container as the pod's
// restart policy says).
func (n *RealNode) Kill(ctx context.Context, t testing.TB, id string) {
	t.Helper()
	if _, err := n.Exec(ctx, "ctr", "--address", nodeContainerdSocket, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id); err != nil {
		t.Fatal(err)
	}
}
