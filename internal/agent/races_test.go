// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	types2 "k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// These tests drive the allocation and release paths on fake stores, one
// interleaving each, at the points where a real API server, network or
// second node can get in between two steps of the agent.

const (
	dualStackConf = `{"cniVersion":"1.0.0","name":"blue","type":"bridge","allowPersistentIPs":true,` +
		`"ipam":{"type":"ipkeeper","ipRanges":[{"range":"10.0.0.0/24","gateway":"10.0.0.1"},{"range":"fd00::/120"}]}}`
	smallConf = `{"cniVersion":"1.0.0","name":"small","type":"bridge","ipam":{"type":"ipkeeper","range":"10.9.0.0/29"}}`
)

func testPod(name string, uid types2.UID) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: name, UID: uid},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
	}
}

func testRequest(t testing.TB, command, conf, containerID string, pod *corev1.Pod) *request {
	t.Helper()
	creq := &cniproto.Request{
		Command: command, ContainerID: containerID, Netns: "/var/run/netns/x", IfName: "net1",
		Args:   "K8S_POD_NAMESPACE=" + pod.Namespace + ";K8S_POD_NAME=" + pod.Name + ";K8S_POD_UID=" + string(pod.UID),
		Config: []byte(conf),
	}
	req, err := parseRequest(creq)
	if err != nil {
		t.Fatalf("parseRequest: %v", err)
	}
	// The inline network's pool, as resolvePool finds it on a first use.
	inline := ""
	if req.cfg.Pool == "" {
		inline = req.cfg.Name
	}
	req.pool = &poolView{name: req.cfg.PoolName(), key: naming.PoolLockKey(req.cfg.PoolName(), inline), ranges: req.cfg.Ranges}
	return req
}

func testClaim(uid types2.UID) *ipamclaimsv1alpha1.IPAMClaim {
	return &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "vm1.blue", UID: uid},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue", Interface: "podabc"},
	}
}

// reservationsOwnedBy returns the stored reservations of an owner UID.
func reservationsOwnedBy(s *fakeStore, uid types2.UID) []*ipkeeperv1alpha1.IPReservation {
	var out []*ipkeeperv1alpha1.IPReservation
	for _, r := range s.all() {
		if r.Spec.Owner.UID == uid {
			out = append(out, r)
		}
	}
	return out
}

// Defect: a new sandbox of a pod takes its reservation over in place; an
// informer event of the reservation's older version arriving afterwards
// must not bring the old sandbox back into the index, or the old
// sandbox's late DEL deletes the address the new sandbox uses.
func TestLateDelAfterSandboxTakeoverKeepsReservation(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	ctx := context.Background()
	pod := testPod("web", "pod-uid-1")

	first, err := a.allocateForPod(ctx, testRequest(t, cniproto.CmdAdd, smallConf, "sandbox-old", pod), pod)
	if err != nil {
		t.Fatalf("ADD (old sandbox): %v", err)
	}
	name := naming.Reservation("small", first[0].Addr())
	oldVersion, _ := store.get(name) // what the informer has not delivered yet

	if _, err := a.allocateForPod(ctx, testRequest(t, cniproto.CmdAdd, smallConf, "sandbox-new", pod), pod); err != nil {
		t.Fatalf("ADD (new sandbox): %v", err)
	}
	// The informer now delivers the creation event: the older version.
	a.onReservation(oldVersion)
	if e, _ := a.idx.get(name); e.containerID != "sandbox-new" {
		t.Errorf("index went back to an older version: container ID %q, want sandbox-new", e.containerID)
	}

	// The runtime's late DEL for the old sandbox.
	del := &cniproto.Request{Command: cniproto.CmdDel, ContainerID: "sandbox-old", IfName: "net1", Config: []byte(smallConf)}
	if err := a.Del(ctx, del); err != nil {
		t.Fatalf("DEL (old sandbox): %v", err)
	}
	if r, ok := store.get(name); !ok || r.Spec.ContainerID != "sandbox-new" {
		t.Fatalf("the old sandbox's DEL released the reservation the new sandbox uses (present: %v)", ok)
	}
}

