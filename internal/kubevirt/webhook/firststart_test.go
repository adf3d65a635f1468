// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// A VM's first start must give its NIC the claim's MAC, as every later
// start does. Its launcher is refused while a claim of an ipkeeper
// network exists but is still pending: no addresses yet, and no failed
// allocation, or only the wait for the inline pool ipkeeper-controller is
// making (a VM created together with its NAD). virt-controller creates the
// pod again, and it gets the MAC. A claim whose allocation failed (its
// pool exhausted, a named pool missing), a claim that does not exist or
// is being deleted, and a claim of a network another IPAM serves
// (OVN-Kubernetes fills its claims once the pod exists) still admit the
// launcher without a MAC, with a warning; a guest that reads ipkeeper's
// guest network configuration is refused for any claim of an ipkeeper
// network without addresses.
func TestLauncherWaitsForItsPendingClaimsMAC(t *testing.T) {
	scheme := launcherScheme(t)
	const ns = "vms"
	nads := []*nadv1.NetworkAttachmentDefinition{
		nadOf(ns, "inline", `{"cniVersion":"1.0.0","name":"net-inline","type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.1.0.0/24"}}`),
		nadOf(ns, "named", `{"cniVersion":"1.0.0","name":"net-named","type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","pool":"shared"}}`),
		nadOf(ns, "ovn", `{"cniVersion":"1.0.0","name":"net-ovn","type":"ovn-k8s-cni-overlay","topology":"layer2","subnets":"10.5.0.0/24","allowPersistentIPs":true,"netAttachDefName":"vms/ovn"}`),
	}
	cond := func(reason, message string) *metav1.Condition {
		return &metav1.Condition{Type: claimstatus.ConditionIPsAllocated, Status: metav1.ConditionFalse, Reason: reason, Message: message}
	}
	exhausted := cond(claimstatus.ReasonExhausted, "no free address in IPPool net-inline")
	inlineMissing := cond(claimstatus.ReasonPoolNotFound, `the IPPool "net-inline" of inline network "net-inline" does not exist yet`)
	namedMissing := cond(claimstatus.ReasonPoolNotFound, `network "net-named" uses IPPool "shared", which does not exist; create it`)
	for _, tt := range []struct {
		name        string
		nad         string
		readsSecret bool
		noClaim     bool
		deleting    bool
		ips         []string
		failed      *metav1.Condition
		// denied: the denial names these; else admitted, with the mac
		// given, or without one and with a warning naming the claim.
		denied []string
		mac    string
	}{
		{name: "filled", nad: "inline", ips: []string{"10.1.0.7/24"}, mac: "0a:58:0a:01:00:07"},
		{name: "pending", nad: "inline",
			denied: []string{"has no addresses yet", "once the claim has addresses", "the claim's MAC at this start"}},
		{name: "pending, its inline pool being made", nad: "inline", failed: inlineMissing,
			denied: []string{claimstatus.ReasonPoolNotFound, "once the claim has addresses"}},
		{name: "pending, on a named pool", nad: "named",
			denied: []string{"has no addresses yet", "once the claim has addresses"}},
		{name: "failed: exhausted", nad: "inline", failed: exhausted},
		{name: "failed: named pool missing", nad: "named", failed: namedMissing},
		{name: "no claim", nad: "inline", noClaim: true},
		{name: "pending, being deleted", nad: "inline", deleting: true},
		{name: "pending, another IPAM's network", nad: "ovn"},
		{name: "guest config, pending", nad: "inline", readsSecret: true,
			denied: []string{guestnet.SecretName("guest-config-pending")}},
		{name: "guest config, failed", nad: "inline", readsSecret: true, failed: exhausted,
			denied: []string{claimstatus.ReasonExhausted, guestnet.SecretName("guest-config-failed")}},
		{name: "guest config, another IPAM's network", nad: "ovn", readsSecret: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			vm := strings.ToLower(strings.NewReplacer(", ", "-", ": ", "-", " ", "-", "'", "").Replace(tt.name))
			objs := []client.Object{launcherVMI(ns, vm, tt.nad, tt.readsSecret)}
			for _, n := range nads {
				objs = append(objs, n.DeepCopy())
			}
			if !tt.noClaim {
				claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm + ".blue"},
					Spec:   ipamclaimsv1alpha1.IPAMClaimSpec{Network: "net-" + tt.nad, Interface: kubevirt.PodInterfaceName("blue")},
					Status: ipamclaimsv1alpha1.IPAMClaimStatus{IPs: tt.ips}}
				if tt.failed != nil {
					claim.Status.Conditions = []metav1.Condition{*tt.failed}
				}
				if tt.deleting {
					claim.Finalizers, claim.DeletionTimestamp = []string{"kubevirt.io/persistent-ipam"}, &metav1.Time{Time: time.Now()}
				}
				objs = append(objs, claim)
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
			m := &PodMutator{Reader: c, APIReader: c, Gate: kubevirt.AlwaysOn{}, Decoder: admission.NewDecoder(scheme)}
			raw := launcherPod(t, ns, vm, `[{"name":"`+tt.nad+`","namespace":"vms","interface":"`+kubevirt.PodInterfaceName("blue")+`"}]`)
			resp := m.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: admissionv1.Create, Namespace: ns, Object: runtime.RawExtension{Raw: raw}}})

			if tt.denied != nil {
				if resp.Allowed {
					t.Fatalf("admitted (patches %v, warnings %q); want refused until the claim has addresses", resp.Patches, resp.Warnings)
				}
				if resp.Result.Code != 403 {
					t.Errorf("denial code %d, want 403 (a denial virt-controller retries, not an internal error)", resp.Result.Code)
				}
				for _, want := range append([]string{"IPAMClaim vms/" + vm + ".blue", kubevirt.PodInterfaceName("blue"), "MAC"}, tt.denied...) {
					if !strings.Contains(resp.Result.Message, want) {
						t.Errorf("denial %q does not say %q", resp.Result.Message, want)
					}
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("refused: %v", resp.Result.Message)
			}
			var mac string
			for _, p := range resp.Patches {
				if p.Path != "/metadata/annotations/"+strings.ReplaceAll(multus.Annotation, "/", "~1") {
					continue
				}
				elems, err := multus.ParseElements(p.Value.(string), ns)
				if err != nil {
					t.Fatal(err)
				}
				mac = elems[0].MAC
			}
			if mac != tt.mac {
				t.Errorf("mac %q, want %q", mac, tt.mac)
			}
			if tt.mac == "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], vm+".blue")) {
				t.Errorf("warnings %q, want one naming claim %s.blue, which gives no MAC on this start", resp.Warnings, vm)
			}
		})
	}
}
