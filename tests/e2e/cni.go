// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/naming"
)

// cniTimeout bounds one plugin chain invocation. The shim itself gives the
// agent 60s (cniproto.DefaultTimeout).
const cniTimeout = 90 * time.Second

// IPAM returns an ipam section of type ipkeeper with the given
// whereabouts-style keys (range, gateway, ...). The node's agent socket
// reaches the shim through the environment (socketExec).
func (n *Node) IPAM(keys map[string]any) map[string]any {
	ipam := map[string]any{"type": "ipkeeper"}
	maps.Copy(ipam, keys)
	return ipam
}

// Conflist builds a CNI 1.0.0 network configuration list, as a runtime
// would read it from /etc/cni/net.d (or Multus from a NAD).
func Conflist(t testing.TB, name string, plugins ...map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": plugins})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(raw)
	if err != nil {
		t.Fatalf("parsing conflist %s: %v", raw, err)
	}
	return list
}

// Attachment is one pod interface on one network, driven through the
// node's CNI bin dir by libcni as a container runtime drives it, without
// Multus: the test gives the plugin list itself.
type Attachment struct {
	List  *libcni.NetworkConfigList
	RT    *libcni.RuntimeConf
	Pod   *corev1.Pod
	Node  *Node
	NetNS *NetNS
	// Result is the converted result of the last successful Add.
	Result *types100.Result
}

// NewAttachment prepares an attachment of pod's sandbox netns as ifname on
// list, with a fresh container ID and the CNI_ARGS a Kubernetes runtime
// sets. When t ends it is DELeted (errors are logged), as a runtime tears
// down a sandbox, whether or not ADD succeeded; DEL is idempotent.
func (n *Node) NewAttachment(t testing.TB, list *libcni.NetworkConfigList, netns *NetNS, ifname string, pod *corev1.Pod) *Attachment {
	t.Helper()
	containerID := UniqueSuffix(64)
	a := &Attachment{
		List:  list,
		Pod:   pod,
		Node:  n,
		NetNS: netns,
		RT: &libcni.RuntimeConf{
			ContainerID: containerID,
			NetNS:       netns.Path,
			IfName:      ifname,
			Args: [][2]string{
				{"IgnoreUnknown", "1"},
				{"K8S_POD_NAMESPACE", pod.Namespace},
				{"K8S_POD_NAME", pod.Name},
				{"K8S_POD_INFRA_CONTAINER_ID", containerID},
				{"K8S_POD_UID", string(pod.UID)},
			},
		},
	}
	t.Cleanup(func() {
		if err := a.Del(context.Background()); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return a
}

func (a *Attachment) String() string {
	return fmt.Sprintf("%s %s in %s (pod %s/%s on %s, container %.12s)", a.List.Name, a.RT.IfName, a.NetNS.Name, a.Pod.Namespace, a.Pod.Name, a.Node.Name, a.RT.ContainerID)
}

// Add runs ADD through the whole plugin list and records the result.
func (a *Attachment) Add(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, cniTimeout)
	defer cancel()
	res, err := a.Node.cni.AddNetworkList(ctx, a.List, a.RT)
	if err != nil {
		return fmt.Errorf("ADD %s: %w", a, err)
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return fmt.Errorf("ADD %s: converting result %v: %w", a, res, err)
	}
	a.Result = r
	return nil
}

// MustAdd is Add that fails t.
func (a *Attachment) MustAdd(t testing.TB) {
	t.Helper()
	if err := a.Add(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Del runs DEL through the whole plugin list.
func (a *Attachment) Del(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, cniTimeout)
	defer cancel()
	if err := a.Node.cni.DelNetworkList(ctx, a.List, a.RT); err != nil {
		return fmt.Errorf("DEL %s: %w", a, err)
	}
	return nil
}

// IP returns the one address of the last ADD result.
func (a *Attachment) IP(t testing.TB) netip.Prefix {
	t.Helper()
	if a.Result == nil {
		t.Fatalf("%s: no ADD result", a)
	}
	return singleIP(t, a.String(), a.Result)
}

func singleIP(t testing.TB, what string, r *types100.Result) netip.Prefix {
	t.Helper()
	if len(r.IPs) != 1 {
		t.Fatalf("%s: want exactly one IP in the result, got %d: %v", what, len(r.IPs), r)
	}
	ip, ok := netip.AddrFromSlice(r.IPs[0].Address.IP)
	if !ok {
		t.Fatalf("%s: result IP %v is not an address", what, r.IPs[0].Address.IP)
	}
	ones, _ := r.IPs[0].Address.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones)
}

// IPAMAdd invokes the ipkeeper shim directly with the environment and
// stdin a main plugin (bridge, macvlan) gives its IPAM delegate for this
// attachment, but with interface ifname (the attachment's when empty). It
// lets a test repeat the IPAM step, which the main plugin cannot: bridge
// refuses to create a second eth0.
func (a *Attachment) IPAMAdd(ctx context.Context, ifname string) (*types100.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, cniTimeout)
	defer cancel()
	shim, stdin, args, err := a.ipamInvocation("ADD", ifname)
	if err != nil {
		return nil, err
	}
	res, err := invoke.ExecPluginWithResult(ctx, shim, stdin, args, a.Node.exec)
	if err != nil {
		return nil, fmt.Errorf("ipkeeper ADD for %s as %s: %w", a, args.IfName, err)
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("ipkeeper ADD for %s as %s: converting result %v: %w", a, args.IfName, res, err)
	}
	return r, nil
}

