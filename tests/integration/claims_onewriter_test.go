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

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestRequestedAddressOfAPoolNADHasOneHolder: a NAD with "pool" naming the
// inline pool of a network whose name is not an object name (VLAN_100,
// the setup docs/pools.md recommends for moving an inline network to a
// pool) shares that network's addresses. A VM asking, through it, for an
// address a pod of the inline network already holds must be told it is
// taken: both name the address's reservation from the one lock key of
// the pool, whichever NAD or writer asks.
func TestRequestedAddressOfAPoolNADHasOneHolder(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	agent := cp.StartAgent(t, "node-lockkey")
	network := "VLAN_" + strings.ReplaceAll(e.ns, "-", "_") // not an object name
	inline := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","ipam":{"type":"ipkeeper","range":"10.57.0.0/24","network_name":%q}}`, network, network)
	e.nad(t, "vlan", inline)
	pool := naming.InlinePool(network)
	if pool == network {
		t.Fatalf("network %q is an object name; the test needs one that is not", network)
	}

	pods := cp.CreatePods(t, e.ns, agent.Node, "holder", 1)
	res, err := agent.Add(ctx, pods[0], "net1", json.RawMessage(inline))
	if err != nil {
		t.Fatalf("ADD of the inline network's pod: %v", err)
	}
	held := resultIPs(t, res)[0]

	vmNetwork := "vms-" + e.ns
	e.nad(t, "blue", fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","pool":%q}}`, vmNetwork, pool))
	createVMRequesting(t, e, "vm-lk", fmt.Sprintf(`{"blue":[%q]}`, held))
	claim := waitRequestedSettled(t, e, "vm-lk.blue")
	cond := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionRequested)
	if cond.Reason != claimstatus.ReasonRequestedTaken {
		t.Errorf("the VM's request for %s, which pod %s holds: condition %s=%s (%s: %s), want %s", held, pods[0].Name,
			claimstatus.ConditionRequested, cond.Status, cond.Reason, cond.Message, claimstatus.ReasonRequestedTaken)
	}
	var holders []string
	var list ipkeeperv1alpha1.IPReservationList
	if err := cp.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Items {
		if r.Spec.Pool == pool && r.Spec.IP == held.String() {
			holders = append(holders, fmt.Sprintf("%s (%s %s/%s)", r.Name, r.Spec.Owner.Kind, r.Spec.Owner.Namespace, r.Spec.Owner.Name))
		}
	}
	if len(holders) != 1 {
		t.Errorf("%s of IPPool %s has %d holders: %v; want one", held, pool, len(holders), holders)
	}
}

// waitRequestedSettled waits until the claim's RequestedAddresses
// condition is set, whatever its reason.
func waitRequestedSettled(t *testing.T, e *kvEnv, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var c *ipamclaimsv1alpha1.IPAMClaim
	if err := framework.Eventually(context.Background(), 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		var err error
		if c, err = e.claim(ctx, name); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return meta.FindStatusCondition(c.Status.Conditions, claimstatus.ConditionRequested) != nil, nil
	}); err != nil {
		t.Fatalf("claim %s: no %s condition: %v", name, claimstatus.ConditionRequested, err)
	}
	return c
}

// TestCopiedLauncherGetsNothing: someone who may create pods in a VM's
// namespace copies the VM's running virt-launcher pod verbatim (labels,
// annotations with the claim reference, owner reference to the VMI), as
// `kubectl get pod -o yaml | kubectl create -f -` does. The copy must not
// get the VM's addresses: only KubeVirt's controller may create a pod that
// says it launches a VMI (admission policy), and a pod that does not say so
// may not use the VM's claim (the agent).
func TestCopiedLauncherGetsNothing(t *testing.T) {
	ctx := context.Background()
	applyPolicies(t)
	e := startKubeVirtEnv(t)
	agent := cp.StartAgent(t, "node-copy")
	network := "copy-" + e.ns
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.58.0.0/24","network_name":%q}}`, network, network)
	e.nad(t, "blue", conf)
	vm := framework.NewVM(e.ns, "vm-copied", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err := cp.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	_, launcher, err := e.kv.Start(ctx, vm, agent.Node)
	if err != nil {
		t.Fatal(err)
	}
	ifName := kubevirt.PodInterfaceName("blue")
	res, err := agent.Add(ctx, launcher, ifName, json.RawMessage(conf))
	if err != nil {
		t.Fatalf("the launcher's ADD: %v", err)
	}
	vmIPs := resultIPs(t, res)

	// A user of the namespace who may create and read pods, nothing more.
	user := "mallory-" + e.ns
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "pod-creator"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "create"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "pod-creator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	mallory, err := client.New(cp.As(user).Config, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var orig corev1.Pod
	if err := mallory.Get(ctx, client.ObjectKeyFromObject(launcher), &orig); err != nil {
		t.Fatal(err)
	}
	copyOf := func(name string, keepIdentity bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: orig.Namespace, Name: name, Labels: orig.Labels, Annotations: orig.Annotations},
			Spec:       *orig.Spec.DeepCopy(),
		}
		if keepIdentity {
			p.OwnerReferences = orig.OwnerReferences
		} else {
			p.Labels = map[string]string{}
			for k, v := range orig.Labels {
				if k != "kubevirt.io/created-by" && k != "kubevirt.io" {
					p.Labels[k] = v
				}
			}
		}
		return p
	}

	t.Run("verbatim, owner reference included", func(t *testing.T) {
		verbatim := copyOf("copy-verbatim", true)
		err := mallory.Create(ctx, verbatim)
		if err == nil {
			t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), verbatim) })
			got, addErr := agent.Add(ctx, verbatim, ifName, json.RawMessage(conf))
			if addErr == nil {
				t.Fatalf("a verbatim copy of the VM's launcher, created by %s, got the VM's addresses %v (the VM has %v)", user, resultIPs(t, got), vmIPs)
			}
			t.Fatalf("a verbatim copy of the VM's launcher was admitted (its ADD then failed: %v); want its creation refused", addErr)
		}
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "launch") {
			t.Fatalf("creating a verbatim copy of the launcher: %v; want it refused by the admission policy", err)
		}
	})
	t.Run("without the launcher's identity", func(t *testing.T) {
		stripped := copyOf("copy-stripped", false)
		if err := mallory.Create(ctx, stripped); err != nil {
			t.Fatalf("a pod that does not claim to be a launcher: %v; want it admitted (the agent refuses it the claim)", err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), stripped) })
		got, err := agent.Add(ctx, stripped, ifName, json.RawMessage(conf))
		if err == nil {
			t.Fatalf("a copy without the launcher identity got the VM's addresses %v", resultIPs(t, got))
		}
		if cniCode(err) != 7 || !strings.Contains(err.Error(), "vm-copied.blue") {
			t.Fatalf("ADD of a pod naming the VM's claim: %v; want code 7 naming the claim", err)
		}
	})
	var r ipkeeperv1alpha1.IPReservation
	if err := cp.Client.Get(ctx, keyOf(naming.Reservation(network, vmIPs[0])), &r); err != nil {
		t.Fatalf("the VM's reservation: %v", err)
	}
	if r.Spec.Owner.Name != "vm-copied.blue" {
		t.Fatalf("the VM's address is held by %+v", r.Spec.Owner)
	}
}

