// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// What the harness does in place of the kubelet and the container
// runtime: it creates pods bound to a node, sends CNI requests through
// the agent's socket as the ipkeeper shim would, and writes pods and
// claims with its own client (straight to the API server, not through
// the faulty proxy: the kubelet is not under test).

const ifName = "net1"

// apiTimeout bounds the harness's own API writes, which are retried
// across API server restarts.
const apiTimeout = 90 * time.Second

// counters are the run's counts by name, for the summary and assertions.
type counters struct {
	mu   sync.Mutex
	m    map[string]int
	once map[string]bool
}

func (c *counters) inc(k string) { c.add(k, 1) }

// incOnce counts k once per id (a state seen by many check rounds is
// counted once per object).
func (c *counters) incOnce(k, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.once == nil {
		c.once = map[string]bool{}
	}
	if c.once[k+"\x00"+id] {
		return
	}
	c.once[k+"\x00"+id] = true
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
}

func (c *counters) add(k string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k] += n
}

func (c *counters) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

// with returns "k=v" pairs of the keys with prefix, sorted.
func (c *counters) with(prefix string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for k, v := range c.m {
		if strings.HasPrefix(k, prefix) {
			parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(k, prefix), v))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// podArgs renders the CNI_ARGS a runtime passes for the attachment, with
// MAC when its element asks for one, as Multus passes it to the plugin
// (whose IPAM, ipkeeper, reads it on a sticky_mac network only).
func podArgs(a *attachment) string {
	args := fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s;K8S_POD_INFRA_CONTAINER_ID=%s",
		a.podNS, a.podName, a.podUID, a.containerID)
	if a.mac != "" {
		args += ";MAC=" + a.mac
	}
	return args
}

// cni sends one CNI request for attachment a to node n and classifies
// the answer. A failure must be a CNI error with a code; anything else
// while the agent is up the whole time is an I5 violation.
func (r *runner) cni(ctx context.Context, op int, n *node, cmd string, a *attachment, conf json.RawMessage) (*cniproto.Response, error) {
	req := cniproto.Request{Command: cmd, ContainerID: a.containerID, IfName: a.ifName, Args: podArgs(a), Config: conf}
	if cmd != cniproto.CmdDel {
		req.Netns = "/var/run/netns/" + a.containerID
	}
	upBefore, epoch := n.state()
	seq := r.hist.begin(op, cmd, fmt.Sprintf("%s %s/%s %s net=%s", n.name, a.podNS, a.podName, a.containerID, a.network))
	resp, err := n.client.Do(ctx, req)
	res := "ok"
	if err != nil {
		res = "error: " + err.Error()
	} else if cmd == cniproto.CmdAdd {
		res = "ok " + resultIPs(resp)
	}
	r.hist.end(seq, res)

	r.classify(ctx, cmd, n, upBefore, epoch, err, a)
	return resp, err
}

// classify counts a CNI answer; a failure that is not a CNI error with a
// code while the agent was up the whole time is an I5 violation, unless
// the harness itself gave up on the request (its context ended: the run
// stopping its VM actors mid-operation).
func (r *runner) classify(ctx context.Context, cmd string, n *node, upBefore bool, epoch int, err error, a *attachment) {
	if err == nil {
		r.counts.inc("cni:" + cmd + ":ok")
		return
	}
	if ctx.Err() != nil {
		r.counts.inc("cni:" + cmd + ":cancelled-by-harness")
		return
	}
	if code, ok := cniCode(err); ok {
		r.counts.inc(fmt.Sprintf("cni:%s:code%d", cmd, code))
		if strings.Contains(err.Error(), "exhausted") {
			r.counts.inc("exhausted")
		}
		if strings.Contains(err.Error(), "spec.maxAddressesPerNamespace") {
			r.counts.inc("quota-refused") // the small pool's quota (I15)
		}
		return
	}
	upAfter, epochAfter := n.state()
	if !upBefore || !upAfter || epoch != epochAfter {
		r.counts.inc("cni:" + cmd + ":agent-down")
		return
	}
	r.counts.inc("cni:" + cmd + ":transport-while-up")
	r.violate("I5", "transport-error", fmt.Sprintf("%s to agent %s (up and not restarted during the request) failed without a CNI error: %v", cmd, n.name, err),
		a.podName, a.containerID)
}

