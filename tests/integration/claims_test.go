// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/agent"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// These tests stand in for what KubeVirt and ipkeeper's claims controller
// write (KubeVirt is simulated): an IPAMClaim per VM network, and
// virt-launcher pods whose networks annotation carries ipam-claim-reference.
// The launcher's interface name is KubeVirt's hashed pod interface name.

const launcherIf = "pod16477688c0e"

// persistentConf is a network that allows persistent IPs.
func persistentConf(network string, ipam map[string]any) json.RawMessage {
	var m map[string]any
	if err := json.Unmarshal(framework.NetConf(network, ipam), &m); err != nil {
		panic(err)
	}
	m["allowPersistentIPs"] = true
	b, _ := json.Marshal(m)
	return b
}

// persistentNAD creates (unless it exists) NAD name in ns for network with
// allowPersistentIPs at the top level: the agent reads the flag from the
// NAD a pod's networks annotation element names.
func persistentNAD(t testing.TB, ns, name, network string) {
	t.Helper()
	n := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","allowPersistentIPs":true}`, network)},
	}
	if err := cp.Client.Create(context.Background(), n); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating NAD %s/%s: %v", ns, name, err)
	}
}

// createClaim creates a claim (owned by nothing, as other tools make them)
// and the NAD blue-nad for its network that createLaunchers' pods name.
func createClaim(t testing.TB, ns, name, network string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	persistentNAD(t, ns, "blue-nad", network)
	c := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: launcherIf},
	}
	if err := cp.Client.Create(context.Background(), c); err != nil {
		t.Fatalf("creating IPAMClaim: %v", err)
	}
	return c
}

// createLaunchers creates virt-launcher pods on node whose networks
// annotation references claim for interface launcherIf, as the pod webhook
// leaves them.
func createLaunchers(t testing.TB, ns, node, prefix, claim string, n int) []*corev1.Pod {
	t.Helper()
	return cp.CreateAnnotatedPods(t, ns, node, prefix, n, map[string]string{multus.Annotation: networksAnnotation(ns, claim)})
}

func networksAnnotation(ns, claim string) string {
	annot, _ := json.Marshal([]map[string]any{{"name": "blue-nad", "namespace": ns, "interface": launcherIf, "ipam-claim-reference": claim}})
	return string(annot)
}

func getClaim(t testing.TB, ns, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	c := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClaimKeepsAddressesAcrossPods: the first launcher's ADD fills the
// claim's status; DEL keeps the reservation; a new launcher on another node
// (VM stopped and started) gets the same addresses.
func TestClaimKeepsAddressesAcrossPods(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "claim")
	const network = "claim-net"
	conf := persistentConf(network, map[string]any{"ipRanges": []any{
		map[string]any{"range": "10.70.0.0/24"}, map[string]any{"range": "fd00:70::/64"}}})
	a1, a2 := cp.StartAgent(t, "node-c1"), cp.StartAgent(t, "node-c2")
	claim := createClaim(t, ns, "vm1.blue", network)
	first := createLaunchers(t, ns, a1.Node, "virt-launcher-vm1-a", claim.Name, 1)[0]

	res, err := a1.Add(ctx, first, launcherIf, conf)
	if err != nil {
		t.Fatal(err)
	}
	ips := resultIPs(t, res)
	if len(ips) != 2 {
		t.Fatalf("dual-stack claim: want 2 addresses, got %v", ips)
	}
	got := getClaim(t, ns, claim.Name)
	want := []string{netip.PrefixFrom(ips[0], 24).String(), netip.PrefixFrom(ips[1], 64).String()}
	if fmt.Sprint(got.Status.IPs) != fmt.Sprint(want) {
		t.Fatalf("claim status.ips = %v, want %v", got.Status.IPs, want)
	}
	if got.Status.OwnerPod == nil || got.Status.OwnerPod.Name != first.Name {
		t.Fatalf("claim status.ownerPod = %v, want %s", got.Status.OwnerPod, first.Name)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, "IPsAllocated")
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "SuccessfulAllocation" {
		t.Fatalf("IPsAllocated condition = %+v, want True/SuccessfulAllocation", cond)
	}
	for _, ip := range ips {
		r := &ipkeeperv1alpha1.IPReservation{}
		if err := cp.Client.Get(ctx, keyOf(naming.Reservation(network, ip)), r); err != nil {
			t.Fatal(err)
		}
		if r.Spec.Owner.Kind != ipkeeperv1alpha1.OwnerIPAMClaim || r.Spec.Owner.UID != claim.UID {
			t.Fatalf("reservation of %s owned by %+v, want the claim", ip, r.Spec.Owner)
		}
	}

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
	if fmt.Sprint(resultIPs(t, res)) != fmt.Sprint(ips) {
		t.Fatalf("restarted VM got %v, want %v", resultIPs(t, res), ips)
	}
	if got := getClaim(t, ns, claim.Name); got.Status.OwnerPod.Name != second.Name {
		t.Fatalf("ownerPod = %s, want the most recent launcher %s", got.Status.OwnerPod.Name, second.Name)
	}
}

