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
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/node/agent"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// These tests stand in for what KubeVirt and a claims controller write: an
// IPAMClaim per VM network made as another tool makes them (no VM owns
// it), and virt-launcher-like pods whose networks annotation carries
// ipam-claim-reference (KubeVirt is not involved here: VM tests with the
// real virt-controller are in kubevirt_test.go). ipkeeper-controller runs
// in-process and fills the claims; the agents only read them.

// setClaimIPs writes a claim's status.ips as an administrator editing it
// would (retrying on the conflicts ipkeeper-controller's own status writes
// cause).
func setClaimIPs(t testing.TB, ns, name string, ips ...string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getClaim(t, ns, name)
		c.Status.IPs = ips
		return cp.Client.Status().Update(context.Background(), c)
	})
	if err != nil {
		t.Fatalf("writing status.ips of IPAMClaim %s/%s: %v", ns, name, err)
	}
}

// TestClaimFilledBeforeLaunchersWhichOnlyRead: ipkeeper-controller
// reserves a claim's addresses and records them as soon as the claim
// exists, with no launcher pod anywhere; a launcher's ADD returns them
// without a write of its agent; the DEL keeps them; a new launcher on
// another node (VM stopped and started) gets the same, and ownerPod
// follows the newest launcher.
func TestClaimFilledBeforeLaunchersWhichOnlyRead(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "claim")
	const network = "claim-net"
	conf := persistentConf(network, map[string]any{"ipRanges": []any{
		map[string]any{"range": "10.70.0.0/24"}, map[string]any{"range": "fd00:70::/64"}}})
	claimNetwork(t, ns, conf)
	a1, a2 := cp.StartAgent(t, "node-c1"), cp.StartAgent(t, "node-c2")
	claim := createClaim(t, ns, "vm1.blue", network)

	filled := waitFilled(t, ns, claim.Name)
	if len(filled.Status.IPs) != 2 {
		t.Fatalf("dual-stack claim: status.ips = %v, want one address per family", filled.Status.IPs)
	}
	cond := meta.FindStatusCondition(filled.Status.Conditions, "IPsAllocated")
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "SuccessfulAllocation" {
		t.Fatalf("IPsAllocated condition = %+v, want True/SuccessfulAllocation", cond)
	}
	var want []netip.Addr
	for _, s := range filled.Status.IPs {
		ip := netip.MustParsePrefix(s).Addr()
		want = append(want, ip)
		r := &ipkeeperv1alpha1.IPReservation{}
		if err := cp.Client.Get(ctx, keyOf(naming.Reservation(network, ip)), r); err != nil {
			t.Fatal(err)
		}
		if r.Spec.Owner.Kind != ipkeeperv1alpha1.OwnerIPAMClaim || r.Spec.Owner.UID != claim.UID || r.Spec.Node != "" {
			t.Fatalf("reservation of %s: owner %+v node %q, want the claim's, made by no node", ip, r.Spec.Owner, r.Spec.Node)
		}
		if r.Labels[naming.ClaimsBlockLabel] != "true" {
			t.Errorf("reservation of %s lacks %s: every agent would watch it", ip, naming.ClaimsBlockLabel)
		}
	}

	first := createLaunchers(t, ns, a1.Node, "virt-launcher-vm1-a", claim.Name, 1)[0]
	before := agentWrites(a1)
	res, err := a1.Add(ctx, first, launcherIf, conf)
	if err != nil {
		t.Fatal(err)
	}
	if got := resultIPs(t, res); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("launcher got %v, want the claim's %v", got, want)
	}
	if w := agentWrites(a1) - before; w != 0 {
		t.Errorf("the launcher's agent made %v API writes for a claim-backed ADD, want none", w)
	}
	waitOwnerPod(t, ns, claim.Name, first.Name)

	// VM stopped: the launcher's DEL keeps the claim's reservations.
	if err := a1.Del(ctx, first, framework.SandboxID(first), launcherIf, conf); err != nil {
		t.Fatal(err)
	}
	if n := len(reservationsOf(t, network)); n != 2 {
		t.Fatalf("%d reservations after the launcher's DEL, want the claim's 2", n)
	}
	// VM started again on another node.
	second := createLaunchers(t, ns, a2.Node, "virt-launcher-vm1-b", claim.Name, 1)[0]
	res, err = a2.Add(ctx, second, launcherIf, conf)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(resultIPs(t, res)) != fmt.Sprint(want) {
		t.Fatalf("restarted VM got %v, want %v", resultIPs(t, res), want)
	}
	waitOwnerPod(t, ns, claim.Name, second.Name)
}