// Defect: DEL/GC decided from an index entry that is out of date must not
// delete the reservation as it is now: the delete carries the version it
// decided on, and a changed object is re-read and re-judged.
func TestReleaseDeletesOnlyTheVersionItDecidedOn(t *testing.T) {
	for _, verb := range []string{cniproto.CmdDel, cniproto.CmdGC} {
		t.Run(verb, func(t *testing.T) {
			store := newFakeStore()
			a := newTestAgent(t, store, newFakeClaims())
			ip := netip.MustParseAddr("10.9.0.3")
			name := naming.Reservation("small", ip)
			stale := store.put(&ipkeeperv1alpha1.IPReservation{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: ipkeeperv1alpha1.IPReservationSpec{
					Network: "small", IP: ip.String(), InterfaceName: "net1", ContainerID: "sandbox-old", Node: "node-a",
					Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "web", UID: "pod-uid-1"},
				},
			})
			a.onReservation(stale) // the index knows only this version
			store.modify(name, func(r *ipkeeperv1alpha1.IPReservation) { r.Spec.ContainerID = "sandbox-new" })

			var err error
			if verb == cniproto.CmdDel {
				err = a.Del(context.Background(), &cniproto.Request{Command: verb, ContainerID: "sandbox-old", IfName: "net1", Config: []byte(smallConf)})
			} else {
				gc := strings.TrimSuffix(smallConf, "}") + `,"cni.dev/valid-attachments":[]}`
				// sandbox-new is valid for the runtime: a GC must leave it.
				gc = strings.Replace(gc, `"cni.dev/valid-attachments":[]`, `"cni.dev/valid-attachments":[{"containerID":"sandbox-new","ifname":"net1"}]`, 1)
				err = a.GC(context.Background(), &cniproto.Request{Command: verb, Config: []byte(gc)})
			}
			if err != nil {
				t.Fatalf("%s: %v", verb, err)
			}
			if _, ok := store.get(name); !ok {
				t.Fatalf("%s deleted a reservation that had moved to another sandbox after the index saw it", verb)
			}
		})
	}
}

// Defect: when two nodes make a claim's first allocation at once, the
// loser of the status write must release only what it created, never an
// address it adopted from the winner or one recorded in the claim's status.
func TestClaimStatusRaceReleasesOnlyWhatThisCallCreated(t *testing.T) {
	store := newFakeStore()
	claim := testClaim("claim-uid-1")
	claims := newFakeClaims(claim)
	a := newTestAgent(t, store, claims)
	pod := testPod("virt-launcher-vm1-abcde", "pod-uid-2")
	req := testRequest(t, cniproto.CmdAdd, dualStackConf, "sandbox-1", pod)
	owner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "vms", Name: claim.Name, UID: claim.UID}
	claimRes := func(ip string) *ipkeeperv1alpha1.IPReservation {
		return &ipkeeperv1alpha1.IPReservation{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("blue", netip.MustParseAddr(ip))},
			Spec:       ipkeeperv1alpha1.IPReservationSpec{Network: "blue", IP: ip, Owner: owner, InterfaceName: "net1", Node: "node-b"},
		}
	}

	// The other node (the migration target) creates the IPv4 reservation a
	// moment before this agent tries the same candidate (same seed), and
	// its own IPv6 address elsewhere.
	var winnerV4 string
	winnerUIDs := map[string]types2.UID{}
	store.beforeCreate = func(r *ipkeeperv1alpha1.IPReservation) error {
		if winnerV4 == "" && netip.MustParseAddr(r.Spec.IP).Is4() {
			winnerV4 = r.Spec.IP
			winnerUIDs[r.Name] = store.put(claimRes(r.Spec.IP)).UID
		}
		return nil
	}
	winnerV6 := "fd00::99"
	w6 := store.put(claimRes(winnerV6))
	winnerUIDs[w6.Name] = w6.UID
	// ... and writes the claim's status first.
	claims.beforeStatus = func(*ipamclaimsv1alpha1.IPAMClaim) {
		claims.setStatusIPs("vms", claim.Name, winnerV4+"/24", winnerV6+"/120")
	}

	ips, err := a.allocateForClaim(context.Background(), req, pod, claim.Name)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if got := formatIPs(ips); got != winnerV4+"/24,"+winnerV6+"/120" {
		t.Errorf("ADD returned %s, want the winner's %s/24,%s/120", got, winnerV4, winnerV6)
	}
	for name, uid := range winnerUIDs {
		// Released and made again is not kept: in between, anyone could
		// have taken the address.
		if r, ok := store.get(name); !ok || r.UID != uid {
			t.Errorf("the winner's reservation %s was released by the loser (present: %v)", name, ok)
		}
	}
	if got := len(reservationsOwnedBy(store, claim.UID)); got != 2 {
		t.Errorf("the claim owns %d reservations, want 2 (the loser's own IPv6 released)", got)
	}
}

