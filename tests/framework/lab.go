// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// The real-node lane's network: the test process, etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler run in a network namespace of
// their own (the lab), made by EnterLab and gone with the process. Nodes are
// network namespaces of their own (realnode.go) plugged into the lab's two
// bridges: the LAN (node addresses, the control plane, routes to every
// node's pod network) and a bare L2 segment for the secondary network
// (NodeSecondaryBridge on every node is a port of it).
//
// The API server listens on LabAPIServerIP, which is also the first address
// of the service range, so the `kubernetes` Service's ClusterIP is the API
// server itself: pods reach it at KUBERNETES_SERVICE_HOST without
// kube-proxy, and its serving certificate names that address. It reaches
// admission webhooks at their pods' addresses (--enable-aggregator-routing)
// through the routes below.
const (
	// LabAPIServerIP is kube-apiserver's address and the kubernetes
	// Service's ClusterIP (the first address of LabServiceCIDR).
	LabAPIServerIP = "10.0.0.1"
	// LabServiceCIDR is the service range.
	LabServiceCIDR = "10.0.0.0/24"
	// labGatewayIP is the lab's address on the LAN, the nodes' default route.
	labGatewayIP = "10.99.0.1"
	labLANPrefix = 24
	// labLANBridge and labL2Bridge are the lab's bridges.
	labLANBridge = "lan0"
	labL2Bridge  = "l2net0"
	// labEnv marks the re-executed test process.
	labEnv = "IPKEEPER_LAB"
)

// nodeLANIP is the i-th node's address on the LAN (i from 0).
func nodeLANIP(i int) string { return fmt.Sprintf("10.99.0.%d", 11+i) }

// nodePodCIDR is the i-th node's pod network.
func nodePodCIDR(i int) string { return fmt.Sprintf("10.244.%d.0/24", i) }

// InLab reports whether this process runs in the lab (EnterLab's re-exec).
func InLab() bool { return os.Getenv(labEnv) == "1" }

// EnterLab re-executes the test binary in a new network namespace (unshare
// --net), once: call it first in TestMain. In the re-executed process it
// returns nil after bringing up the lab's loopback and bridges; in the
// first process it does not return unless the exec failed.
//
// The nodes' PID 1 is the same binary (nodeInit): EnterLab runs it, and
// never returns, in a process started as one.
func EnterLab() error {
	if dir := os.Getenv(nodeInitEnv); dir != "" {
		nodeInit(dir)
	}
	if req := os.Getenv(cniCheckEnv); req != "" {
		cniCheckMain(req)
	}
	if !InLab() {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			return fmt.Errorf("the real-node lane needs util-linux's unshare: %w", err)
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		args := append([]string{unshare, "--net", "--", self}, os.Args[1:]...)
		return syscall.Exec(unshare, args, append(os.Environ(), labEnv+"=1"))
	}
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", LabAPIServerIP + "/32", "dev", "lo"},
		{"link", "add", labLANBridge, "type", "bridge"},
		{"addr", "add", fmt.Sprintf("%s/%d", labGatewayIP, labLANPrefix), "dev", labLANBridge},
		{"link", "set", labLANBridge, "up"},
		{"link", "add", labL2Bridge, "type", "bridge"},
		{"link", "set", labL2Bridge, "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return fmt.Errorf("setting up the lab network: %w", err)
		}
	}
	// The lab routes between the nodes' pod networks; this namespace is
	// the lab's own, so the host's setting is untouched.
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}

// ipCmd runs `ip args...` in the current network namespace.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// nodeGatewayOf is the address of the node's pod bridge in cidr.
func nodeGatewayOf(cidr string) string {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		panic(err)
	}
	ip := n.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+1).String()
}

// startScheduler runs the real kube-scheduler (Options.Lab): with real
// nodes, pods are placed by it, not bound by the test.
func (cp *ControlPlane) startScheduler() error {
	if err := requireExecutables(cp.Tools.KubeScheduler); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	log, err := cp.newLog("kube-scheduler")
	if err != nil {
		return err
	}
	cmd := exec.Command(cp.Tools.KubeScheduler,
		"--kubeconfig="+cp.KubeconfigPath,
		"--authentication-kubeconfig="+cp.KubeconfigPath,
		"--authorization-kubeconfig="+cp.KubeconfigPath,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"-v=2",
	)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting kube-scheduler: %w", err)
	}
	cp.scheduler = cmd
	return nil
}