// TestClaimLiveMigration: source and target launchers ADD at the same time
// on different nodes; both read the one status: the same addresses, one
// reservation per address, no write by either agent.
func TestClaimLiveMigration(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "migration")
	const network = "migration-net"
	conf := persistentConf(network, map[string]any{"range": "10.71.0.0/24"})
	claimNetwork(t, ns, conf)
	src, dst := cp.StartAgent(t, "node-m1"), cp.StartAgent(t, "node-m2")
	writes := agentWrites(src) + agentWrites(dst)
	for round := range 10 {
		claim := createClaim(t, ns, fmt.Sprintf("vm%d.blue", round), network)
		ps := createLaunchers(t, ns, src.Node, fmt.Sprintf("src-%d", round), claim.Name, 1)[0]
		pt := createLaunchers(t, ns, dst.Node, fmt.Sprintf("dst-%d", round), claim.Name, 1)[0]
		var wg sync.WaitGroup
		results := make([][]netip.Addr, 2)
		errs := make([]error, 2)
		for i, pair := range []struct {
			a *framework.Agent
			p *corev1.Pod
		}{{src, ps}, {dst, pt}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := pair.a.Add(ctx, pair.p, launcherIf, conf)
				if err == nil {
					results[i] = resultIPs(t, res)
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: source %v, target %v", round, errs[0], errs[1])
		}
		if fmt.Sprint(results[0]) != fmt.Sprint(results[1]) {
			t.Fatalf("round %d: source got %v, target %v", round, results[0], results[1])
		}
		if got := getClaim(t, ns, claim.Name).Status.IPs; len(got) != 1 || netip.MustParsePrefix(got[0]).Addr() != results[0][0] {
			t.Fatalf("round %d: claim status %v, pods got %v", round, got, results[0])
		}
		// Source goes away after the migration: the target keeps the address.
		if err := src.Del(ctx, ps, framework.SandboxID(ps), launcherIf, conf); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(reservationsOf(t, network)); n != 10 {
		t.Fatalf("%d reservations for 10 claims, want exactly one each", n)
	}
	if w := agentWrites(src) + agentWrites(dst) - writes; w != 0 {
		t.Fatalf("the agents made %v API writes for claim-backed ADDs and DELs, want none", w)
	}
}

// TestClaimCreatedLateOrNever: the ADD waits for a claim created after it
// started, which the controller then fills; it fails with "try again
// later" naming the claim when it never comes. With the controller down, a
// new launcher of a filled claim gets its addresses (it only reads), and a
// claim that exists but is not filled is waited for, then refused with the
// same code, saying so, reserving nothing.
func TestClaimCreatedLateOrNever(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "late")
	const network = "late-net"
	conf := persistentConf(network, map[string]any{"range": "10.72.0.0/24"})
	ctrl := claimNetwork(t, ns, conf)
	a := cp.StartAgent(t, "node-late", func(o *agent.Options) { o.ClaimWaitTimeout = 4 * time.Second })
	pods := createLaunchers(t, ns, a.Node, "launcher", "vm-late.blue", 1)
	never := createLaunchers(t, ns, a.Node, "never", "vm-never.blue", 1)[0]

	// The scenario itself is "the claim appears 1 s after the ADD started".
	timer := time.AfterFunc(time.Second, func() { createClaim(t, ns, "vm-late.blue", network) })
	defer timer.Stop()
	start, reads := time.Now(), agentReads(a)
	res, err := a.Add(ctx, pods[0], launcherIf, conf)
	if err != nil {
		t.Fatalf("ADD waiting for a late claim: %v", err)
	}
	if time.Since(start) < time.Second {
		t.Fatalf("ADD returned before the claim existed")
	}
	// One watch of the claim saw it appear and get its address, one
	// consistent read confirmed it; one read of that address's reservation.
	if r := agentReads(a) - reads; r > 3 {
		t.Errorf("the waiting ADD made %v live reads, want at most 3", r)
	}
	if got := getClaim(t, ns, "vm-late.blue").Status.IPs; len(got) != 1 || netip.MustParsePrefix(got[0]).Addr() != resultIPs(t, res)[0] {
		t.Fatalf("claim status %v, pod got %v", got, resultIPs(t, res))
	}

	_, err = a.Add(ctx, never, launcherIf, conf)
	mustContain(t, err, "vm-never.blue", "did not appear within 4s")
	if cniCode(err) != 11 {
		t.Errorf("a claim that never appeared: CNI code %d, want 11 (try again later)", cniCode(err))
	}

	// The controller down: the filled claim's VM starts again (a new
	// launcher only reads the claim).
	ctrl.Stop()
	restarted := createLaunchers(t, ns, a.Node, "restarted", "vm-late.blue", 1)[0]
	again, err := a.Add(ctx, restarted, launcherIf, conf)
	if err != nil {
		t.Fatalf("ADD of a new launcher of a filled claim while the controller is down: %v", err)
	}
	if got, want := resultIPs(t, again), resultIPs(t, res); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("a new launcher of vm-late.blue got %v while the controller is down, want the claim's %v", got, want)
	}
	// A new claim gets no addresses, and its ADD says why.
	unfilled := createClaim(t, ns, "vm-down.blue", network)
	pod := createLaunchers(t, ns, a.Node, "down", unfilled.Name, 1)[0]
	_, err = a.Add(ctx, pod, launcherIf, conf)
	mustContain(t, err, "vm-down.blue", "has no addresses", "ipkeeper-controller")
	if cniCode(err) != 11 {
		t.Errorf("an unfilled claim: CNI code %d, want 11 (try again later)", cniCode(err))
	}
	if n := len(reservationsOf(t, network)); n != 1 {
		t.Fatalf("%d reservations: the agent reserved something for an unfilled claim", n)
	}
	// Back up: it fills the claim, and the retried ADD gets its addresses.
	startClaimController(t, ns)
	if _, err := a.Add(ctx, pod, launcherIf, conf); err != nil {
		t.Fatalf("ADD once the controller is back: %v", err)
	}
}

