// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	types2 "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// A claim-backed attachment's addresses are ipkeeper-controller's: it
// reserves them and records them in the claim's status.ips. These tests
// drive the agent's whole ADD (pod, pool, claim) on fake stores and check
// that it only reads: it returns the recorded addresses once each is
// reserved for the claim, and refuses, naming the address or the claim,
// what it cannot hand out.

// claimConf is inline dual-stack network blue, whose attachment references
// IPAMClaim vm1.blue through args.cni: without a networks annotation
// element the agent reads no NAD, and the config's allowPersistentIPs
// stands.
const claimConf = `{"cniVersion":"1.0.0","name":"blue","type":"bridge","allowPersistentIPs":true,` +
	`"args":{"cni":{"ipam-claim-reference":"vm1.blue"}},` +
	`"ipam":{"type":"ipkeeper","ipRanges":[{"range":"10.0.0.0/24","gateway":"10.0.0.1"},{"range":"fd00::/120"}]}}`

// withStaticIPs is claimConf asking for static addresses (the ips capability).
func withStaticIPs(ips string) string {
	return strings.Replace(claimConf, `"args":`, `"runtimeConfig":{"ips":[`+ips+`]},"args":`, 1)
}

// podsOf is a pod reader (the agent's pod cache, or the API server)
// holding the given pods.
type podsOf []*corev1.Pod

func (p podsOf) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for _, pod := range p {
		if pod.Namespace == key.Namespace && pod.Name == key.Name {
			*obj.(*corev1.Pod) = *pod.DeepCopy()
			return nil
		}
	}
	return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
}

func (podsOf) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// claimFixture is an agent of node-a with address blocks, a launcher pod
// of VM vm1, and network blue's pool, made from its NAD.
type claimFixture struct {
	a      *Agent
	store  *fakeStore
	claims *fakeClaims
	blocks *fakeBlocks
	pod    *corev1.Pod
	claim  *ipamclaimsv1alpha1.IPAMClaim
}

func newClaimFixture(t *testing.T) *claimFixture {
	t.Helper()
	return newClaimFixtureOn(t, claimConf)
}

// newClaimFixtureOn is newClaimFixture with network blue's pool made from conf.
func newClaimFixtureOn(t *testing.T, conf string) *claimFixture {
	t.Helper()
	f := &claimFixture{store: newFakeStore(), claims: newFakeClaims(), blocks: newFakeBlocks(), claim: testClaim("claim-uid-1")}
	f.a = newTestAgent(t, f.store, f.claims)
	f.a.reservations = index.New("node-a")
	withBlocks(f.a, f.blocks)
	f.pod = testPod("virt-launcher-vm1-abcde", "pod-uid-1")
	f.pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: "vm1", UID: "vmi-uid-1", Controller: ptr.To(true),
	}}
	f.pod.Labels = map[string]string{"kubevirt.io/created-by": "vmi-uid-1"}
	f.a.pods = &podLookup{cached: podsOf{f.pod}, live: podsOf{f.pod}, node: "node-a", metrics: f.a.metrics}
	cfg := mustParse(t, conf)
	if !f.a.poolStore.(*fakePoolStore).makeInline(t, cfg, testNAD(cfg)) {
		t.Fatal("network blue got no pool")
	}
	return f
}

// reserve stores what ipkeeper-controller makes for an address of the
// claim: its reservation in pool blue, in a block of claims, of no node.
func (f *claimFixture) reserve(ip string) *ipkeeperv1alpha1.IPReservation {
	return f.store.put(claimReservation("blue", ip, f.claim))
}

func claimReservation(poolKey, ip string, claim *ipamclaimsv1alpha1.IPAMClaim) *ipkeeperv1alpha1.IPReservation {
	return &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{
			Name:   naming.Reservation(poolKey, netip.MustParseAddr(ip)),
			Labels: map[string]string{naming.ClaimsBlockLabel: "true"},
		},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Pool: poolKey, Network: "blue", IP: ip,
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		},
	}
}

