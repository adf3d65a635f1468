// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/node/agent"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestAgentsRacingHaveNoDuplicates: three agents (three simulated nodes,
// each with its own caches) serve 600 concurrent ADDs on one network. Every
// address is unique and every success has exactly one reservation, owned by
// its pod.
func TestAgentsRacingHaveNoDuplicates(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "race")
	const network, perNode = "race-net", 200
	conf := framework.NetConf(network, map[string]any{"range": "10.60.0.0/22"})
	cp.InlinePool(t, ns, conf) // no controller here: the pool it would make from the NAD
	agents := []*framework.Agent{cp.StartAgent(t, "node-a"), cp.StartAgent(t, "node-b"), cp.StartAgent(t, "node-c")}

	type job struct {
		a   *framework.Agent
		pod *corev1.Pod
	}
	var jobs []job
	for _, a := range agents {
		for _, p := range cp.CreatePods(t, ns, a.Node, a.Node, perNode) {
			jobs = append(jobs, job{a, p})
		}
	}
	var (
		mu    sync.Mutex
		byIP  = map[netip.Addr]string{}
		fails []error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 48)
	)
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := j.a.Add(ctx, j.pod, "net1", conf)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fails = append(fails, fmt.Errorf("%s: %w", j.pod.Name, err))
				return
			}
			ips := resultIPs(t, res)
			if len(ips) != 1 {
				fails = append(fails, fmt.Errorf("%s: want 1 IP, got %v", j.pod.Name, ips))
				return
			}
			if other, dup := byIP[ips[0]]; dup {
				fails = append(fails, fmt.Errorf("duplicate IP %s: %s and %s", ips[0], other, j.pod.Name))
			}
			byIP[ips[0]] = j.pod.Name
		}()
	}
	wg.Wait()
	if len(fails) > 0 {
		t.Fatalf("%d of %d ADDs failed or collided; first: %v", len(fails), len(jobs), fails[0])
	}
	if len(byIP) != len(jobs) {
		t.Fatalf("got %d distinct IPs for %d ADDs", len(byIP), len(jobs))
	}
	res := reservationsOf(t, network)
	if len(res) != len(jobs) {
		t.Fatalf("got %d reservations for %d successful ADDs", len(res), len(jobs))
	}
	for _, r := range res {
		ip := netip.MustParseAddr(r.Spec.IP)
		if byIP[ip] != r.Spec.Owner.Name || r.Spec.Owner.Kind != ipkeeperv1alpha1.OwnerPod {
			t.Errorf("reservation %s: owner %s %s, but %s was handed to %q", r.Name, r.Spec.Owner.Kind, r.Spec.Owner.Name, ip, byIP[ip])
		}
		if r.Name != naming.Reservation(network, ip) {
			t.Errorf("reservation %s is not named after (network, IP)", r.Name)
		}
	}
}

// TestAgentExhaustion fills a /24 past capacity from two agents: the excess
// ADDs fail with an error naming the network and range, every success holds
// exactly one address, and after a DEL the freed address is handed out again.
func TestAgentExhaustion(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "exhaust")
	const network = "exhaust-net"
	conf := framework.NetConf(network, map[string]any{"range": "10.61.0.0/24", "gateway": "10.61.0.1"})
	cp.InlinePool(t, ns, conf) // no controller here: the pool it would make from the NAD
	const capacity = 253       // .1 is the gateway, .0 and .255 are never handed out
	agents := []*framework.Agent{cp.StartAgent(t, "node-x"), cp.StartAgent(t, "node-y")}
	pods := map[*framework.Agent][]*corev1.Pod{}
	for _, a := range agents {
		pods[a] = cp.CreatePods(t, ns, a.Node, a.Node, 130)
	}
	var (
		mu        sync.Mutex
		ok        = map[netip.Addr]*corev1.Pod{}
		exhausted []error
		other     []error
		wg        sync.WaitGroup
		sem       = make(chan struct{}, 32)
	)
	for a, ps := range pods {
		for _, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				res, err := a.Add(ctx, p, "net1", conf)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok[resultIPs(t, res)[0]] = p
				case strings.Contains(err.Error(), "exhausted"):
					exhausted = append(exhausted, err)
				default:
					other = append(other, err)
				}
			}()
		}
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("unexpected errors: %v", other)
	}
	if len(ok) != capacity || len(exhausted) != 260-capacity {
		t.Fatalf("got %d successes and %d exhaustion errors, want %d and %d", len(ok), len(exhausted), capacity, 260-capacity)
	}
	mustContain(t, exhausted[0], `network "exhaust-net"`, "10.61.0.0/24")
	if _, gw := ok[netip.MustParseAddr("10.61.0.1")]; gw {
		t.Errorf("the gateway was handed out")
	}
	if n := len(reservationsOf(t, network)); n != capacity {
		t.Fatalf("%d reservations after exhaustion, want %d", n, capacity)
	}

	// Release one address; a pod that failed before now gets exactly it.
	freed := netip.MustParseAddr("10.61.0.77")
	holder := ok[freed]
	a := agentFor(agents, holder)
	if err := a.Del(ctx, holder, framework.SandboxID(holder), "net1", conf); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	latecomer := cp.CreatePods(t, ns, a.Node, "late", 1)[0]
	res, err := a.Add(ctx, latecomer, "net1", conf)
	if err != nil {
		t.Fatalf("ADD after DEL freed an address: %v", err)
	}
	if got := resultIPs(t, res)[0]; got != freed {
		t.Fatalf("ADD after DEL got %s, want the freed %s", got, freed)
	}
}