// Defect: a create that the server applied but whose response was lost
// must be recognised on the retry as this attachment's own reservation.
func TestLostCreateResponseIsAdoptedOnRetry(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	pod := testPod("web", "pod-uid-3")
	req := testRequest(t, cniproto.CmdAdd, smallConf, "sandbox-1", pod)
	lost := errors.New("http2: client connection lost")
	store.afterCreate = func(*ipkeeperv1alpha1.IPReservation) error {
		store.afterCreate = nil
		return lost
	}

	if _, err := a.allocateForPod(context.Background(), req, pod); err == nil {
		t.Fatal("the first ADD succeeded although its create response was lost")
	} else if c := cniCodeOf(err); c != types.ErrTryAgainLater {
		t.Errorf("first ADD failed with CNI code %d, want %d (try again later): %v", c, types.ErrTryAgainLater, err)
	}
	ips, err := a.allocateForPod(context.Background(), req, pod)
	if err != nil {
		t.Fatalf("retried ADD: %v", err)
	}
	held := reservationsOwnedBy(store, pod.UID)
	if len(held) != 1 {
		t.Fatalf("the attachment holds %d reservations after the retry, want 1", len(held))
	}
	if held[0].Spec.IP != ips[0].Addr().String() {
		t.Errorf("retry returned %s, but the attachment's reservation is %s", ips[0].Addr(), held[0].Spec.IP)
	}
}

// Defect: every ADD on an exhausted network listed it live; confirmation
// must cost O(1) API reads per network until something is released.
func TestExhaustionIsConfirmedOncePerRelease(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	ctx := context.Background()
	for i := 1; i <= 6; i++ { // 10.9.0.1-6: every usable address of the /29
		ip := netip.AddrFrom4([4]byte{10, 9, 0, byte(i)})
		a.onReservation(store.put(&ipkeeperv1alpha1.IPReservation{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("small", ip)},
			Spec: ipkeeperv1alpha1.IPReservationSpec{
				Network: "small", IP: ip.String(), InterfaceName: "net1", ContainerID: "c", Node: "node-b",
				Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "other", UID: types2.UID("other-" + ip.String())},
			},
		}))
	}
	for i := range 20 {
		pod := testPod("web", types2.UID("pod-"+string(rune('a'+i))))
		_, err := a.allocateForPod(ctx, testRequest(t, cniproto.CmdAdd, smallConf, "c", pod), pod)
		if err == nil || !strings.Contains(err.Error(), "exhausted") {
			t.Fatalf("ADD %d on a full network: %v, want exhausted", i, err)
		}
	}
	if n := store.count("list"); n > 1 {
		t.Errorf("20 ADDs on an exhausted network listed it live %d times, want at most 1", n)
	}
	// A release invalidates the confirmation: the next ADD gets the address.
	victim := naming.Reservation("small", netip.MustParseAddr("10.9.0.4"))
	r, _ := store.get(victim)
	if err := store.Delete(ctx, victim, r.UID, r.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	a.onReservationDeleted(r)
	pod := testPod("web", "pod-after-release")
	ips, err := a.allocateForPod(ctx, testRequest(t, cniproto.CmdAdd, smallConf, "c", pod), pod)
	if err != nil || ips[0].Addr().String() != "10.9.0.4" {
		t.Fatalf("ADD after a release = %v, %v; want 10.9.0.4", ips, err)
	}
}

// Defect: a claim's recorded address must pass the same usability check
// as a new allocation.
func TestClaimAddressMustBeUsable(t *testing.T) {
	tests := []struct {
		name, status, rule string
	}{
		{"gateway", "10.0.0.1/24", "gateway"},
		{"broadcast", "10.0.0.255/24", "broadcast"},
		{"network address", "10.0.0.0/24", "network address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newFakeStore()
			claim := testClaim("claim-uid-" + types2.UID(strings.ReplaceAll(tt.name, " ", "-")))
			claim.Status.IPs = []string{tt.status, "fd00::5/120"}
			claims := newFakeClaims(claim)
			a := newTestAgent(t, store, claims)
			pod := testPod("virt-launcher-vm1-abcde", "pod-uid-4")
			_, err := a.allocateForClaim(context.Background(), testRequest(t, cniproto.CmdAdd, dualStackConf, "s", pod), pod, claim.Name)
			if err == nil {
				t.Fatalf("ADD handed out %s from the claim's status", tt.status)
			}
			addr := strings.Split(tt.status, "/")[0]
			if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), tt.rule) {
				t.Errorf("error %q does not name the address %s and the rule %q", err, addr, tt.rule)
			}
			got, _ := claims.Get(context.Background(), "vms", claim.Name)
			c := meta.FindStatusCondition(got.Status.Conditions, conditionIPsAllocated)
			if c == nil || c.Status != metav1.ConditionFalse {
				t.Errorf("IPsAllocated = %+v, want False", c)
			}
			if n := len(reservationsOwnedBy(store, claim.UID)); n != 0 {
				t.Errorf("%d reservations created for an unusable claim address", n)
			}
		})
	}
}