// TestClaimFilledAfterControllerCrash: the controller reserved a claim's
// address and died before writing its status. Started again, it finds the
// claim's reservation and records it: the address neither leaks nor
// changes.
func TestClaimFilledAfterControllerCrash(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "crash")
	const network = "crash-net"
	conf := persistentConf(network, map[string]any{"range": "10.73.0.0/24"})
	persistentNAD(t, ns, "blue-nad", network, conf)
	cp.InlinePool(t, ns, conf)
	claim := createClaim(t, ns, "vm1.blue", network)
	// What the controller had written before the simulated crash.
	orphan := netip.MustParseAddr("10.73.0.99")
	r := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation(network, orphan)},
		Spec: ipkeeperv1alpha1.IPReservationSpec{Network: network, Pool: network, IP: orphan.String(),
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: claim.Name, UID: claim.UID}},
	}
	if err := cp.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	startClaimController(t, ns)
	a := cp.StartAgent(t, "node-crash")
	if got := waitFilled(t, ns, claim.Name).Status.IPs; len(got) != 1 || got[0] != "10.73.0.99/24" {
		t.Fatalf("claim status %v, want [10.73.0.99/24]: its existing reservation", got)
	}
	pod := createLaunchers(t, ns, a.Node, "launcher", claim.Name, 1)[0]
	res, err := a.Add(ctx, pod, launcherIf, conf)
	if err != nil {
		t.Fatal(err)
	}
	if got := resultIPs(t, res)[0]; got != orphan {
		t.Fatalf("ADD got %s, want the claim's existing %s", got, orphan)
	}
	if n := len(reservationsOf(t, network)); n != 1 {
		t.Fatalf("%d reservations, want 1 (nothing leaked)", n)
	}
}