// fill records addresses in the claim, reserving each first, as
// ipkeeper-controller does.
func (f *claimFixture) fill(ips ...string) {
	recorded := make([]string, 0, len(ips))
	for _, s := range ips {
		ip, _ := claimstatus.ParseIP(s)
		f.reserve(ip.String())
		recorded = append(recorded, s)
	}
	f.claims.setStatusIPs(f.claim.Namespace, f.claim.Name, recorded...)
}

// add runs the runtime's ADD of the launcher's net1 on conf.
func (f *claimFixture) add(conf, containerID string) (*types100.Result, error) {
	return f.a.Add(context.Background(), &cniproto.Request{
		Command: cniproto.CmdAdd, ContainerID: containerID, Netns: "/var/run/netns/x", IfName: "net1",
		Args:   "K8S_POD_NAMESPACE=" + f.pod.Namespace + ";K8S_POD_NAME=" + f.pod.Name + ";K8S_POD_UID=" + string(f.pod.UID),
		Config: []byte(conf),
	})
}

// checkReadOnly fails t when the agent wrote anything: a reservation, a
// block, or listed the pool (which only an allocation does). Claims it
// cannot write: ClaimStore has no write.
func (f *claimFixture) checkReadOnly(t *testing.T) {
	t.Helper()
	if n := f.store.writes(); n != 0 {
		t.Errorf("a claim-backed ADD made %d reservation writes (create %d, update %d, delete %d, retire %d), want none",
			n, f.store.count("create"), f.store.count("update"), f.store.count("delete"), f.store.count("retire"))
	}
	if n := f.store.count("list"); n != 0 {
		t.Errorf("a claim-backed ADD listed the pool's reservations %d times: it allocated", n)
	}
	if n := f.blocks.createCount(); n != 0 {
		t.Errorf("a claim-backed ADD took %d address blocks", n)
	}
}

func resultIPs(res *types100.Result) string {
	var s []string
	for _, ip := range res.IPs {
		s = append(s, ip.Address.String())
	}
	return strings.Join(s, ",")
}