// TestClaimLiveMigration: source and target launchers ADD at the same time
// on different nodes; both get the claim's addresses, one reservation per IP.
func TestClaimLiveMigration(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "migration")
	const network = "migration-net"
	conf := persistentConf(network, map[string]any{"range": "10.71.0.0/24"})
	src, dst := cp.StartAgent(t, "node-m1"), cp.StartAgent(t, "node-m2")
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
}

// TestClaimCreatedLateOrNever: the ADD waits for a claim created after it
// started, and fails naming the claim when it never comes.
func TestClaimCreatedLateOrNever(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "late")
	const network = "late-net"
	conf := persistentConf(network, map[string]any{"range": "10.72.0.0/24"})
	a := cp.StartAgent(t, "node-late", func(o *agent.Options) { o.ClaimWaitTimeout = 8 * time.Second })
	persistentNAD(t, ns, "blue-nad", network)
	pods := createLaunchers(t, ns, a.Node, "launcher", "vm-late.blue", 1)
	never := createLaunchers(t, ns, a.Node, "never", "vm-never.blue", 1)[0]

	// The scenario itself is "the claim appears 2 s after the ADD started".
	timer := time.AfterFunc(2*time.Second, func() { createClaim(t, ns, "vm-late.blue", network) })
	defer timer.Stop()
	start := time.Now()
	res, err := a.Add(ctx, pods[0], launcherIf, conf)
	if err != nil {
		t.Fatalf("ADD waiting for a late claim: %v", err)
	}
	if time.Since(start) < 2*time.Second {
		t.Fatalf("ADD returned before the claim existed")
	}
	if got := getClaim(t, ns, "vm-late.blue").Status.IPs; len(got) != 1 || netip.MustParsePrefix(got[0]).Addr() != resultIPs(t, res)[0] {
		t.Fatalf("claim status %v, pod got %v", got, resultIPs(t, res))
	}

	_, err = a.Add(ctx, never, launcherIf, conf)
	mustContain(t, err, "vm-never.blue", "did not appear within 8s")
}