func cniCodeOf(err error) uint {
	var ce *types.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

// A claim's recorded addresses are never rewritten, only read: the
// node-bound policy refuses an agent that changes them, and "10.0.0.5/24"
// stays so after the subnet grew to a /23.
func TestClaimStatusAddressesAreKeptAsWritten(t *testing.T) {
	const grown = `{"cniVersion":"1.0.0","name":"blue","type":"bridge","allowPersistentIPs":true,"ipam":{"type":"ipkeeper","range":"10.0.0.0/23"}}`
	claim := testClaim("claim-uid-grown")
	claim.Status.IPs = []string{"10.0.0.5/24"}
	claims := newFakeClaims(claim)
	a := newTestAgent(t, newFakeStore(), claims)
	pod := testPod("virt-launcher-vm1-abcde", "pod-uid-5")
	ips, err := a.allocateForClaim(context.Background(), testRequest(t, cniproto.CmdAdd, grown, "s", pod), pod, claim.Name)
	if err != nil || formatIPs(ips) != "10.0.0.5/23" {
		t.Fatalf("ADD = %v, %v; want 10.0.0.5/23", ips, err)
	}
	got, _ := claims.Get(context.Background(), "vms", claim.Name)
	if len(got.Status.IPs) != 1 || got.Status.IPs[0] != "10.0.0.5/24" {
		t.Errorf("status.ips = %v, want it as written: [10.0.0.5/24]", got.Status.IPs)
	}
}

// A status write whose response was lost may have recorded the addresses
// this call created: they must stay reserved for the claim.
func TestLostClaimStatusResponseKeepsReservations(t *testing.T) {
	store := newFakeStore()
	claim := testClaim("claim-uid-lost")
	claims := newFakeClaims(claim)
	a := newTestAgent(t, store, claims)
	pod := testPod("virt-launcher-vm1-abcde", "pod-uid-6")
	claims.failAfterStatus = errors.New("http2: client connection lost")
	req := testRequest(t, cniproto.CmdAdd, dualStackConf, "s", pod)
	if _, err := a.allocateForClaim(context.Background(), req, pod, claim.Name); err == nil {
		t.Fatal("ADD succeeded although its status write's response was lost")
	}
	got, _ := claims.Get(context.Background(), "vms", claim.Name)
	if len(got.Status.IPs) != 2 {
		t.Fatalf("status.ips = %v, want the two addresses the lost write recorded", got.Status.IPs)
	}
	for _, s := range got.Status.IPs {
		ip, _ := parseClaimIP(s)
		if _, ok := store.get(naming.Reservation("blue", ip)); !ok {
			t.Errorf("%s is recorded in the claim but its reservation was released", s)
		}
	}
	ips, err := a.allocateForClaim(context.Background(), req, pod, claim.Name)
	if err != nil || !sameAddresses(got.Status.IPs, ips) {
		t.Fatalf("retried ADD = %v, %v; want the recorded %v", ips, err, got.Status.IPs)
	}
}

// A status write that failed without being applied, while the other node
// recorded its own addresses: what this call created and the claim does
// not record is released (not left to the claim unseen), the rest kept.
func TestFailedClaimStatusWriteDropsOnlyUnrecorded(t *testing.T) {
	store := newFakeStore()
	claim := testClaim("claim-uid-failed")
	claims := newFakeClaims(claim)
	a := newTestAgent(t, store, claims)
	pod := testPod("virt-launcher-vm1-abcde", "pod-uid-7")
	owner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "vms", Name: claim.Name, UID: claim.UID}
	var winner []string
	claims.beforeStatus = func(c *ipamclaimsv1alpha1.IPAMClaim) {
		// The other node recorded the same IPv4 (same seed) and its own IPv6.
		v4, _ := parseClaimIP(c.Status.IPs[0])
		w6 := store.put(&ipkeeperv1alpha1.IPReservation{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("blue", netip.MustParseAddr("fd00::77"))},
			Spec:       ipkeeperv1alpha1.IPReservationSpec{Network: "blue", IP: "fd00::77", Owner: owner, InterfaceName: "net1", Node: "node-b"},
		})
		winner = []string{v4.String() + "/24", w6.Spec.IP + "/120"}
		claims.setStatusIPs("vms", claim.Name, winner...)
	}
	claims.failStatus = errors.New("etcdserver: request timed out")
	if _, err := a.allocateForClaim(context.Background(), testRequest(t, cniproto.CmdAdd, dualStackConf, "s", pod), pod, claim.Name); err == nil {
		t.Fatal("ADD succeeded although its status write failed")
	}
	var held []string
	for _, r := range reservationsOwnedBy(store, claim.UID) {
		held = append(held, r.Spec.IP)
	}
	if len(held) != len(winner) {
		t.Fatalf("the claim holds %v, want exactly the recorded %v", held, winner)
	}
	for _, s := range winner {
		ip, _ := parseClaimIP(s)
		if _, ok := store.get(naming.Reservation("blue", ip)); !ok {
			t.Errorf("recorded %s lost its reservation", s)
		}
	}
}