// TestVMClaimFilledBeforeItsLauncher: KubeVirt's real virt-controller
// runs the VM. Its claim has its addresses (status.ips, IPsAllocated) as
// soon as the VM exists, stopped, before any launcher pod: ipkeeper-controller
// chose them. The launcher's ADD returns them without a write of its
// agent; during a live migration the source's repeated ADD and the
// target's ADD, on two nodes at once, read the one status; ownerPod
// follows the launcher KubeVirt made last.
func TestVMClaimFilledBeforeItsLauncher(t *testing.T) {
	ctx := context.Background()
	e := startKubeVirtEnv(t)
	const network = "filled-blue"
	conf := bridgeNAD(network, true)
	e.nad(t, "blue", conf)
	a, b := cp.StartAgent(t, "node-fill-a"), cp.StartAgent(t, "node-fill-b")

	vm, err := e.kv.CreateVM(ctx, e.ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	claim := waitFilled(t, e.ns, "vm1.blue")
	var pods corev1.PodList
	if err := cp.Client.List(ctx, &pods, client.InNamespace(e.ns)); err != nil || len(pods.Items) != 0 {
		t.Fatalf("pods of the stopped VM: %d (%v), want none", len(pods.Items), err)
	}
	if c := meta.FindStatusCondition(claim.Status.Conditions, claimstatus.ConditionIPsAllocated); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("IPsAllocated of the stopped VM's claim = %+v, want True", c)
	}
	if claim.Annotations[claimstatus.NADAnnotation] != e.ns+"/blue" {
		t.Errorf("claim annotation %s = %q, want %s/blue", claimstatus.NADAnnotation, claim.Annotations[claimstatus.NADAnnotation], e.ns)
	}
	want := netip.MustParsePrefix(claim.Status.IPs[0]).Addr()

	ifName := kubevirt.PodInterfaceName("blue")
	writes := agentWrites(a) + agentWrites(b)
	vmi, source, err := e.kv.Start(ctx, vm, a.Node)
	if err != nil {
		t.Fatal(err)
	}
	reads, lists := agentReads(a), a.CounterWhere("ipkeeper_agent_api_reads_total", "verb", "list")
	res, err := a.Add(ctx, source, ifName, json.RawMessage(conf))
	if err != nil || resultIPs(t, res)[0] != want {
		t.Fatalf("the launcher's ADD: %v, %v; want the claim's %s", res, err, want)
	}
	// The claim (one watch, which starts with it, and one consistent read
	// confirming it) and its one address's reservation: nothing else, and
	// never a list of the pool.
	if r, l := agentReads(a)-reads, a.CounterWhere("ipkeeper_agent_api_reads_total", "verb", "list")-lists; r > 3 || l != 0 {
		t.Errorf("the launcher's ADD made %v live reads (%v lists), want at most 3 and no list", r, l)
	}
	waitOwnerPod(t, e.ns, claim.Name, source.Name)

	_, target, err := e.kv.Migrate(ctx, vmi, b.Node)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([]netip.Addr, 2)
	errs := make([]error, 2)
	for i, l := range []struct {
		agent *framework.Agent
		pod   *corev1.Pod
	}{{a, source}, {b, target}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := l.agent.Add(ctx, l.pod, ifName, json.RawMessage(conf))
			if errs[i] = err; err == nil {
				got[i] = resultIPs(t, res)[0]
			}
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || got[0] != want || got[1] != want {
		t.Fatalf("source and target ADDs at once: %v %v (%v, %v); want both the claim's %s", got[0], got[1], errs[0], errs[1], want)
	}
	if w := agentWrites(a) + agentWrites(b) - writes; w != 0 {
		t.Errorf("the agents made %v API writes for a VM's launchers, want none", w)
	}
	waitOwnerPod(t, e.ns, claim.Name, target.Name)
}