// IPAMDel is IPAMAdd for DEL.
func (a *Attachment) IPAMDel(ctx context.Context, ifname string) error {
	ctx, cancel := context.WithTimeout(ctx, cniTimeout)
	defer cancel()
	shim, stdin, args, err := a.ipamInvocation("DEL", ifname)
	if err != nil {
		return err
	}
	if err := invoke.ExecPluginWithoutResult(ctx, shim, stdin, args, a.Node.exec); err != nil {
		return fmt.Errorf("ipkeeper DEL for %s as %s: %w", a, args.IfName, err)
	}
	return nil
}

func (a *Attachment) ipamInvocation(command, ifname string) (string, []byte, *invoke.Args, error) {
	if ifname == "" {
		ifname = a.RT.IfName
	}
	// What libcni hands the first plugin of the list, and that plugin its
	// delegate: the plugin's config plus the list's name and cniVersion.
	var plugin map[string]any
	if err := json.Unmarshal(a.List.Plugins[0].Bytes, &plugin); err != nil {
		return "", nil, nil, err
	}
	plugin["name"], plugin["cniVersion"] = a.List.Name, a.List.CNIVersion
	stdin, err := json.Marshal(plugin)
	if err != nil {
		return "", nil, nil, err
	}
	args := &invoke.Args{
		Command:     command,
		ContainerID: a.RT.ContainerID,
		NetNS:       a.RT.NetNS,
		PluginArgs:  a.RT.Args,
		IfName:      ifname,
		Path:        a.Node.BinDir,
	}
	return filepath.Join(a.Node.Agent.CNIBinDir, "ipkeeper"), stdin, args, nil
}

// Define makes list a network of the cluster, as a NetworkAttachmentDefinition
// in namespace (named after it, lowercased) carrying the list, and waits for
// ipkeeper-controller to make the inline network's IPPool from it: an
// inline network's addresses come from that pool, which no agent makes.
func (c *Cluster) Define(t testing.TB, namespace string, list *libcni.NetworkConfigList) {
	t.Helper()
	name := strings.ToLower(list.Name)
	c.CP.CreateNAD(t, namespace, name, list.Bytes)
	if _, err := c.CP.WaitPool(context.Background(), naming.InlinePool(list.Name)); err != nil {
		t.Fatalf("network %q: %v", list.Name, err)
	}
}