// TestClaimRetryAfterCrashKeepsAddresses: a reservation owned by the claim
// exists but the status was never written (the agent died in between). The
// retried ADD returns that address and writes the status; nothing leaks.
func TestClaimRetryAfterCrashKeepsAddresses(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "crash")
	const network = "crash-net"
	conf := persistentConf(network, map[string]any{"range": "10.73.0.0/24"})
	a := cp.StartAgent(t, "node-crash")
	claim := createClaim(t, ns, "vm1.blue", network)
	pod := createLaunchers(t, ns, a.Node, "launcher", claim.Name, 1)[0]
	// What the agent had written before the simulated crash.
	orphan := netip.MustParseAddr("10.73.0.99")
	r := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation(network, orphan)},
		Spec: ipkeeperv1alpha1.IPReservationSpec{Network: network, IP: orphan.String(),
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: claim.Name, UID: claim.UID}},
	}
	cached := a.Gauge("ipkeeper_agent_reservations")
	if err := cp.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	// A restarted agent serves only after its cache holds every reservation;
	// wait for this one agent's cache to show the orphan the same way.
	if err := framework.Eventually(ctx, 10*time.Second, 20*time.Millisecond, func(context.Context) (bool, error) {
		return a.Gauge("ipkeeper_agent_reservations") > cached, nil
	}); err != nil {
		t.Fatalf("agent cache never saw the orphaned reservation: %v", err)
	}
	res, err := a.Add(ctx, pod, launcherIf, conf)
	if err != nil {
		t.Fatal(err)
	}
	if got := resultIPs(t, res)[0]; got != orphan {
		t.Fatalf("retried ADD got %s, want the claim's existing %s", got, orphan)
	}
	if n := len(reservationsOf(t, network)); n != 1 {
		t.Fatalf("%d reservations, want 1 (nothing leaked)", n)
	}
	if got := getClaim(t, ns, claim.Name).Status.IPs; len(got) != 1 || got[0] != "10.73.0.99/24" {
		t.Fatalf("claim status %v, want [10.73.0.99/24]", got)
	}
}

// TestClaimFailuresSetConditions: exhaustion and conflicts are reported on
// the claim with OVN-Kubernetes' reasons; a claim on a network without
// allowPersistentIPs and an address outside the ranges are clear errors.
func TestClaimFailuresSetConditions(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "claimfail")
	const network = "claimfail-net"
	conf := persistentConf(network, map[string]any{"range": "10.174.0.0/30"}) // 2 usable
	a := cp.StartAgent(t, "node-f")
	plain := cp.CreatePods(t, ns, a.Node, "plain", 2)
	for _, p := range plain {
		if _, err := a.Add(ctx, p, "net1", conf); err != nil {
			t.Fatal(err)
		}
	}
	claim := createClaim(t, ns, "vm-full.blue", network)
	pod := createLaunchers(t, ns, a.Node, "full", claim.Name, 1)[0]
	_, err := a.Add(ctx, pod, launcherIf, conf)
	mustContain(t, err, "exhausted")
	assertCondition(t, ns, claim.Name, "SubnetExhausted")

	// The claim says it holds an address a pod has.
	taken := reservationsOf(t, network)[0].Spec.IP
	conflicted := createClaim(t, ns, "vm-conflict.blue", network)
	conflicted.Status.IPs = []string{taken + "/30"}
	if err := cp.Client.Status().Update(ctx, conflicted); err != nil {
		t.Fatal(err)
	}
	pod2 := createLaunchers(t, ns, a.Node, "conflict", conflicted.Name, 1)[0]
	_, err = a.Add(ctx, pod2, launcherIf, conf)
	mustContain(t, err, "IPAMClaim "+ns+"/vm-conflict.blue: address "+taken, "already reserved")
	assertCondition(t, ns, conflicted.Name, "IPAddressConflict")

	// An address outside the network's ranges: error, nothing released.
	outside := createClaim(t, ns, "vm-outside.blue", network)
	outside.Status.IPs = []string{"10.99.0.5/24"}
	if err := cp.Client.Status().Update(ctx, outside); err != nil {
		t.Fatal(err)
	}
	pod3 := createLaunchers(t, ns, a.Node, "outside", outside.Name, 1)[0]
	_, err = a.Add(ctx, pod3, launcherIf, conf)
	mustContain(t, err, "10.99.0.5", "outside every range")
	assertCondition(t, ns, outside.Name, "InternalError")
	if got := getClaim(t, ns, outside.Name).Status.IPs; len(got) != 1 || got[0] != "10.99.0.5/24" {
		t.Fatalf("claim status changed to %v", got)
	}

	// A claim reference on a network that does not allow persistent IPs:
	// the NAD decides, whatever the config handed to the plugin says.
	var n nadv1.NetworkAttachmentDefinition
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "blue-nad"}, &n); err != nil {
		t.Fatal(err)
	}
	n.Spec.Config = fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge"}`, network)
	if err := cp.Client.Update(ctx, &n); err != nil {
		t.Fatal(err)
	}
	_, err = a.Add(ctx, pod, launcherIf, conf)
	mustContain(t, err, "allowPersistentIPs", claim.Name, "NetworkAttachmentDefinition "+ns+"/blue-nad")
}