func TestClaimBackedAddReturnsTheRecordedAddressesAndWritesNothing(t *testing.T) {
	other := func(f *claimFixture, ip string, change func(*ipkeeperv1alpha1.IPReservation)) {
		r := claimReservation("blue", ip, f.claim)
		delete(r.Labels, naming.ClaimsBlockLabel)
		change(r)
		f.store.put(r)
	}
	tests := []struct {
		name  string
		conf  string // claimConf when empty
		setup func(f *claimFixture)
		want  string // the result's addresses; "" when the ADD fails
		// wantErr are substrings of the error, which has CNI code
		// wantCode (7 when 0).
		wantErr  []string
		wantCode uint
		// notInErr are substrings the error must not have.
		notInErr []string
	}{
		{
			name:  "each address reserved for the claim",
			setup: func(f *claimFixture) { f.fill("10.0.0.5/24", "fd00::5/120") },
			want:  "10.0.0.5/24,fd00::5/120",
		},
		{
			name:  "bare addresses get their range's prefix length",
			setup: func(f *claimFixture) { f.fill("10.0.0.5", "fd00::5") },
			want:  "10.0.0.5/24,fd00::5/120",
		},
		{
			name: "an address without a reservation",
			setup: func(f *claimFixture) {
				f.reserve("10.0.0.5")
				f.claims.setStatusIPs("vms", "vm1.blue", "10.0.0.5/24", "fd00::5/120")
			},
			// The controller reserves what a claim records (an edited
			// status.ips): the kubelet's retry succeeds once it has.
			wantErr:  []string{"IPAMClaim vms/vm1.blue", "fd00::5", "status.ips[1]", "has no reservation"},
			wantCode: codeTryAgainLater,
		},
		{
			name: "an address reserved by a pod",
			setup: func(f *claimFixture) {
				f.fill("10.0.0.5/24")
				other(f, "fd00::5", func(r *ipkeeperv1alpha1.IPReservation) {
					r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "web", UID: "web-uid"}
				})
				f.claims.setStatusIPs("vms", "vm1.blue", "10.0.0.5/24", "fd00::5/120")
			},
			wantErr: []string{"IPAMClaim vms/vm1.blue", "fd00::5", "reserved by Pod vms/web"},
		},
		{
			name: "an address reserved by an earlier claim of the same name",
			setup: func(f *claimFixture) {
				f.fill("10.0.0.5/24")
				other(f, "fd00::5", func(r *ipkeeperv1alpha1.IPReservation) { r.Spec.Owner.UID = "claim-uid-0" })
				f.claims.setStatusIPs("vms", "vm1.blue", "10.0.0.5/24", "fd00::5/120")
			},
			wantErr: []string{"IPAMClaim vms/vm1.blue", "fd00::5", "reserved by IPAMClaim vms/vm1.blue"},
		},
		{
			name: "an address of a source claim in another namespace, lent to the claim (decentralized live migration)",
			setup: func(f *claimFixture) {
				f.fill("10.0.0.5/24")
				other(f, "fd00::5", func(r *ipkeeperv1alpha1.IPReservation) {
					lent := r.Spec.Owner
					r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "tenant-b", Name: "vm1.blue", UID: "source-uid"}
					r.Spec.LentTo = &lent
				})
				f.claims.setStatusIPs("vms", "vm1.blue", "10.0.0.5/24", "fd00::5/120")
			},
			want: "10.0.0.5/24,fd00::5/120",
		},
		{
			name: "an address lent to another claim",
			setup: func(f *claimFixture) {
				f.fill("10.0.0.5/24")
				other(f, "fd00::5", func(r *ipkeeperv1alpha1.IPReservation) {
					r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "tenant-b", Name: "vm1.blue", UID: "source-uid"}
					r.Spec.LentTo = &ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "tenant-c", Name: "vm9.blue", UID: "other-uid"}
				})
				f.claims.setStatusIPs("vms", "vm1.blue", "10.0.0.5/24", "fd00::5/120")
			},
			wantErr:  []string{"fd00::5", "another namespace"},
			notInErr: []string{"tenant-b", "tenant-c", "vm9"},
		},
		{
			name: "an address reserved in another namespace, which is not named",
			setup: func(f *claimFixture) {
				f.fill("fd00::5/120")
				other(f, "10.0.0.5", func(r *ipkeeperv1alpha1.IPReservation) {
					r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "tenant-b", Name: "secret-db", UID: "db-uid"}
				})
				f.claims.setStatusIPs("vms", "vm1.blue", "10.0.0.5/24", "fd00::5/120")
			},
			wantErr:  []string{"10.0.0.5", "status.ips[0]", "another namespace"},
			notInErr: []string{"tenant-b", "secret-db"},
		},
		{
			name: "an address whose reservation was released",
			setup: func(f *claimFixture) {
				f.fill("10.0.0.5/24")
				other(f, "fd00::5", func(r *ipkeeperv1alpha1.IPReservation) {
					r.Spec.ReuseAfter = &metav1.Time{Time: time.Now().Add(time.Hour)}
				})
				f.claims.setStatusIPs("vms", "vm1.blue", "10.0.0.5/24", "fd00::5/120")
			},
			wantErr: []string{"fd00::5", "released"},
		},
		{
			name: "a recorded entry that is no address",
			setup: func(f *claimFixture) {
				f.fill("10.0.0.5/24")
				f.claims.setStatusIPs("vms", "vm1.blue", "10.0.0.5/24", "fd00::5::/120")
			},
			wantErr: []string{"status.ips[1]", "fd00::5::/120"},
		},
		{
			name:  "static ips equal to the claim's",
			conf:  withStaticIPs(`"10.0.0.5/24","fd00::5/120"`),
			setup: func(f *claimFixture) { f.fill("10.0.0.5/24", "fd00::5/120") },
			want:  "10.0.0.5/24,fd00::5/120",
		},
		{
			name:    "static ips that differ from the claim's",
			conf:    withStaticIPs(`"10.0.0.5/24","fd00::9/120"`),
			setup:   func(f *claimFixture) { f.fill("10.0.0.5/24", "fd00::5/120") },
			wantErr: []string{"static ips fd00::9", "IPAMClaim vms/vm1.blue", "fd00::5/120"},
		},
		{
			name: "a claim of another network",
			setup: func(f *claimFixture) {
				f.fill("10.0.0.5/24", "fd00::5/120")
				c, _ := f.claims.Get(context.Background(), "vms", "vm1.blue")
				c.Spec.Network = "red"
				f.claims.put(c)
			},
			wantErr: []string{"IPAMClaim vms/vm1.blue", `network "red"`, `network "blue"`},
		},
		{
			name: "a claim of the VM this pod launches",
			setup: func(f *claimFixture) {
				c, _ := f.claims.Get(context.Background(), "vms", "vm1.blue")
				c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm1", UID: "vm-uid-1", Controller: ptr.To(true)}}
				f.claims.put(c)
				f.fill("10.0.0.5/24", "fd00::5/120")
			},
			want: "10.0.0.5/24,fd00::5/120",
		},
		{
			name: "a claim of another VM",
			setup: func(f *claimFixture) {
				c, _ := f.claims.Get(context.Background(), "vms", "vm1.blue")
				c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm2", UID: "vm-uid-2", Controller: ptr.To(true)}}
				f.claims.put(c)
				f.fill("10.0.0.5/24", "fd00::5/120")
			},
			wantErr: []string{"IPAMClaim vms/vm1.blue", "VirtualMachine vm2", "launches VirtualMachineInstance vm1"},
		},
		{
			// An edit of the pod only KubeVirt's controller may make (the
			// launcher-identity policy): without its controller reference,
			// a pod's kubevirt.io/domain annotation names no VMI.
			name: "a launcher without its controller reference, its domain annotation naming the claim's VM",
			setup: func(f *claimFixture) {
				f.pod.OwnerReferences = nil
				metav1.SetMetaDataAnnotation(&f.pod.ObjectMeta, "kubevirt.io/domain", "vm2")
				c, _ := f.claims.Get(context.Background(), "vms", "vm1.blue")
				c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm2", UID: "vm-uid-2", Controller: ptr.To(true)}}
				f.claims.put(c)
				f.fill("10.0.0.5/24", "fd00::5/120")
			},
			wantErr: []string{"IPAMClaim vms/vm1.blue", "VirtualMachine vm2", "no controller reference to a VirtualMachineInstance"},
		},
		{
			name: "a launcher whose controller reference was renamed to the claim's VM, its uid kept",
			setup: func(f *claimFixture) {
				f.pod.OwnerReferences[0].Name = "vm2"
				f.pod.Labels["kubevirt.io/created-by"] = "vmi-uid-other"
				c, _ := f.claims.Get(context.Background(), "vms", "vm1.blue")
				c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm2", UID: "vm-uid-2", Controller: ptr.To(true)}}
				f.claims.put(c)
				f.fill("10.0.0.5/24", "fd00::5/120")
			},
			wantErr: []string{"IPAMClaim vms/vm1.blue", "VirtualMachine vm2", "disagrees with its kubevirt.io/created-by label"},
		},
		{
			name: "a launcher whose reference to its VMI is no controller reference",
			setup: func(f *claimFixture) {
				f.pod.OwnerReferences[0].Controller = nil
				c, _ := f.claims.Get(context.Background(), "vms", "vm1.blue")
				c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm1", UID: "vm-uid-1", Controller: ptr.To(true)}}
				f.claims.put(c)
				f.fill("10.0.0.5/24", "fd00::5/120")
			},
			wantErr: []string{"IPAMClaim vms/vm1.blue", "is not a kubevirt.io/v1 controller reference"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newClaimFixture(t)
			f.claims.put(f.claim)
			tt.setup(f)
			conf := tt.conf
			if conf == "" {
				conf = claimConf
			}
			before, _ := f.claims.Get(context.Background(), "vms", "vm1.blue")
			res, err := f.add(conf, "sandbox-1")
			f.checkReadOnly(t)
			if after, _ := f.claims.Get(context.Background(), "vms", "vm1.blue"); after.ResourceVersion != before.ResourceVersion {
				t.Errorf("the claim changed under the ADD: %+v", after.Status)
			}
			if tt.want != "" {
				if err != nil {
					t.Fatalf("ADD: %v, want %s", err, tt.want)
				}
				if got := resultIPs(res); got != tt.want {
					t.Errorf("ADD returned %s, want %s", got, tt.want)
				}
				if gw := res.IPs[0].Gateway.String(); gw != "10.0.0.1" {
					t.Errorf("IPv4 gateway = %s, want the range's 10.0.0.1", gw)
				}
				return
			}
			wantCode := tt.wantCode
			if wantCode == 0 {
				wantCode = codeInvalidConfig
			}
			if c := cniCodeOf(err); c != wantCode {
				t.Fatalf("ADD = %v (code %d), want CNI code %d", err, c, wantCode)
			}
			mustContainAll(t, err, tt.wantErr...)
			for _, s := range tt.notInErr {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q names %q, another tenant's", err, s)
				}
			}
		})
	}
}