// Found by the chaos checker (seed 2): two nodes make a claim's first
// allocation at once; the loser's IPv6 create is applied but its response
// lost, so its ADD fails without knowing it holds that address, and the
// winner records its own addresses. The loser's sandbox is then torn down:
// its DEL must release the claim reservation it made that the claim does
// not record (whether or not the informer shows it yet), or the claim
// holds an address nobody uses for as long as the VM runs. The loser's
// rollback must not release the IPv4 the winner adopted and recorded.
func TestDelReleasesUnrecordedClaimReservationOfItsSandbox(t *testing.T) {
	for _, tt := range []struct {
		name           string
		informerCaught bool // the informer delivered the lost create before the DEL
		claimReadFails bool // the DEL's read of the claim fails
		wantDelErr     bool
	}{
		{name: "informer caught up", informerCaught: true},
		{name: "informer lagging"},
		{name: "claim unreadable", informerCaught: true, claimReadFails: true, wantDelErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := newFakeStore()
			claim := testClaim("claim-uid-loser")
			claims := newFakeClaims(claim)
			a := newTestAgent(t, store, claims)
			pod := testPod("virt-launcher-vm1-loser", "pod-uid-8")
			owner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "vms", Name: claim.Name, UID: claim.UID}
			var winner []string
			var lostName string
			store.afterCreate = func(r *ipkeeperv1alpha1.IPReservation) error {
				if !netip.MustParseAddr(r.Spec.IP).Is6() {
					return nil
				}
				store.afterCreate = nil
				lostName = r.Name
				// Meanwhile the winner (node-b) adopted this IPv4 (same
				// seed) and recorded it with its own IPv6.
				w6 := store.put(&ipkeeperv1alpha1.IPReservation{
					ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("blue", netip.MustParseAddr("fd00::99"))},
					Spec:       ipkeeperv1alpha1.IPReservationSpec{Network: "blue", IP: "fd00::99", Owner: owner, InterfaceName: "net1", Node: "node-b", ContainerID: "winner"},
				})
				for _, x := range store.all() {
					if x.Spec.Owner.UID == claim.UID && netip.MustParseAddr(x.Spec.IP).Is4() {
						winner = append(winner, x.Spec.IP+"/24")
					}
				}
				winner = append(winner, w6.Spec.IP+"/120")
				claims.setStatusIPs("vms", claim.Name, winner...)
				return errors.New("http2: client connection lost")
			}
			req := testRequest(t, cniproto.CmdAdd, dualStackConf, "loser-sandbox", pod)
			if _, err := a.allocateForClaim(context.Background(), req, pod, claim.Name); err == nil {
				t.Fatal("ADD succeeded although its IPv6 create response was lost")
			}
			for _, s := range winner {
				ip, _ := parseClaimIP(s)
				if _, ok := store.get(naming.Reservation("blue", ip)); !ok {
					t.Fatalf("the failed ADD's rollback released %s, which the winner recorded", s)
				}
			}
			if tt.informerCaught {
				for _, r := range store.all() {
					if e, ok := entryOf(r); ok {
						a.idx.upsert(e)
					}
				}
			}
			if tt.claimReadFails {
				claims.failGet = errors.New("etcdserver: request timed out")
			}
			del := &cniproto.Request{Command: cniproto.CmdDel, ContainerID: "loser-sandbox", IfName: "net1", Config: []byte(dualStackConf),
				Args: "K8S_POD_NAMESPACE=vms;K8S_POD_NAME=" + pod.Name + ";K8S_POD_UID=" + string(pod.UID)}
			err := a.Del(context.Background(), del)
			if tt.wantDelErr {
				if c := cniCodeOf(err); c != types.ErrTryAgainLater {
					t.Fatalf("DEL with the claim unreadable = %v (code %d), want try again later", err, c)
				}
				if _, ok := store.get(lostName); !ok {
					t.Fatalf("DEL released %s without reading the claim", lostName)
				}
				return
			}
			if err != nil {
				t.Fatalf("DEL: %v", err)
			}
			var held []string
			for _, r := range reservationsOwnedBy(store, claim.UID) {
				held = append(held, r.Spec.IP)
			}
			if len(held) != len(winner) {
				t.Fatalf("after the loser's DEL the claim holds %v, want exactly the recorded %v", held, winner)
			}
			for _, s := range winner {
				ip, _ := parseClaimIP(s)
				if _, ok := store.get(naming.Reservation("blue", ip)); !ok {
					t.Errorf("recorded %s lost its reservation", s)
				}
			}
		})
	}
}