// TestClaimFailuresSetConditions: exhaustion and conflicts are reported on
// the claim with OVN-Kubernetes' reasons, by the controller, and a
// launcher's ADD says why; a claim on a network without
// allowPersistentIPs and an address outside the ranges are clear errors.
func TestClaimFailuresSetConditions(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "claimfail")
	const network = "claimfail-net"
	conf := persistentConf(network, map[string]any{"range": "10.174.0.0/30"}) // 2 usable
	claimNetwork(t, ns, conf)
	a := cp.StartAgent(t, "node-f", func(o *agent.Options) { o.ClaimWaitTimeout = 2 * time.Second })
	plain := cp.CreatePods(t, ns, a.Node, "plain", 2)
	for _, p := range plain {
		if _, err := a.Add(ctx, p, "net1", conf); err != nil {
			t.Fatal(err)
		}
	}
	claim := createClaim(t, ns, "vm-full.blue", network)
	waitCondition(t, ns, claim.Name, "SubnetExhausted")
	pod := createLaunchers(t, ns, a.Node, "full", claim.Name, 1)[0]
	_, err := a.Add(ctx, pod, launcherIf, conf)
	mustContain(t, err, "has no addresses", "SubnetExhausted", "exhausted")
	if cniCode(err) != 11 {
		t.Errorf("exhausted: CNI code %d, want 11", cniCode(err))
	}

	// The claim says it holds an address a pod has (its status written by
	// hand): the controller cannot reserve it for the claim.
	taken := reservationsOf(t, network)[0].Spec.IP
	conflicted := createClaim(t, ns, "vm-conflict.blue", network)
	setClaimIPs(t, ns, conflicted.Name, taken+"/30")
	c := waitCondition(t, ns, conflicted.Name, "IPAddressConflict")
	if !strings.Contains(c.Message, taken) || !strings.Contains(c.Message, "reserved by Pod") {
		t.Errorf("conflict condition message %q: want the address and its holder", c.Message)
	}
	pod2 := createLaunchers(t, ns, a.Node, "conflict", conflicted.Name, 1)[0]
	_, err = a.Add(ctx, pod2, launcherIf, conf)
	mustContain(t, err, "IPAMClaim "+ns+"/vm-conflict.blue records "+taken, "reserved by Pod")
	if cniCode(err) != 7 {
		t.Errorf("conflict: CNI code %d, want 7", cniCode(err))
	}

	// An address outside the network's ranges: error, nothing released.
	outside := createClaim(t, ns, "vm-outside.blue", network)
	setClaimIPs(t, ns, outside.Name, "10.99.0.5/24")
	c = waitCondition(t, ns, outside.Name, claimstatus.ReasonOutsidePool)
	if !strings.Contains(c.Message, "10.99.0.5") || !strings.Contains(c.Message, "outside every range") {
		t.Errorf("outside condition message %q: want the address and why", c.Message)
	}
	pod3 := createLaunchers(t, ns, a.Node, "outside", outside.Name, 1)[0]
	_, err = a.Add(ctx, pod3, launcherIf, conf)
	// Final: ipkeeper-controller never reserves an address outside the
	// ranges, so the ADD is a configuration error, not "try again".
	mustContain(t, err, "10.99.0.5", "never hands out")
	if cniCode(err) != 7 {
		t.Errorf("outside: CNI code %d, want 7", cniCode(err))
	}
	if got := getClaim(t, ns, outside.Name).Status.IPs; len(got) != 1 || got[0] != "10.99.0.5/24" {
		t.Fatalf("claim status changed to %v", got)
	}

	// A claim reference on a network that does not allow persistent IPs:
	// the NAD decides, whatever the config handed to the plugin says.
	var n nadv1.NetworkAttachmentDefinition
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "blue-nad"}, &n); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(n.Spec.Config), &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "allowPersistentIPs")
	b, _ := json.Marshal(m)
	n.Spec.Config = string(b)
	if err := cp.Client.Update(ctx, &n); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, 10*time.Second, 20*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err = a.Add(ctx, pod, launcherIf, conf)
		return err != nil && strings.Contains(err.Error(), "allowPersistentIPs"), nil
	}); err != nil {
		t.Fatalf("ADD through a NAD without allowPersistentIPs: %v", err)
	}
	mustContain(t, err, "allowPersistentIPs", claim.Name, "NetworkAttachmentDefinition "+ns+"/blue-nad")
}