// A recorded address keeps its address when its subnet grew since: it is
// returned with the prefix length of the range that holds it now, and the
// claim keeps it as written (the agent does not write claims).
func TestClaimAddressOfAGrownSubnet(t *testing.T) {
	f := newClaimFixture(t)
	f.a.poolStore.(*fakePoolStore).put(&ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "grown"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.0.0.0/23"}}}})
	conf := `{"cniVersion":"1.0.0","name":"blue","type":"bridge","allowPersistentIPs":true,"args":{"cni":{"ipam-claim-reference":"vm1.blue"}},"ipam":{"type":"ipkeeper","pool":"grown"}}`
	f.claims.put(f.claim)
	f.store.put(claimReservation("grown", "10.0.0.5", f.claim))
	f.claims.setStatusIPs("vms", "vm1.blue", "10.0.0.5/24")
	res, err := f.add(conf, "sandbox-1")
	if err != nil || resultIPs(res) != "10.0.0.5/23" {
		t.Fatalf("ADD = %v, %v; want 10.0.0.5/23", res, err)
	}
	f.checkReadOnly(t)
	if got, _ := f.claims.Get(context.Background(), "vms", "vm1.blue"); len(got.Status.IPs) != 1 || got.Status.IPs[0] != "10.0.0.5/24" {
		t.Errorf("status.ips = %v, want it as written: [10.0.0.5/24]", got.Status.IPs)
	}
}

// The controller fills a VM's claims when the VM is created, but a
// launcher pod may come first: its ADD waits for the claim to exist and
// have addresses, then returns them.
func TestClaimBackedAddWaitsForTheAddresses(t *testing.T) {
	for _, tt := range []struct {
		name   string
		exists bool // the claim exists, without addresses, when the ADD starts
	}{
		{"the claim has no addresses yet", true},
		{"the claim does not exist yet", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newClaimFixture(t)
			f.a.opts.ClaimWaitTimeout = time.Hour // the test ends the wait
			if tt.exists {
				f.claims.put(f.claim)
			}
			type result struct {
				res *types100.Result
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := f.add(claimConf, "sandbox-1")
				done <- result{res, err}
			}()
			select {
			case <-f.claims.waiting:
			case r := <-done:
				t.Fatalf("ADD returned (%v, %v) before the claim had addresses", r.res, r.err)
			case <-time.After(10 * time.Second):
				t.Fatal("ADD did not wait for the claim within 10s")
			}
			if !tt.exists {
				f.claims.put(f.claim)
			}
			f.fill("10.0.0.7/24", "fd00::7/120")
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatalf("ADD once the claim has addresses: %v", r.err)
				}
				if got := resultIPs(r.res); got != "10.0.0.7/24,fd00::7/120" {
					t.Errorf("ADD returned %s, want the recorded 10.0.0.7/24,fd00::7/120", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("ADD did not return within 10s of the claim getting addresses")
			}
			f.checkReadOnly(t)
		})
	}
}

