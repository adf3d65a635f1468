// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
)

type switchGate struct{ on bool }

func (g *switchGate) Enabled(context.Context) (bool, error) { return g.on, nil }

// gateOffVM is a VM of namespace vms whose secondary networks use the
// given NADs (network name = NAD name).
func gateOffVM(name string, nads ...string) *kubevirtv1.VirtualMachine {
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: name, UID: types.UID(name + "-uid")},
		Spec:       kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	}
	spec := &vm.Spec.Template.Spec
	spec.Networks = append(spec.Networks, kubevirtv1.Network{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}})
	for _, n := range nads {
		spec.Networks = append(spec.Networks, kubevirtv1.Network{Name: n, NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: n}}})
	}
	return vm
}

// syncScheme has the kinds ownerSync reads and writes.
func syncScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubevirtv1.AddToScheme, ipamclaimsv1alpha1.AddToScheme, nadv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return scheme
}

func gateOffNAD(name string, persistent bool) *nadv1.NetworkAttachmentDefinition {
	flag := ""
	if persistent {
		flag = `,"allowPersistentIPs":true`
	}
	return &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: name},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"1.0.0","name":"net-` + name + `","type":"bridge"` + flag + `,"ipam":{"type":"ipkeeper"}}`},
	}
}

// With the PersistentIPs gate off, a VM that wants persistent IPs and has
// no claim for them is told so once, with a Warning that names the gate,
// where it is read and the ways out; a VM without such a network, or with
// its claim, is not told; nothing is created, and an existing claim is
// left untouched. Told again only after the interval, or after the gate
// was turned on and off again.
func TestGateOffTellsOwnersThatWantClaims(t *testing.T) {
	scheme := syncScheme(t)
	wants, plain, held, both := gateOffVM("wants", "blue"), gateOffVM("plain", "red"), gateOffVM("held", "blue"), gateOffVM("both", "blue", "green")
	heldOwner := claimowner.Owner{Kind: claimowner.KindVM, Name: held.Name, UID: held.UID}
	heldClaim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "held.blue", Finalizers: []string{Finalizer},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(held, kubevirtv1.SchemeGroupVersion.WithKind("VirtualMachine"))}},
		Spec:   ipamclaimsv1alpha1.IPAMClaimSpec{Network: "net-blue", Interface: "pod0123456789a"},
		Status: ipamclaimsv1alpha1.IPAMClaimStatus{IPs: []string{"10.0.0.5/24"}},
	}
	claimowner.Record(heldClaim, heldOwner)
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{}).
		WithObjects(gateOffNAD("blue", true), gateOffNAD("green", true), gateOffNAD("red", false), wants, plain, held, both, heldClaim).Build()
	ctx := context.Background()
	heldBefore := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(heldClaim), heldBefore); err != nil {
		t.Fatal(err)
	}

	rec := record.NewFakeRecorder(100)
	gate := &switchGate{}
	clock := time.Unix(1_700_000_000, 0)
	s := &ownerSync{
		claimWriter: claimWriter{client: c, recorder: rec},
		gate:        gate,
		backoff:     workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, time.Minute),
		gateOff:     newGateOffNotices(func() time.Time { return clock }),
	}
	sync := func(vm *kubevirtv1.VirtualMachine) {
		t.Helper()
		owner := claimowner.Owner{Kind: claimowner.KindVM, Name: vm.Name, UID: vm.UID}
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(vm)}
		if _, err := s.sync(ctx, req, vm, owner, &vm.Spec.Template.Spec, nil); err != nil {
			t.Fatalf("sync %s: %v", vm.Name, err)
		}
	}
	events := func() []string {
		var out []string
		for {
			select {
			case e := <-rec.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}
	warnings := func() float64 { return testutil.ToFloat64(gateOffWarnings) }

	before := warnings()
	for range 3 { // reconciles of the same VMs: no new event
		for _, vm := range []*kubevirtv1.VirtualMachine{wants, plain, held, both} {
			sync(vm)
		}
	}
	got := events()
	if len(got) != 2 {
		t.Fatalf("events = %q, want one for wants and one for both", got)
	}
	for _, part := range []string{"Warning " + string(ReasonPersistentIPsDisabled) + ` network "blue" allows persistent IPs but gets no IPAMClaim`,
		"the PersistentIPs feature gate is not listed in the KubeVirt CR (spec.configuration.developerConfiguration.featureGates)",
		"this VirtualMachine's launcher pods get addresses that do not persist",
		"--require-kubevirt-feature-gate=false", "HyperConverged CR's kubevirt.kubevirt.io/jsonpatch annotation", "docs/kubevirt.md"} {
		if !strings.Contains(got[0], part) {
			t.Errorf("event %q lacks %q", got[0], part)
		}
	}
	if !strings.Contains(got[1], `networks "blue", "green" allow persistent IPs but get no IPAMClaim`) {
		t.Errorf("event %q does not name both networks", got[1])
	}
	if d := warnings() - before; d != 2 {
		t.Errorf("%s grew by %v, want 2", "ipkeeper_controller_claims_persistent_ips_disabled_total", d)
	}
	var list ipamclaimsv1alpha1.IPAMClaimList
	if err := c.List(ctx, &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("claims with the gate off: %v (%v), want only held.blue", list.Items, err)
	}
	heldAfter := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(heldClaim), heldAfter); err != nil {
		t.Fatal(err)
	}
	if heldAfter.ResourceVersion != heldBefore.ResourceVersion || heldAfter.DeletionTimestamp != nil {
		t.Errorf("the gate off touched the existing claim: %+v", heldAfter)
	}

	// An hour on, the first event has expired (the API server's default
	// --event-ttl): told again.
	clock = clock.Add(gateOffNoticeInterval)
	sync(wants)
	sync(plain)
	if got := events(); len(got) != 1 || !strings.Contains(got[0], string(ReasonPersistentIPsDisabled)) {
		t.Errorf("after the interval: events = %q, want one for wants", got)
	}

	// The gate on: the claim is made. Off again, a VM still without its
	// claim is told again at once, and the one that got it is not.
	gate.on = true
	sync(wants)
	if _, err := claimOf(ctx, c, "wants.blue"); err != nil {
		t.Fatalf("gate on: %v", err)
	}
	_ = events() // IPAMClaimCreated
	gate.on = false
	sync(wants)
	sync(both)
	if got := events(); len(got) != 1 || !strings.Contains(got[0], `networks "blue", "green"`) {
		t.Errorf("gate off again: events = %q, want one for both only", got)
	}
}

func claimOf(ctx context.Context, c client.Client, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	var claim ipamclaimsv1alpha1.IPAMClaim
	err := c.Get(ctx, types.NamespacedName{Namespace: "vms", Name: name}, &claim)
	return &claim, err
}

// The notices stay bounded: owners told longer ago than the interval are
// dropped once the map has grown.
func TestGateOffNoticesPrune(t *testing.T) {
	clock := time.Unix(0, 0)
	n := newGateOffNotices(func() time.Time { return clock })
	for i := range gateOffNoticesPruneMin - 1 {
		if !n.tell(types.UID(rune('a'+i%26)) + types.UID(strings.Repeat("x", i))) {
			t.Fatal("a new owner was not told")
		}
	}
	if n.tell(types.UID("a")) {
		t.Fatal("an owner told twice within the interval")
	}
	clock = clock.Add(gateOffNoticeInterval)
	if !n.tell("late") {
		t.Fatal("a new owner was not told")
	}
	if len(n.at) != 1 {
		t.Fatalf("%d owners remembered after the prune, want 1", len(n.at))
	}
}

// A VM whose network.kubevirt.io/addresses names a network it does not
// have (a typo: "blu" for "blue") is told, with a Warning naming the key
// and the networks it has: its request would otherwise be dropped in
// silence, and a V2V import start with an address of the pool's choosing.
// A key naming one of its networks that ipkeeper does not serve (another
// IPAM's) is no mistake, and not told.
func TestRequestForAnUnknownNetworkIsTold(t *testing.T) {
	scheme := syncScheme(t)
	for _, tt := range []struct {
		name, request string
		want          []string // parts of the one Warning; none when empty
	}{
		{name: "misspelled", request: `{"blu":["10.0.0.5"]}`,
			want: []string{"Warning " + string(ReasonRequestInvalid), `"blu"`, RequestedAddressesAnnotation, `"default", "blue", "red"`}},
		{name: "one right, one misspelled", request: `{"blue":["10.0.0.5"],"rde":["10.0.1.5"]}`,
			want: []string{"Warning " + string(ReasonRequestInvalid), `"rde"`, `"default", "blue", "red"`}},
		{name: "a network ipkeeper does not serve", request: `{"red":["10.0.1.5"]}`},
		{name: "right", request: `{"blue":["10.0.0.5"]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vm := gateOffVM("vm1", "blue", "red")
			c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&ipamclaimsv1alpha1.IPAMClaim{}).
				WithObjects(gateOffNAD("blue", true), gateOffNAD("red", false), vm).Build()
			rec := record.NewFakeRecorder(100)
			s := &ownerSync{
				claimWriter: claimWriter{client: c, recorder: rec},
				gate:        &switchGate{on: true},
				backoff:     workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, time.Minute),
				gateOff:     newGateOffNotices(time.Now),
			}
			owner := claimowner.Owner{Kind: claimowner.KindVM, Name: vm.Name, UID: vm.UID}
			annotations := map[string]string{RequestedAddressesAnnotation: tt.request}
			if _, err := s.sync(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(vm)}, vm, owner, &vm.Spec.Template.Spec, annotations); err != nil {
				t.Fatal(err)
			}
			var warnings []string
			for len(rec.Events) > 0 {
				if e := <-rec.Events; strings.HasPrefix(e, "Warning ") {
					warnings = append(warnings, e)
				}
			}
			if len(tt.want) == 0 {
				if len(warnings) != 0 {
					t.Fatalf("warnings %q, want none", warnings)
				}
				return
			}
			if len(warnings) != 1 {
				t.Fatalf("warnings %q, want one", warnings)
			}
			for _, w := range tt.want {
				if !strings.Contains(warnings[0], w) {
					t.Errorf("warning %q lacks %q", warnings[0], w)
				}
			}
		})
	}
}