func agentFor(agents []*framework.Agent, p *corev1.Pod) *framework.Agent {
	for _, a := range agents {
		if a.Node == p.Spec.NodeName {
			return a
		}
	}
	return nil
}

// TestAgentAddIsIdempotentAndDelReleases covers the lifecycle of one attachment.
func TestAgentAddIsIdempotentAndDelReleases(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "lifecycle")
	const network = "lifecycle-net"
	conf := framework.NetConf(network, map[string]any{"range": "10.62.0.0/28"})
	cp.InlinePool(t, ns, conf) // no controller here: the pool it would make from the NAD
	a := cp.StartAgent(t, "node-l")
	pod := cp.CreatePods(t, ns, a.Node, "p", 1)[0]

	first, err := a.Add(ctx, pod, "net1", conf)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.Add(ctx, pod, "net1", conf)
	if err != nil {
		t.Fatal(err)
	}
	ip := resultIPs(t, first)[0]
	if got := resultIPs(t, again)[0]; got != ip {
		t.Fatalf("retried ADD returned %s, first returned %s", got, ip)
	}
	if n := len(reservationsOf(t, network)); n != 1 {
		t.Fatalf("%d reservations after a retried ADD, want 1", n)
	}

	// A second interface of the same pod on the same network is a second attachment.
	second, err := a.Add(ctx, pod, "net2", conf)
	if err != nil {
		t.Fatal(err)
	}
	if resultIPs(t, second)[0] == ip {
		t.Fatalf("net2 got the address of net1")
	}

	// A new sandbox of the same pod keeps the address; the old sandbox's DEL must not free it.
	resp, err := a.Client.Do(ctx, cniproto.Request{Command: cniproto.CmdAdd, ContainerID: "sandbox-2", Netns: "/x",
		IfName: "net1", Args: framework.PodArgs(pod), Config: conf})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(resp.Result), ip.String()) {
		t.Fatalf("new sandbox got %s, want %s", resp.Result, ip)
	}
	if err := a.Del(ctx, pod, framework.SandboxID(pod), "net1", conf); err != nil {
		t.Fatal(err)
	}
	r := &ipkeeperv1alpha1.IPReservation{}
	if err := cp.Client.Get(ctx, keyOf(naming.Reservation(network, ip)), r); err != nil {
		t.Fatalf("the old sandbox's DEL released the new sandbox's address: %v", err)
	}
	if r.Spec.ContainerID != "sandbox-2" {
		t.Fatalf("reservation not moved to the new sandbox: %q", r.Spec.ContainerID)
	}

	// DEL of the current sandbox releases; DEL again (already gone) succeeds.
	for i := range 2 {
		if err := a.Del(ctx, pod, "sandbox-2", "net1", conf); err != nil {
			t.Fatalf("DEL #%d: %v", i+1, err)
		}
	}
	if err := cp.Client.Get(ctx, keyOf(naming.Reservation(network, ip)), r); err == nil {
		t.Fatalf("reservation of %s still exists after DEL", ip)
	}
	// The freed address is reusable: request it statically for a new pod.
	newcomer := cp.CreatePods(t, ns, a.Node, "n", 1)[0]
	static := framework.NetConf(network, map[string]any{"range": "10.62.0.0/28"})
	static = withRuntimeIPs(t, static, ip.String()+"/28")
	res, err := a.Add(ctx, newcomer, "net1", static)
	if err != nil {
		t.Fatalf("static request for the freed %s: %v", ip, err)
	}
	if got := resultIPs(t, res)[0]; got != ip {
		t.Fatalf("static request got %s, want %s", got, ip)
	}
}

