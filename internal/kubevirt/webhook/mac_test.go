// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// ipkeeperNAD is a NAD of an ipkeeper network with an inline pool.
func ipkeeperNAD(ns, name string) *nadv1.NetworkAttachmentDefinition {
	return nadOf(ns, name, `{"cniVersion":"1.0.0","name":"net-`+name+`","type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.9.0.0/24"}}`)
}

func TestAddMACs(t *testing.T) {
	scheme := launcherScheme(t)
	const ns = "vms"
	claim := func(name string, ips []string, conds ...metav1.Condition) *ipamclaimsv1alpha1.IPAMClaim {
		return &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Status: ipamclaimsv1alpha1.IPAMClaimStatus{IPs: ips, Conditions: conds}}
	}
	exhausted := metav1.Condition{Type: claimstatus.ConditionIPsAllocated, Status: metav1.ConditionFalse, Reason: "SubnetExhausted"}
	objs := []*ipamclaimsv1alpha1.IPAMClaim{
		claim("vm1.blue", []string{"10.1.0.7/24", "fd00::7/64"}),
		claim("vm1.red", nil, exhausted),
		claim("vm1.own", []string{"10.2.0.9/24"}),
		claim("vm1.other", []string{"10.3.0.9/24"}),
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{}).
		WithObjects(ipkeeperNAD(ns, "blue"), ipkeeperNAD(ns, "red"), ipkeeperNAD(ns, "own"))
	for _, o := range objs {
		b = b.WithObjects(o)
	}
	c := b.Build()
	m := &PodMutator{Reader: c, APIReader: c}

	el := func(name, claimRef, mac string) multus.Element {
		e := multus.NewElement(ns, name, "pod"+name)
		if claimRef != "" {
			e.SetClaimRef(claimRef)
		}
		if mac != "" {
			e.SetMAC(mac)
		}
		return e
	}
	elems := []multus.Element{
		el("blue", "vm1.blue", ""),                // filled, dual-stack: the IPv4-derived MAC
		el("red", "vm1.red", ""),                  // failed: no MAC, no wait, admitted
		el("own", "vm1.own", "02:00:00:00:00:01"), // the VM's own MAC stays
		el("other", "vm1.other", ""),              // a network ipkeeper does not serve
		el("plain", "", ""),                       // no claim
	}
	persistent := []string{"net-blue", "net-red", "net-own", "", "net-plain"}
	start := time.Now()
	changed, warnings, denial, err := m.addMACs(context.Background(), ns, elems, persistent, "")
	if err != nil || denial != "" {
		t.Fatalf("addMACs: %v, denial %q (a failed claim's launcher is admitted)", err, denial)
	}
	if took := time.Since(start); took >= macWait {
		t.Errorf("took %s: waited for a claim whose allocation failed", took)
	}
	if !changed {
		t.Fatal("nothing changed")
	}
	for i, want := range []string{"0a:58:0a:01:00:07", "", "02:00:00:00:00:01", "", ""} {
		if elems[i].MAC != want {
			t.Errorf("element %s: mac %q, want %q", elems[i].Name, elems[i].MAC, want)
		}
	}
	out, err := multus.MarshalElements(elems)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"mac":"0a:58:0a:01:00:07"`) {
		t.Errorf("annotation %s lacks the claim's mac", out)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "vm1.red") {
		t.Errorf("warnings %q, want one naming vm1.red", warnings)
	}
}

// A claim made just before its launcher is filled while the webhook waits:
// the launcher gets its MAC at its first start, as soon as the webhook's
// cache sees the fill.
func TestAddMACsWaitsForAClaimBeingFilled(t *testing.T) {
	scheme := launcherScheme(t)
	const ns = "vms"
	cached := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{}).
		WithObjects(ipkeeperNAD(ns, "blue"), &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm1.blue"}}).Build()
	live := fake.NewClientBuilder().WithScheme(scheme).Build() // never read: the cache answers first
	m := &PodMutator{Reader: cached, APIReader: live}
	go func() {
		time.Sleep(3 * macEvery) // the controller, filling the claim a little later
		var claim ipamclaimsv1alpha1.IPAMClaim
		if err := cached.Get(context.Background(), keyOf(ns, "vm1.blue"), &claim); err != nil {
			t.Error(err)
			return
		}
		claim.Status.IPs = []string{"fd00::a00:5/64"}
		if err := cached.Status().Update(context.Background(), &claim); err != nil {
			t.Error(err)
		}
	}()
	e := multus.NewElement(ns, "blue", "podblue")
	e.SetClaimRef("vm1.blue")
	elems := []multus.Element{e}
	start := time.Now()
	if _, warnings, denial, err := m.addMACs(context.Background(), ns, elems, []string{"net-blue"}, ""); err != nil || len(warnings) > 0 || denial != "" {
		t.Fatalf("addMACs: %v, warnings %q, denial %q", err, warnings, denial)
	}
	if want := "0e:58:0a:00:00:05"; elems[0].MAC != want {
		t.Fatalf("mac %q, want %q (derived from the IPv6-only claim)", elems[0].MAC, want)
	}
	if took := time.Since(start); took >= macWait {
		t.Errorf("took %s: waited out macWait although the claim was filled", took)
	}
}

func keyOf(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}
