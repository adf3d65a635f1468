// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestSystemVMsStartWhileControllerIsKilled: 24 VMs are started at once
// while ipkeeper-controller, which makes their claims, chooses their
// addresses and admits their launcher pods, is killed (SIGKILL): before
// the storm, and again once some of their claims have addresses. The
// launchers wait (virt-controller retries pods its webhook could not
// admit; an agent's ADD waits for an unfilled claim); once the controller
// is back every VM starts, each with the address its claim records, no
// address held twice and nothing held for nobody.
func TestSystemVMsStartWhileControllerIsKilled(t *testing.T) {
	// Eight per node: each launcher runs the real Multus, which reads its
	// pod from the API server with a one-minute timeout; with 50 at once
	// on a loaded two-core machine those reads timed out.
	const vms = 24
	c := setup(t)
	ctx := context.Background()
	ns := c.CP.NewNamespace(t, "sys-ctlkill")
	c.DumpOnFailure(t, ns)
	const network = "sys-ctlkill"
	c.BridgeNAD(t, ns, "blue", network, true, map[string]any{"range": "10.89.0.0/24"})
	iface := kubevirt.PodInterfaceName("blue")
	t.Log(c.KV.Simulated())

	if _, err := c.CP.WaitPool(ctx, network); err != nil {
		t.Fatal(err)
	}
	c.Controller.Kill()
	// Each wait for virt-controller is given longer than the suite's
	// default: a SIGKILLed leader holds its lease until it expires, and
	// virt-controller retries the launchers its webhook could not admit
	// with a per-VM backoff that has grown meanwhile; on a loaded machine
	// the two outages together have taken over two minutes.
	kv := *c.KV
	kv.Timeout = 5 * time.Minute
	vmList := make([]*kubevirtv1.VirtualMachine, vms)
	for i := range vmList {
		vmList[i] = c.CreateVM(t, ns, fmt.Sprintf("vm-%d", i), framework.VMNetwork{Name: "blue", NAD: "blue"})
	}
	nodes := []string{"node-a", "node-b", "node-c"}
	addrs := make([]netip.Prefix, vms)
	errs := make([]error, vms)
	var wg sync.WaitGroup
	for i, vm := range vmList {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, pod, err := kv.Start(ctx, vm, nodes[i%len(nodes)])
			if err != nil {
				errs[i] = err
				return
			}
			s := c.Sandbox(pod.UID)
			if s == nil {
				errs[i] = fmt.Errorf("VM %s: its launcher %s has no sandbox", vm.Name, pod.Name)
				return
			}
			addrs[i], errs[i] = s.Addr(ctx, iface)
		}()
	}

	// Back, then killed again once some claims have their addresses.
	if err := c.Controller.Restart(); err != nil {
		t.Fatal(err)
	}
	filled := func(ctx context.Context) (int, error) {
		var list ipamclaimsv1alpha1.IPAMClaimList
		if err := c.CP.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return 0, err
		}
		n := 0
		for _, claim := range list.Items {
			if len(claim.Status.IPs) > 0 {
				n++
			}
		}
		return n, nil
	}
	if err := framework.Eventually(ctx, 2*time.Minute, 20*time.Millisecond, func(ctx context.Context) (bool, error) {
		n, err := filled(ctx)
		return n > 0, err
	}); err != nil {
		t.Fatalf("no claim got addresses after the controller came back: %v", err)
	}
	c.Controller.Kill()
	n, err := filled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("controller killed again with %d of %d claims filled", n, vms)
	if err := c.Controller.Restart(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	seen := map[netip.Addr]string{}
	for i, vm := range vmList {
		if errs[i] != nil {
			t.Errorf("VM %s did not start: %v", vm.Name, errs[i])
			continue
		}
		if other, dup := seen[addrs[i].Addr()]; dup {
			t.Errorf("VMs %s and %s both have %s", other, vm.Name, addrs[i])
		}
		seen[addrs[i].Addr()] = vm.Name
		claim := c.WaitClaimIPs(t, ns, vm.Name+".blue")
		if len(claim.Status.IPs) != 1 || claim.Status.IPs[0] != addrs[i].String() {
			t.Errorf("VM %s: claim records %v, its launcher has %s", vm.Name, claim.Status.IPs, addrs[i])
		}
	}
	// One reservation per VM, each its claim's: nothing duplicated, nothing leaked.
	var claims ipamclaimsv1alpha1.IPAMClaimList
	if err := c.CP.Client.List(ctx, &claims, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	byUID := map[string]string{}
	for _, claim := range claims.Items {
		byUID[string(claim.UID)] = claim.Name
	}
	held := c.Reservations(t, network)
	if len(held) != vms {
		t.Errorf("%d reservations on the network for %d VMs, want one each", len(held), vms)
	}
	for _, r := range held {
		if r.Spec.Owner.Kind != ipkv1alpha1.OwnerIPAMClaim || byUID[string(r.Spec.Owner.UID)] == "" {
			t.Errorf("reservation %s of %s is held by %+v, no VM's claim", r.Name, r.Spec.IP, r.Spec.Owner)
		}
	}
}
