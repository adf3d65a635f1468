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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	types2 "k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
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
	// The network's pool as resolvePool finds it: an inline network's as
	// ipkeeper-controller makes it from the NAD, a named pool with the
	// NAD's ranges.
	pool := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: req.cfg.PoolName()}}
	if req.cfg.Pool == "" {
		pool = inlinepool.Build(req.cfg, testNAD(req.cfg))
	}
	req.pool = &ipam.Pool{Name: pool.Name, Key: pool.LockKey(), Ranges: req.cfg.Ranges}
	return req
}

// testNAD names the NAD a test network's attachments come through.
func testNAD(cfg *ipamconfig.Config) types2.NamespacedName {
	return types2.NamespacedName{Namespace: "vms", Name: "nad-" + strings.ToLower(cfg.Name)}
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
	watched(a, oldVersion)
	if e, _ := a.reservations.Get(name); e.ContainerID != "sandbox-new" {
		t.Errorf("index went back to an older version: container ID %q, want sandbox-new", e.ContainerID)
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

// Defect: a new sandbox's takeover whose answer was lost may have landed;
// its ADD fails, and the DEL the runtime then sends for that sandbox must
// release the reservation, which the cache still shows as the old
// sandbox's (found by the chaos checker: the address stayed held by a
// dead sandbox until the pod was deleted).
func TestLostTakeoverIsReleasedByTheFailedSandboxsDel(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	ctx := context.Background()
	pod := testPod("web", "pod-uid-1")
	first, err := a.allocateForPod(ctx, testRequest(t, cniproto.CmdAdd, smallConf, "sandbox-old", pod), pod)
	if err != nil {
		t.Fatal(err)
	}
	name := naming.Reservation("small", first[0].Addr())
	store.afterUpdate = func(*ipkeeperv1alpha1.IPReservation) error { return errors.New("connection reset by peer") }
	if _, err := a.allocateForPod(ctx, testRequest(t, cniproto.CmdAdd, smallConf, "sandbox-new", pod), pod); err == nil {
		t.Fatal("ADD of the new sandbox succeeded with its takeover's answer lost")
	}
	store.afterUpdate = nil
	if r, _ := store.get(name); r.Spec.ContainerID != "sandbox-new" {
		t.Fatalf("the lost takeover did not land (container %s): the test proves nothing", r.Spec.ContainerID)
	}
	del := &cniproto.Request{Command: cniproto.CmdDel, ContainerID: "sandbox-new", IfName: "net1", Config: []byte(smallConf)}
	if err := a.Del(ctx, del); err != nil {
		t.Fatalf("DEL (the failed sandbox): %v", err)
	}
	if r, ok := store.get(name); ok {
		t.Fatalf("the failed sandbox's DEL left its reservation held (container %s)", r.Spec.ContainerID)
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
					Pool: "small", Network: "small", IP: ip.String(), InterfaceName: "net1", ContainerID: "sandbox-old", Node: "node-a",
					Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "web", UID: "pod-uid-1"},
				},
			})
			watched(a, stale) // the index knows only this version
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
		watched(a, store.put(&ipkeeperv1alpha1.IPReservation{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("small", ip)},
			Spec: ipkeeperv1alpha1.IPReservationSpec{
				Pool: "small", Network: "small", IP: ip.String(), InterfaceName: "net1", ContainerID: "c", Node: "node-b",
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
	watchedDeletion(a, r)
	pod := testPod("web", "pod-after-release")
	ips, err := a.allocateForPod(ctx, testRequest(t, cniproto.CmdAdd, smallConf, "c", pod), pod)
	if err != nil || ips[0].Addr().String() != "10.9.0.4" {
		t.Fatalf("ADD after a release = %v, %v; want 10.9.0.4", ips, err)
	}
}

func cniCodeOf(err error) uint {
	var ce *types.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}