func assertCondition(t testing.TB, ns, claim, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(getClaim(t, ns, claim).Status.Conditions, "IPsAllocated")
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason {
		t.Fatalf("claim %s IPsAllocated = %+v, want False/%s", claim, c, reason)
	}
}

// TestClaimsAndPodsNeverShareAnAddress: a mixed storm of claim-backed and
// ephemeral ADDs on one network from two agents.
func TestClaimsAndPodsNeverShareAnAddress(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "mixed")
	const network = "mixed-net"
	conf := persistentConf(network, map[string]any{"range": "10.75.0.0/24"})
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
	if n := len(reservationsOf(t, network)); n != len(jobs) {
		t.Fatalf("%d reservations for %d attachments", n, len(jobs))
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
	a := cp.StartAgent(t, "node-ca")
	claim := createClaim(t, ns, "vm1.blue", network)
	var m map[string]any
	if err := json.Unmarshal(persistentConf(network, map[string]any{"range": "10.177.0.0/24"}), &m); err != nil {
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
// restored backup); the next ADD recreates it for the claim and returns it.
// And a static request with a claim seeds only a claim without addresses.
func TestClaimStatusWithoutReservationIsRepaired(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "repair")
	const network = "repair-net"
	conf := persistentConf(network, map[string]any{"range": "10.78.0.0/24"})
	a := cp.StartAgent(t, "node-r")

	claim := createClaim(t, ns, "vm1.blue", network)
	claim.Status.IPs = []string{"10.78.0.42/24"}
	if err := cp.Client.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	pod := createLaunchers(t, ns, a.Node, "launcher", claim.Name, 1)[0]
	res, err := a.Add(ctx, pod, launcherIf, withRuntimeIPs(t, conf, "10.78.0.7/24"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resultIPs(t, res)[0]; got != netip.MustParseAddr("10.78.0.42") {
		t.Fatalf("got %s, want the claim's 10.78.0.42 (the claim's addresses win over a static request)", got)
	}
	r := &ipkeeperv1alpha1.IPReservation{}
	if err := cp.Client.Get(ctx, keyOf(naming.Reservation(network, netip.MustParseAddr("10.78.0.42"))), r); err != nil {
		t.Fatalf("missing reservation not recreated: %v", err)
	}
	if r.Spec.Owner.UID != claim.UID {
		t.Fatalf("recreated reservation owned by %+v, want the claim", r.Spec.Owner)
	}

	// A claim without addresses takes the static request.
	fresh := createClaim(t, ns, "vm2.blue", network)
	pod2 := createLaunchers(t, ns, a.Node, "launcher2", fresh.Name, 1)[0]
	res, err = a.Add(ctx, pod2, launcherIf, withRuntimeIPs(t, conf, "10.78.0.7/24"))
	if err != nil {
		t.Fatal(err)
	}
	if got := getClaim(t, ns, fresh.Name).Status.IPs; len(got) != 1 || got[0] != "10.78.0.7/24" || resultIPs(t, res)[0] != netip.MustParseAddr("10.78.0.7") {
		t.Fatalf("static request with a new claim: claim %v, pod %v; want 10.78.0.7", got, resultIPs(t, res))
	}
}
