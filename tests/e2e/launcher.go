// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/containernetworking/cni/libcni"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// The node side of the launcher pods the real virt-controller creates
// (framework.KubeVirt's PodRunner): the Cluster's kubelet runs their
// sandboxes through the real Multus, and stands in for Multus' dynamic
// networks controller, which the thin Multus plugin used here lacks: a
// network hot-plugged into a running launcher is attached by running the
// NAD's own plugin chain in the sandbox, with the pod interface name
// virt-controller chose, as that controller does through the Multus daemon.

// attachment is one network of a launcher's sandbox, as its NAD's plugin
// chain runs it.
type attachment struct {
	conf *libcni.NetworkConfigList
	rt   *libcni.RuntimeConf
	// hot: attached after the sandbox's start, so Multus' DEL does not
	// know it.
	hot bool
}

// runLauncher starts the pod's sandbox (Multus ADD of every network in its
// annotation), or, when it runs already, attaches the hot-plugged
// interfaces; it returns each interface's address as the sandbox has it.
func (c *Cluster) runLauncher(ctx context.Context, pod *corev1.Pod, ifaces []string) (map[string][]string, error) {
	s := c.Sandbox(pod.UID)
	if s == nil {
		// The chains are read first: an unplug removes the element from
		// the annotation before the interface is detached.
		chains := map[string]*libcni.NetworkConfigList{}
		for _, iface := range ifaces {
			conf, err := c.nadChain(ctx, pod, iface)
			if err != nil {
				return nil, err
			}
			chains[iface] = conf
		}
		var err error
		if s, err = c.runRetried(ctx, pod); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.nets = map[string]*attachment{}
		for iface, conf := range chains {
			rt := *s.rt
			rt.IfName = iface
			s.nets[iface] = &attachment{conf: conf, rt: &rt}
		}
		s.mu.Unlock()
	} else {
		for _, iface := range ifaces {
			if err := c.attach(ctx, s, pod, iface); err != nil {
				return nil, err
			}
		}
	}
	addrs := make(map[string][]string, len(ifaces))
	for _, iface := range ifaces {
		p, err := s.Addr(ctx, iface)
		if err != nil {
			return nil, err
		}
		addrs[iface] = []string{p.String()}
	}
	return addrs, nil
}

// launcherRetryFor bounds how long a launcher's sandbox is tried again
// after a failed ADD, and launcherRetryEvery spaces the tries.
const (
	launcherRetryFor   = 2 * time.Minute
	launcherRetryEvery = time.Second
)

// runRetried runs a launcher pod's sandbox as a kubelet does: a sandbox
// whose ADD failed (its IPAMClaim has no addresses yet, say) is torn down
// and tried again, until launcherRetryFor has passed.
func (c *Cluster) runRetried(ctx context.Context, pod *corev1.Pod) (*Sandbox, error) {
	deadline := time.Now().Add(launcherRetryFor)
	for {
		s, err := c.RunPod(ctx, pod)
		if err == nil || time.Now().After(deadline) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(launcherRetryEvery):
		}
	}
}