// cniCode returns the code of a CNI error.
func cniCode(err error) (uint, bool) {
	var cerr *types.Error
	if errors.As(err, &cerr) && cerr.Code != 0 {
		return cerr.Code, true
	}
	return 0, false
}

func resultIPs(resp *cniproto.Response) string {
	ips, err := parseResult(resp)
	if err != nil {
		return err.Error()
	}
	return formatAddrs(ips)
}

func parseResult(resp *cniproto.Response) ([]netip.Addr, error) {
	res := &types100.Result{}
	if err := json.Unmarshal(resp.Result, res); err != nil {
		return nil, fmt.Errorf("decoding ADD result %s: %w", resp.Result, err)
	}
	var out []netip.Addr
	for _, ipc := range res.IPs {
		ip, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok {
			return nil, fmt.Errorf("ADD result has a bad address %v", ipc.Address)
		}
		out = append(out, ip.Unmap())
	}
	return out, nil
}

// api runs one of the harness's own API writes, retrying across API
// server restarts.
func (r *runner) api(ctx context.Context, op int, what, target string, fn func(context.Context) error) error {
	seq := r.hist.begin(op, what, target)
	var last error
	err := framework.Eventually(ctx, apiTimeout, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		last = fn(ctx)
		return last == nil, nil
	})
	if err != nil {
		err = fmt.Errorf("%s %s: %w (last error: %w)", what, target, err, last)
		r.harnessError(err)
	}
	r.hist.end(seq, errString(err))
	return err
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + err.Error()
}

// createPod creates a pod bound to node whose networks annotation has
// one element, as a user (or KubeVirt) would write it.
func (r *runner) createPod(ctx context.Context, op int, name, node string, elem map[string]any) (*corev1.Pod, error) {
	annot, err := json.Marshal([]any{elem})
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Annotations: map[string]string{
			multus.Annotation: string(annot),
		}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	err = r.api(ctx, op, "create-pod", name+" on "+node, func(ctx context.Context) error {
		obj := pod.DeepCopy()
		err := r.c.cp.Client.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			// An earlier attempt was applied but its answer lost.
			err = r.c.cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		}
		if err == nil {
			pod = obj
		}
		return err
	})
	return pod, err
}

// deletePod removes a pod at once (no kubelet runs to finish a graceful
// deletion).
func (r *runner) deletePod(ctx context.Context, op int, pod *corev1.Pod) error {
	return r.api(ctx, op, "delete-pod", pod.Name, func(ctx context.Context) error {
		uid := pod.UID
		err := r.c.cp.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// createClaim makes an IPAMClaim as a tool other than ipkeeper-controller
// would: spec.network and spec.interface, no owner labels, and, when
// requested is set, the addresses it asks for (the requested-addresses
// annotation, a JSON list). ipkeeper-controller fills it.
func (r *runner) createClaim(ctx context.Context, op int, name string, requested []netip.Addr, fallback bool) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: networks[poolVM].name, Interface: ifName},
	}
	target := name
	if len(requested) > 0 {
		addrs := make([]string, len(requested))
		for i, ip := range requested {
			addrs[i] = ip.String()
		}
		raw, err := json.Marshal(addrs)
		if err != nil {
			return nil, err
		}
		claim.Annotations = map[string]string{claimstatus.RequestedAnnotation: string(raw)}
		target += " requesting " + formatAddrs(requested)
		if fallback {
			claim.Annotations[claimstatus.RequestedFallbackAnnotation] = claimstatus.FallbackOtherAddresses
			target += " (or other addresses)"
		}
	}
	err := r.api(ctx, op, "create-claim", target, func(ctx context.Context) error {
		obj := claim.DeepCopy()
		err := r.c.cp.Client.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			if err = r.c.cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err == nil && obj.DeletionTimestamp != nil {
				err = fmt.Errorf("claim %s is still being deleted", name)
			}
		}
		if err == nil {
			claim = obj
		}
		return err
	})
	if err == nil {
		r.model.claimCreated(claim.UID, requested, fallback)
	}
	return claim, err
}

func (r *runner) deleteClaim(ctx context.Context, op int, name string) error {
	return r.api(ctx, op, "delete-claim", name, func(ctx context.Context) error {
		claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		err := r.c.cp.Client.Delete(ctx, claim)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		// Wait until it is gone, so the next claim of this name is new.
		if err := r.c.cp.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); !apierrors.IsNotFound(err) {
			return fmt.Errorf("claim %s not gone yet (%w)", name, err)
		}
		return nil
	})
}