// TestAgentStaticIPs: the Multus "ips" capability reserves exactly the
// requested address, or fails naming who holds it or why it is unusable.
func TestAgentStaticIPs(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "static")
	const network = "static-net"
	base := framework.NetConf(network, map[string]any{"range": "10.63.0.0/24", "gateway": "10.63.0.1"})
	cp.InlinePool(t, ns, base) // no controller here: the pool it would make from the NAD
	a := cp.StartAgent(t, "node-s")
	pods := cp.CreatePods(t, ns, a.Node, "s", 3)

	res, err := a.Add(ctx, pods[0], "net1", withRuntimeIPs(t, base, "10.63.0.50/24"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resultIPs(t, res)[0]; got != netip.MustParseAddr("10.63.0.50") {
		t.Fatalf("got %s, want 10.63.0.50", got)
	}
	_, err = a.Add(ctx, pods[1], "net1", withRuntimeIPs(t, base, "10.63.0.50/24"))
	mustContain(t, err, "10.63.0.50", "already reserved", pods[0].Name)
	_, err = a.Add(ctx, pods[1], "net1", withRuntimeIPs(t, base, "10.63.0.1/24"))
	mustContain(t, err, "10.63.0.1", "gateway")
	_, err = a.Add(ctx, pods[2], "net1", withRuntimeIPs(t, base, "10.99.0.5/24"))
	mustContain(t, err, "10.99.0.5")
	if n := len(reservationsOf(t, network)); n != 1 {
		t.Fatalf("%d reservations after refused static requests, want 1", n)
	}
}

// TestAgentDualStack: one address per family, rolled back together.
func TestAgentDualStack(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "dual")
	const network = "dual-net"
	conf := framework.NetConf(network, map[string]any{"ipRanges": []any{
		map[string]any{"range": "10.64.0.0/30"}, // 2 usable
		map[string]any{"range": "fd00:64::/64"},
	}})
	cp.InlinePool(t, ns, conf) // no controller here: the pool it would make from the NAD
	a := cp.StartAgent(t, "node-d")
	pods := cp.CreatePods(t, ns, a.Node, "d", 3)
	for _, p := range pods[:2] {
		res, err := a.Add(ctx, p, "net1", conf)
		if err != nil {
			t.Fatal(err)
		}
		ips := resultIPs(t, res)
		if len(ips) != 2 || !ips[0].Is4() || !ips[1].Is6() {
			t.Fatalf("want one IPv4 and one IPv6 address, got %v", ips)
		}
	}
	// IPv4 is exhausted now: the third pod fails and must not keep an IPv6 address.
	_, err := a.Add(ctx, pods[2], "net1", conf)
	mustContain(t, err, "exhausted", "10.64.0.0/30")
	if n := len(reservationsOf(t, network)); n != 4 {
		t.Fatalf("%d reservations, want 4 (the failed ADD's IPv6 address rolled back)", n)
	}
}

// TestAgentRefusesUnknownPods: the pod named in CNI_ARGS must exist with that UID.
func TestAgentRefusesUnknownPods(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "pods")
	conf := framework.NetConf("pods-net", map[string]any{"range": "10.65.0.0/24"})
	cp.InlinePool(t, ns, conf) // no controller here: the pool it would make from the NAD
	a := cp.StartAgent(t, "node-p")
	pod := cp.CreatePods(t, ns, a.Node, "real", 1)[0]

	ghost := pod.DeepCopy()
	ghost.Name = "ghost"
	_, err := a.Add(ctx, ghost, "net1", conf)
	mustContain(t, err, ns+"/ghost", "does not exist")

	stale := pod.DeepCopy()
	stale.UID = "00000000-0000-0000-0000-000000000000"
	_, err = a.Add(ctx, stale, "net1", conf)
	mustContain(t, err, "K8S_POD_UID", string(pod.UID))

	_, err = a.Add(ctx, pod, "net1", framework.NetConf("pods-net", map[string]any{"range": "10.65.0.0/33"}))
	mustContain(t, err, "ipam.range", "10.65.0.0/33")
	if cniCode(err) != 7 {
		t.Errorf("invalid config: CNI code %d, want 7", cniCode(err))
	}
	if n := len(reservationsOf(t, "pods-net")); n != 0 {
		t.Fatalf("%d reservations after refused requests, want 0", n)
	}
}