// A claim that gets no addresses within ClaimWaitTimeout fails the ADD
// with "try again later", naming the claim and what its conditions say
// (the controller's reason), so the pod's event tells why.
func TestClaimBackedAddWithoutAddressesTellsWhy(t *testing.T) {
	for _, tt := range []struct {
		name  string
		claim func(c *ipamclaimsv1alpha1.IPAMClaim) // nil: no claim
		want  []string
	}{
		{
			name: "no claim",
			want: []string{"vms/vm1.blue", "did not appear within 50ms"},
		},
		{
			name: "IPsAllocated=False",
			claim: func(c *ipamclaimsv1alpha1.IPAMClaim) {
				c.Status.Conditions = []metav1.Condition{{
					Type: claimstatus.ConditionIPsAllocated, Status: metav1.ConditionFalse, Reason: claimstatus.ReasonExhausted,
					Message: `network "blue" (IPPool "blue") has no free IPv6 address`,
				}}
			},
			want: []string{"IPAMClaim vms/vm1.blue", "no addresses (status.ips) after 50ms", "IPsAllocated=False", "SubnetExhausted", `has no free IPv6 address`},
		},
		{
			name: "RequestedAddresses=False",
			claim: func(c *ipamclaimsv1alpha1.IPAMClaim) {
				c.Status.Conditions = []metav1.Condition{{
					Type: claimstatus.ConditionRequested, Status: metav1.ConditionFalse, Reason: claimstatus.ReasonRequestedTaken,
					Message: "10.0.0.9 is reserved by another workload",
				}}
			},
			want: []string{"IPAMClaim vms/vm1.blue", "RequestedAddresses=False", "Taken", "10.0.0.9 is reserved by another workload"},
		},
		{
			name:  "no condition",
			claim: func(*ipamclaimsv1alpha1.IPAMClaim) {},
			want:  []string{"IPAMClaim vms/vm1.blue", "has not recorded them yet", "kubectl ipkeeper why claim vm1.blue -n vms"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newClaimFixture(t)
			f.a.opts.ClaimWaitTimeout = 50 * time.Millisecond
			if tt.claim != nil {
				c := f.claim.DeepCopy()
				tt.claim(c)
				f.claims.put(c)
			}
			_, err := f.add(claimConf, "sandbox-1")
			if c := cniCodeOf(err); c != codeTryAgainLater {
				t.Fatalf("ADD = %v (code %d), want CNI code 11", err, c)
			}
			mustContainAll(t, err, append([]string{"pod vms/virt-launcher-vm1-abcde interface net1"}, tt.want...)...)
			f.checkReadOnly(t)
		})
	}
}