// waitCondition waits for the claim's IPsAllocated to be False with reason.
func waitCondition(t testing.TB, ns, claim, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	if err := framework.Eventually(context.Background(), 20*time.Second, 20*time.Millisecond, func(context.Context) (bool, error) {
		c = meta.FindStatusCondition(getClaim(t, ns, claim).Status.Conditions, "IPsAllocated")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason, nil
	}); err != nil {
		t.Fatalf("claim %s IPsAllocated = %+v, want False/%s: %v", claim, c, reason, err)
	}
	return c
}

// TestClaimsAndPodsNeverShareAnAddress: a mixed storm of claims (filled
// by the controller) and pods' ADDs on one network from two agents.
func TestClaimsAndPodsNeverShareAnAddress(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "mixed")
	const network = "mixed-net"
	conf := persistentConf(network, map[string]any{"range": "10.75.0.0/24"})
	claimNetwork(t, ns, conf)
	agents := []*framework.Agent{cp.StartAgent(t, "node-mx1"), cp.StartAgent(t, "node-mx2")}
	type job struct {
		a *framework.Agent
		p *corev1.Pod
		i string
	}
	var jobs []job
	for k, a := range agents {
		for i := range 40 {
			c := createClaim(t, ns, fmt.Sprintf("vm%d-%d.blue", k, i), network)
			jobs = append(jobs, job{a, createLaunchers(t, ns, a.Node, fmt.Sprintf("l%d-%d", k, i), c.Name, 1)[0], launcherIf})
		}
		for _, p := range cp.CreatePods(t, ns, a.Node, fmt.Sprintf("e%d", k), 80) {
			jobs = append(jobs, job{a, p, "net1"})
		}
	}
	var (
		mu   sync.Mutex
		seen = map[netip.Addr]string{}
		wg   sync.WaitGroup
	)
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := j.a.Add(ctx, j.p, j.i, conf)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("%s: %v", j.p.Name, err)
				return
			}
			ip := resultIPs(t, res)[0]
			if other, dup := seen[ip]; dup {
				t.Errorf("%s handed to both %s and %s", ip, other, j.p.Name)
			}
			seen[ip] = j.p.Name
		}()
	}
	wg.Wait()
	// Counted at once: a claim filled twice (its cache behind its own
	// writes, a create's answer lost) keeps the second address while its
	// launcher runs; nothing cleans it up later.
	if rs := reservationsOf(t, network); len(rs) != len(jobs) {
		by := map[string][]string{}
		for _, r := range rs {
			o := string(r.Spec.Owner.Kind) + " " + r.Spec.Owner.Name
			by[o] = append(by[o], r.Spec.IP)
		}
		var twice []string
		for o, ips := range by {
			if len(ips) > 1 {
				twice = append(twice, fmt.Sprintf("%s holds %v", o, ips))
			}
		}
		t.Fatalf("%d reservations for %d attachments; %v", len(rs), len(jobs), twice)
	}
}

// TestClaimReferenceAddedByHotplug: the networks annotation gains the
// attachment just before its ADD (hotplug); the agent's pod cache may not
// have seen the update yet, and the ADD must still use the claim.
func TestClaimReferenceAddedByHotplug(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "hotplug")
	const network = "hotplug-net"
	conf := persistentConf(network, map[string]any{"range": "10.76.0.0/24"})
	claimNetwork(t, ns, conf)
	a := cp.StartAgent(t, "node-h")
	claim := createClaim(t, ns, "vm1.blue", network)
	for i := range 10 {
		pod := cp.CreateAnnotatedPods(t, ns, a.Node, fmt.Sprintf("launcher-%d", i), 1,
			map[string]string{multus.Annotation: `[{"name":"other","interface":"net9"}]`})[0]
		pod.Annotations[multus.Annotation] = networksAnnotation(ns, claim.Name)
		if err := cp.Client.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Add(ctx, pod, launcherIf, conf); err != nil {
			t.Fatal(err)
		}
		for _, r := range reservationsOf(t, network) {
			if r.Spec.Owner.Kind != ipkeeperv1alpha1.OwnerIPAMClaim {
				t.Fatalf("round %d: hotplugged attachment got an ephemeral address %s: the stale pod annotation was used", i, r.Spec.IP)
			}
		}
	}
}