// TestAgentGC: the CNI GC verb releases this node's ephemeral reservations
// on the network that are not in the valid-attachments list, and nothing else.
func TestAgentGC(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "gc-verb")
	const network = "gc-net"
	conf := framework.NetConf(network, map[string]any{"range": "10.66.0.0/24"})
	cp.InlinePool(t, ns, conf) // no controller here: the pool it would make from the NAD
	otherConf := framework.NetConf("gc-other-net", map[string]any{"range": "10.67.0.0/24"})
	cp.InlinePool(t, ns, otherConf) // no controller here: the pool it would make from the NAD
	// Every reservation here was just written: spare none (--cni-gc-min-age).
	noMinAge := func(o *agent.Options) { o.CNIGCMinAge = -1 }
	here, there := cp.StartAgent(t, "node-g1", noMinAge), cp.StartAgent(t, "node-g2", noMinAge)
	local := cp.CreatePods(t, ns, here.Node, "local", 3)
	remote := cp.CreatePods(t, ns, there.Node, "remote", 1)[0]
	for _, p := range local {
		if _, err := here.Add(ctx, p, "net1", conf); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := here.Add(ctx, local[0], "net2", otherConf); err != nil {
		t.Fatal(err)
	}
	if _, err := there.Add(ctx, remote, "net1", conf); err != nil {
		t.Fatal(err)
	}

	var gcConf map[string]any
	if err := json.Unmarshal(conf, &gcConf); err != nil {
		t.Fatal(err)
	}
	gcConf["cni.dev/valid-attachments"] = []any{map[string]any{"containerID": framework.SandboxID(local[0]), "ifname": "net1"}}
	raw, _ := json.Marshal(gcConf)
	if _, err := here.Client.Do(ctx, cniproto.Request{Command: cniproto.CmdGC, Config: raw}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	kept := map[string]bool{}
	for _, r := range reservationsOf(t, network) {
		kept[r.Spec.Owner.Name] = true
	}
	if !kept[local[0].Name] || !kept[remote.Name] || kept[local[1].Name] || kept[local[2].Name] || len(kept) != 2 {
		t.Fatalf("after GC the network holds %v; want only %s (valid) and %s (other node)", kept, local[0].Name, remote.Name)
	}
	if n := len(reservationsOf(t, "gc-other-net")); n != 1 {
		t.Fatalf("GC of one network touched another: %d reservations left there, want 1", n)
	}
}

// TestAgentStatusAndCheck: STATUS succeeds on a synced agent; CHECK passes
// for a live attachment and fails after its DEL.
func TestAgentStatusAndCheck(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "check")
	conf := framework.NetConf("check-net", map[string]any{"range": "10.68.0.0/24"})
	cp.InlinePool(t, ns, conf) // no controller here: the pool it would make from the NAD
	a := cp.StartAgent(t, "node-c1")
	if err := a.Client.Status(ctx); err != nil {
		t.Fatalf("STATUS on a synced agent: %v", err)
	}
	pod := cp.CreatePods(t, ns, a.Node, "c", 1)[0]
	if _, err := a.Add(ctx, pod, "net1", conf); err != nil {
		t.Fatal(err)
	}
	check := cniproto.Request{Command: cniproto.CmdCheck, ContainerID: framework.SandboxID(pod), Netns: "/x", IfName: "net1", Args: framework.PodArgs(pod), Config: conf}
	if _, err := a.Client.Do(ctx, check); err != nil {
		t.Fatalf("CHECK of a live attachment: %v", err)
	}
	if err := a.Del(ctx, pod, framework.SandboxID(pod), "net1", conf); err != nil {
		t.Fatal(err)
	}
	_, err := a.Client.Do(ctx, check)
	mustContain(t, err, "holds no address")
}