// attach runs ADD of the NAD behind the pod's networks annotation element
// for iface in the running sandbox s.
func (c *Cluster) attach(ctx context.Context, s *Sandbox, pod *corev1.Pod, iface string) error {
	conf, mac, err := c.nadChainAndMAC(ctx, pod, iface)
	if err != nil {
		return err
	}
	rt := *s.rt
	rt.IfName = iface
	if mac != "" {
		// As the Multus daemon passes an element's mac: CNI_ARGS MAC.
		rt.Args = append(slices.Clone(rt.Args), [2]string{"MAC", mac})
	}
	addCtx, cancel := context.WithTimeout(ctx, cniTimeout)
	defer cancel()
	if _, err := s.Node.cni.AddNetworkList(addCtx, conf, &rt); err != nil {
		return fmt.Errorf("attaching %s to pod %s/%s: %w", iface, pod.Namespace, pod.Name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nets == nil {
		s.nets = map[string]*attachment{}
	}
	s.nets[iface] = &attachment{conf: conf, rt: &rt, hot: true}
	return nil
}

// nadChain is the plugin chain of the NAD behind the pod's networks
// annotation element for iface.
func (c *Cluster) nadChain(ctx context.Context, pod *corev1.Pod, iface string) (*libcni.NetworkConfigList, error) {
	conf, _, err := c.nadChainAndMAC(ctx, pod, iface)
	return conf, err
}

// nadChainAndMAC is nadChain and the element's mac ("" for none).
func (c *Cluster) nadChainAndMAC(ctx context.Context, pod *corev1.Pod, iface string) (*libcni.NetworkConfigList, string, error) {
	var live corev1.Pod
	if err := c.CP.Client.Get(ctx, client.ObjectKeyFromObject(pod), &live); err != nil {
		return nil, "", fmt.Errorf("reading pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	elems, err := multus.ParseElements(live.Annotations[multus.Annotation], pod.Namespace)
	if err != nil {
		return nil, "", fmt.Errorf("pod %s/%s networks annotation: %w", pod.Namespace, pod.Name, err)
	}
	for _, e := range elems {
		if e.Interface != iface {
			continue
		}
		var nad nadv1.NetworkAttachmentDefinition
		if err := c.CP.Client.Get(ctx, e.NAD(), &nad); err != nil {
			return nil, "", fmt.Errorf("reading NAD %s of pod %s/%s: %w", e.NAD(), pod.Namespace, pod.Name, err)
		}
		conf, err := confList([]byte(nad.Spec.Config))
		if err != nil {
			return nil, "", fmt.Errorf("NAD %s: %w", e.NAD(), err)
		}
		return conf, e.MAC, nil
	}
	return nil, "", fmt.Errorf("pod %s/%s: no networks annotation element for interface %s", pod.Namespace, pod.Name, iface)
}

// detachLauncher runs DEL of hot-unplugged interfaces in the pod's sandbox.
func (c *Cluster) detachLauncher(ctx context.Context, pod *corev1.Pod, ifaces []string) error {
	s := c.Sandbox(pod.UID)
	if s == nil {
		return fmt.Errorf("pod %s/%s has no running sandbox", pod.Namespace, pod.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, iface := range ifaces {
		a := s.nets[iface]
		if a == nil {
			return fmt.Errorf("pod %s/%s: no attachment %s to detach", pod.Namespace, pod.Name, iface)
		}
		// DEL with the NAD's chain, as the dynamic networks controller
		// does; for a network Multus attached at the start, its DEL at
		// teardown repeats it, which CNI DEL allows.
		delCtx, cancel := context.WithTimeout(ctx, cniTimeout)
		err := s.Node.cni.DelNetworkList(delCtx, a.conf, a.rt)
		cancel()
		if err != nil {
			return fmt.Errorf("detaching %s from pod %s/%s: %w", iface, pod.Namespace, pod.Name, err)
		}
		delete(s.nets, iface)
	}
	return nil
}

// stopLauncher tears the pod's sandbox down (CNI DEL), as the kubelet does
// when its containers end or it is deleted; it is idempotent.
func (c *Cluster) stopLauncher(ctx context.Context, pod *corev1.Pod) error {
	s := c.Sandbox(pod.UID)
	if s == nil {
		return nil
	}
	if !c.teardown(ctx, s) {
		return fmt.Errorf("CNI DEL of pod %s/%s failed (see the node's CNI log %s)", pod.Namespace, pod.Name, s.Node.CNILog)
	}
	return nil
}

// confList reads a NAD's config, a single plugin or a list, as Multus does:
// a single plugin becomes a list of one.
func confList(raw []byte) (*libcni.NetworkConfigList, error) {
	var probe struct {
		CNIVersion string          `json:"cniVersion"`
		Name       string          `json:"name"`
		Plugins    json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("config is not JSON: %w", err)
	}
	if probe.Plugins == nil {
		list, err := json.Marshal(map[string]any{"cniVersion": probe.CNIVersion, "name": probe.Name, "plugins": []json.RawMessage{raw}})
		if err != nil {
			return nil, err
		}
		raw = list
	}
	return libcni.NetworkConfFromBytes(raw)
}
