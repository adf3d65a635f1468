// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
)

// CHECK of a secondary network on a real node. Neither containerd 1.6 nor
// the kubelet ever sends CNI CHECK, and Multus' CHECK checks only its
// default network's delegates, never a NAD's: no runtime here asks
// ipkeeper to CHECK an attachment. CheckAttachment sends the CHECK that
// Multus would delegate, the NAD's configuration with the result Multus
// cached at ADD (libcni's cache under Multus' CNIDir), from inside the
// node (this binary re-executed there, cniCheckMain), so the plugins run
// with the node's mounts and its agent's socket.
const (
	cniCheckEnv = "IPKEEPER_NODE_CNI_CHECK"
	// multusCNIDir is Multus' default cache of delegate results.
	multusCNIDir = "/var/lib/cni/multus"
)

type cniCheckRequest struct {
	Config      json.RawMessage `json:"config"`
	ContainerID string          `json:"containerID"`
	NetNS       string          `json:"netns"`
	IfName      string          `json:"ifName"`
	Args        [][2]string     `json:"args"`
}

// cniCheckMain runs one CHECK and exits 0 when it passes.
func cniCheckMain(raw string) {
	var req cniCheckRequest
	err := json.Unmarshal([]byte(raw), &req)
	if err == nil {
		var conf *libcni.PluginConfig
		if conf, err = libcni.NetworkPluginConfFromBytes(req.Config); err == nil {
			cni := libcni.NewCNIConfigWithCacheDir([]string{"/opt/cni/bin"}, multusCNIDir, nil)
			err = cni.CheckNetwork(context.Background(), conf, &libcni.RuntimeConf{
				ContainerID: req.ContainerID, NetNS: req.NetNS, IfName: req.IfName, Args: req.Args})
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "CHECK:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// CheckAttachment sends CNI CHECK for the pod's attachment ifName of the
// network whose (single-plugin) configuration is config, as Multus would
// delegate it; it returns the plugins' error.
func (n *RealNode) CheckAttachment(ctx context.Context, t testing.TB, pod *corev1.Pod, config, ifName string) error {
	t.Helper()
	sandbox, netns := n.podNetNS(ctx, t, pod)
	req, err := json.Marshal(cniCheckRequest{Config: json.RawMessage(config), ContainerID: sandbox, NetNS: netns, IfName: ifName,
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", pod.Namespace}, {"K8S_POD_NAME", pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", sandbox}, {"K8S_POD_UID", string(pod.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	a := n.nsenterArgs(self)
	cmd := exec.CommandContext(ctx, a[0], a[1:]...)
	cmd.Env = append(os.Environ(), cniCheckEnv+"="+string(req))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("CHECK of %s/%s %s in sandbox %.12s (netns %s): %w: %s", pod.Namespace, pod.Name, ifName, sandbox, netns, err, out)
	}
	return nil
}

// podNetNS is the pod's running sandbox and its network namespace's path
// in the node.
func (n *RealNode) podNetNS(ctx context.Context, t testing.TB, pod *corev1.Pod) (sandbox, netns string) {
	t.Helper()
	sandbox = n.SandboxOf(ctx, t, pod)
	if sandbox == "" {
		t.Fatalf("pod %s has no running sandbox on %s", pod.Name, n.Name)
	}
	out, err := n.Exec(ctx, "ctr", "--address", nodeContainerdSocket, "-n", "k8s.io", "containers", "info", sandbox)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Spec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string } `json:"namespaces"`
			} `json:"linux"`
		} `json:"Spec"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("reading sandbox %s: %v", sandbox, err)
	}
	for _, ns := range info.Spec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			return sandbox, ns.Path
		}
	}
	t.Fatalf("sandbox %s of pod %s has no network namespace", sandbox, pod.Name)
	return "", ""
}

// InPodNetwork runs a command of the node in the pod's network namespace,
// with the node's privileges (a pod's container has no NET_ADMIN).
func (n *RealNode) InPodNetwork(ctx context.Context, t testing.TB, pod *corev1.Pod, args ...string) ([]byte, error) {
	t.Helper()
	_, netns := n.podNetNS(ctx, t, pod)
	return n.Exec(ctx, append([]string{"nsenter", "--net=" + netns, "--"}, args...)...)
}