// A claim being deleted (its VM stopped, or lost this network) is never
// handed to a launcher: its addresses are about to be freed. The ADD
// waits for the claim ipkeeper makes again, and fails with "try again
// later", saying so, if none comes in time.
func TestClaimBeingDeletedIsNotHandedOut(t *testing.T) {
	f := newClaimFixture(t)
	f.a.opts.ClaimWaitTimeout = 50 * time.Millisecond
	deleting := f.claim.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Finalizers = []string{"kubevirt.io/persistent-ipam"}
	f.claims.put(deleting)
	f.fill("10.0.0.7/24", "fd00::7/120")
	res, err := f.add(claimConf, "sandbox-1")
	if c := cniCodeOf(err); c != codeTryAgainLater {
		t.Fatalf("ADD with the claim being deleted = %v, %v (code %d), want CNI code 11", res, err, c)
	}
	mustContainAll(t, err, "IPAMClaim vms/vm1.blue", "is being deleted")

	// The claim made again (a new UID) and filled: the ADD gets its addresses.
	f.a.opts.ClaimWaitTimeout = time.Hour
	done := make(chan error, 1)
	var got *types100.Result
	go func() {
		var err error
		got, err = f.add(claimConf, "sandbox-1")
		done <- err
	}()
	select {
	case <-f.claims.waiting:
	case err := <-done:
		t.Fatalf("ADD returned (%v, %v) with the claim still being deleted", got, err)
	case <-time.After(10 * time.Second):
		t.Fatal("ADD did not wait for the claim within 10s")
	}
	f.claim = testClaim("claim-uid-2")
	f.claims.put(f.claim)
	f.fill("10.0.0.9/24", "fd00::9/120")
	select {
	case err := <-done:
		if err != nil || resultIPs(got) != "10.0.0.9/24,fd00::9/120" {
			t.Fatalf("ADD once the claim is made again: %v, %v; want its 10.0.0.9/24,fd00::9/120", got, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ADD did not return within 10s of the new claim getting addresses")
	}
}

// A claim-backed attachment's DEL and the runtime's GC release nothing of
// the claim's: its addresses stay with the VM, across launcher pods and
// nodes, until ipkeeper-controller releases them. That holds too for claim
// reservations an agent of an earlier version made, which carry the
// sandbox, interface and node a pod's DEL and GC name.
func TestClaimBackedDelAndGCReleaseNothing(t *testing.T) {
	f := newClaimFixture(t)
	f.claims.put(f.claim)
	f.fill("10.0.0.5/24", "fd00::5/120")
	if _, err := f.add(claimConf, "sandbox-1"); err != nil {
		t.Fatal(err)
	}
	// What an earlier agent made for another address of the claim: the
	// agent's watch of shared reservations delivers it.
	old := claimReservation("blue", "10.0.0.6", f.claim)
	delete(old.Labels, naming.ClaimsBlockLabel)
	old.Spec.Node, old.Spec.ContainerID, old.Spec.InterfaceName = "node-a", "sandbox-1", "net1"
	f.store.put(old)
	for _, r := range f.store.all() {
		watched(f.a, r)
	}
	kept := map[string]types2.UID{}
	for _, r := range f.store.all() {
		kept[r.Name] = r.UID
	}

	if err := f.a.Del(context.Background(), &cniproto.Request{Command: cniproto.CmdDel, ContainerID: "sandbox-1", IfName: "net1", Config: []byte(claimConf)}); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	f.a.opts.CNIGCMinAge = -1
	gc := strings.TrimSuffix(claimConf, "}") + `,"cni.dev/valid-attachments":[]}`
	if err := f.a.GC(context.Background(), &cniproto.Request{Command: cniproto.CmdGC, Config: []byte(gc)}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	f.checkReadOnly(t)
	for name, uid := range kept {
		if r, ok := f.store.get(name); !ok || r.UID != uid || r.Spec.Released() {
			t.Errorf("the claim's reservation %s was released by a DEL or GC of its launcher (present %v)", name, ok)
		}
	}
	checkIndex(t, f.a.reservations)
}

// CHECK of a claim-backed attachment reads as the ADD does: the recorded
// addresses, each reserved for the claim.
func TestClaimBackedCheck(t *testing.T) {
	f := newClaimFixture(t)
	f.claims.put(f.claim)
	f.fill("10.0.0.5/24", "fd00::5/120")
	check := func() error {
		return f.a.Check(context.Background(), &cniproto.Request{
			Command: cniproto.CmdCheck, ContainerID: "sandbox-1", Netns: "/var/run/netns/x", IfName: "net1",
			Args:   "K8S_POD_NAMESPACE=vms;K8S_POD_NAME=" + f.pod.Name + ";K8S_POD_UID=" + string(f.pod.UID),
			Config: []byte(claimConf),
		})
	}
	if err := check(); err != nil {
		t.Fatalf("CHECK with both addresses reserved: %v", err)
	}
	// The IPv6 reservation goes: CHECK fails naming it.
	name := naming.Reservation("blue", netip.MustParseAddr("fd00::5"))
	r, _ := f.store.get(name)
	if err := f.store.Delete(context.Background(), name, r.UID, r.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	written := f.store.writes() // the test's delete
	err := check()
	if err == nil {
		t.Fatal("CHECK passed with a recorded address unreserved")
	}
	mustContainAll(t, err, "fd00::5", "has no reservation")
	// A claim recording no IPv6 address of a dual-stack network fails too.
	f.claims.setStatusIPs("vms", "vm1.blue", "10.0.0.5/24")
	err = check()
	if err == nil {
		t.Fatal("CHECK passed with no IPv6 address recorded on a dual-stack network")
	}
	mustContainAll(t, err, "records no address (IPv6)")
	if n := f.store.writes() - written; n != 0 {
		t.Errorf("CHECK made %d writes", n)
	}
}

// A claim-backed ADD that cannot read the claim (not a missing one: the
// API server failing) is "try again later", not a configuration error.
func TestClaimBackedAddWhenTheClaimCannotBeRead(t *testing.T) {
	f := newClaimFixture(t)
	f.claims.put(f.claim)
	f.fill("10.0.0.5/24", "fd00::5/120")
	f.claims.failGet = errors.New("etcdserver: request timed out")
	_, err := f.add(claimConf, "sandbox-1")
	if c := cniCodeOf(err); c != codeTryAgainLater {
		t.Fatalf("ADD = %v (code %d), want CNI code 11", err, c)
	}
	mustContainAll(t, err, "request timed out")
	f.checkReadOnly(t)
}

// A claim that records an address its network never hands out (outside
// the ranges, the gateway, an excluded or the broadcast address: status.ips
// edited by hand) is a mistake no retry mends: ipkeeper-controller will
// never reserve it (IPsAllocated=False OutsidePool, final). The launcher's
// ADD fails with CNI code 7, a configuration error runtimes do not retry
// forever, quoting the claim's condition; an address the network hands out
// but nobody reserved yet stays code 11 (the controller reserves it).
func TestClaimRecordingAnAddressTheNetworkNeverHandsOut(t *testing.T) {
	conf := strings.Replace(claimConf, `"gateway":"10.0.0.1"`, `"gateway":"10.0.0.1","exclude":["10.0.0.200/30"]`, 1)
	outside := metav1.Condition{
		Type: claimstatus.ConditionIPsAllocated, Status: metav1.ConditionFalse, Reason: claimstatus.ReasonOutsidePool,
		Message: `the claim records 10.0.0.x (status.ips[0]), which network "blue" (IPPool "blue") does not hand out`,
	}
	for _, tt := range []struct {
		name      string
		ip        string
		condition *metav1.Condition
		wantCode  uint
		want      []string
	}{
		{name: "outside the ranges", ip: "10.0.1.5", condition: &outside, wantCode: codeInvalidConfig,
			want: []string{"10.0.1.5", "status.ips[0]", "never hands out", "IPsAllocated=False, OutsidePool: the claim records 10.0.0.x"}},
		{name: "the gateway", ip: "10.0.0.1", condition: &outside, wantCode: codeInvalidConfig,
			want: []string{"10.0.0.1", "status.ips[0]", "never hands out", "gateway", "IPsAllocated=False, OutsidePool"}},
		{name: "an excluded address", ip: "10.0.0.201", condition: &outside, wantCode: codeInvalidConfig,
			want: []string{"10.0.0.201", "never hands out", "exclude", "IPsAllocated=False, OutsidePool"}},
		{name: "the broadcast address", ip: "10.0.0.255", condition: &outside, wantCode: codeInvalidConfig,
			want: []string{"10.0.0.255", "never hands out", "broadcast", "IPsAllocated=False, OutsidePool"}},
		// Before the controller saw the edit: still final, and why says more.
		{name: "no condition yet", ip: "10.0.0.1", wantCode: codeInvalidConfig,
			want: []string{"10.0.0.1", "never hands out", "kubectl ipkeeper why claim vm1.blue -n vms"}},
		{name: "an address handed out, not reserved yet", ip: "10.0.0.7", wantCode: codeTryAgainLater,
			want: []string{"10.0.0.7", "has no reservation", "ipkeeper-controller reserves"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newClaimFixtureOn(t, conf)
			c := f.claim.DeepCopy()
			if tt.condition != nil {
				c.Status.Conditions = []metav1.Condition{*tt.condition}
			}
			f.claims.put(c)
			f.reserve("fd00::5")
			f.claims.setStatusIPs("vms", "vm1.blue", tt.ip+"/24", "fd00::5/120")
			_, err := f.add(conf, "sandbox-1")
			if code := cniCodeOf(err); code != tt.wantCode {
				t.Fatalf("ADD = %v (code %d), want CNI code %d", err, code, tt.wantCode)
			}
			mustContainAll(t, err, append([]string{"IPAMClaim vms/vm1.blue"}, tt.want...)...)
			f.checkReadOnly(t)
		})
	}
}