// A claim-backed DEL leaves alone a reservation of its sandbox that
// another node has taken over (spec.node): only that node may delete it.
func TestClaimDelLeavesOtherNodesReservation(t *testing.T) {
	store := newFakeStore()
	claim := testClaim("claim-uid-other")
	claims := newFakeClaims(claim)
	claims.setStatusIPs("vms", claim.Name, "10.0.0.5/24", "fd00::5/120")
	a := newTestAgent(t, store, claims)
	owner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "vms", Name: claim.Name, UID: claim.UID}
	r := store.put(&ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("blue", netip.MustParseAddr("10.0.0.9"))},
		Spec:       ipkeeperv1alpha1.IPReservationSpec{Network: "blue", IP: "10.0.0.9", Owner: owner, InterfaceName: "net1", Node: "node-b", ContainerID: "s1"},
	})
	e, _ := entryOf(r)
	a.idx.upsert(e)
	del := &cniproto.Request{Command: cniproto.CmdDel, ContainerID: "s1", IfName: "net1", Config: []byte(dualStackConf)}
	if err := a.Del(context.Background(), del); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if _, ok := store.get(r.Name); !ok {
		t.Fatalf("node-a's DEL deleted %s, which node-b has taken over", r.Name)
	}
}

// A claim's first allocation, once recorded, releases the claim's other
// reservations on the network: what failed earlier attempts left (here a
// second IPv4 the retry did not pick) holds addresses no pod will get.
func TestFirstClaimAllocationReleasesLeftovers(t *testing.T) {
	store := newFakeStore()
	claim := testClaim("claim-uid-left")
	claims := newFakeClaims(claim)
	a := newTestAgent(t, store, claims)
	owner := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "vms", Name: claim.Name, UID: claim.UID}
	for _, ip := range []string{"10.0.0.20", "10.0.0.21"} {
		r := store.put(&ipkeeperv1alpha1.IPReservation{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("blue", netip.MustParseAddr(ip))},
			Spec:       ipkeeperv1alpha1.IPReservationSpec{Network: "blue", IP: ip, Owner: owner, InterfaceName: "net1", Node: "node-a", ContainerID: "failed-" + ip},
		})
		e, _ := entryOf(r)
		a.idx.upsert(e)
	}
	pod := testPod("virt-launcher-vm1-left", "pod-uid-9")
	ips, err := a.allocateForClaim(context.Background(), testRequest(t, cniproto.CmdAdd, dualStackConf, "s", pod), pod, claim.Name)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	got, _ := claims.Get(context.Background(), "vms", claim.Name)
	var held []string
	for _, r := range reservationsOwnedBy(store, claim.UID) {
		held = append(held, r.Spec.IP+"/"+map[bool]string{true: "24", false: "120"}[netip.MustParseAddr(r.Spec.IP).Is4()])
	}
	if !sameAddresses(got.Status.IPs, ips) || len(held) != len(ips) {
		t.Fatalf("ADD returned %v, status records %v, the claim holds %v: want the recorded addresses and nothing else", ips, got.Status.IPs, held)
	}
}