// TestClaimReferenceFromCNIArgs: without the networks annotation (no
// webhook), args.cni carries the claim reference.
func TestClaimReferenceFromCNIArgs(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "cniargs")
	const network = "cniargs-net"
	base := persistentConf(network, map[string]any{"range": "10.177.0.0/24"})
	claimNetwork(t, ns, base)
	a := cp.StartAgent(t, "node-ca")
	claim := createClaim(t, ns, "vm1.blue", network)
	var m map[string]any
	if err := json.Unmarshal(base, &m); err != nil {
		t.Fatal(err)
	}
	m["args"] = map[string]any{"cni": map[string]any{"ipam-claim-reference": claim.Name}}
	conf, _ := json.Marshal(m)
	pod := cp.CreatePods(t, ns, a.Node, "p", 1)[0]
	res, err := a.Add(ctx, pod, "net1", conf)
	if err != nil {
		t.Fatal(err)
	}
	if got := getClaim(t, ns, claim.Name).Status.IPs; len(got) != 1 || netip.MustParsePrefix(got[0]).Addr() != resultIPs(t, res)[0] {
		t.Fatalf("claim status %v, pod got %v", got, resultIPs(t, res))
	}
}

// TestClaimStatusWithoutReservationIsRepaired: the claim's status names an
// address whose reservation is gone (deleted by hand, or lost with a
// restored backup) or was never made (status written by hand): the
// controller reserves it for the claim, and the ADD returns it. A pod's
// static ips never choose a claim's addresses: a request that differs is
// refused, one that agrees passes.
func TestClaimStatusWithoutReservationIsRepaired(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "repair")
	const network = "repair-net"
	conf := persistentConf(network, map[string]any{"range": "10.78.0.0/24"})
	claimNetwork(t, ns, conf)
	a := cp.StartAgent(t, "node-r")

	claim := createClaim(t, ns, "vm1.blue", network)
	waitFilled(t, ns, claim.Name)
	setClaimIPs(t, ns, claim.Name, "10.78.0.42/24") // an administrator's edit
	r := &ipkeeperv1alpha1.IPReservation{}
	if err := framework.Eventually(ctx, 20*time.Second, 20*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := cp.Client.Get(ctx, keyOf(naming.Reservation(network, netip.MustParseAddr("10.78.0.42"))), r)
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("the recorded address was never reserved for the claim: %v", err)
	}
	if r.Spec.Owner.UID != claim.UID {
		t.Fatalf("reservation owned by %+v, want the claim", r.Spec.Owner)
	}
	pod := createLaunchers(t, ns, a.Node, "launcher", claim.Name, 1)[0]
	res, err := a.Add(ctx, pod, launcherIf, withRuntimeIPs(t, conf, "10.78.0.42/24"))
	if err != nil {
		t.Fatalf("static ips equal to the claim's: %v", err)
	}
	if got := resultIPs(t, res)[0]; got != netip.MustParseAddr("10.78.0.42") {
		t.Fatalf("got %s, want the claim's 10.78.0.42", got)
	}
	// Deleted by hand: reserved again.
	if err := cp.Client.Delete(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, 20*time.Second, 20*time.Millisecond, func(ctx context.Context) (bool, error) {
		var again ipkeeperv1alpha1.IPReservation
		err := cp.Client.Get(ctx, keyOf(r.Name), &again)
		return err == nil && again.UID != r.UID && again.Spec.Owner.UID == claim.UID, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("a recorded address whose reservation was deleted was not reserved again: %v", err)
	}

	_, err = a.Add(ctx, pod, launcherIf, withRuntimeIPs(t, conf, "10.78.0.7/24"))
	mustContain(t, err, "static ips 10.78.0.7", "vm1.blue", "10.78.0.42")
	if cniCode(err) != 7 {
		t.Errorf("static ips that differ from the claim's: CNI code %d, want 7", cniCode(err))
	}
}
