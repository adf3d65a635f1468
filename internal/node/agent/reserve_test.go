// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	types2 "k8s.io/apimachinery/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// TestReserve table-tests the one allocation path (a pod attachment's) on
// a fake store: the conflict loop, static addresses, adoption, and
// rollback of a partial dual-stack allocation.
func TestReserve(t *testing.T) {
	const dual = `{"cniVersion":"1.0.0","name":"blue","type":"bridge",` +
		`"ipam":{"type":"ipkeeper","ipRanges":[{"range":"10.0.0.0/29"},{"range":"fd00::/125"}]}}`
	pod := testPod("web", "pod-uid-r")
	podHolder := holder{owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "web", UID: pod.UID}, ifName: "net1"}
	// first is the address the seed picks first in a range with nothing taken.
	first := func(t *testing.T, h holder, subnet string) netip.Addr {
		t.Helper()
		req := testRequest(t, cniproto.CmdAdd, dual, "s", pod)
		for _, r := range req.cfg.Ranges {
			if r.Subnet().String() == subnet {
				ip, err := allocator.Candidate(r, nil, string(h.owner.UID)+"/net1")
				if err != nil {
					t.Fatal(err)
				}
				return ip
			}
		}
		t.Fatalf("no range %s", subnet)
		return netip.Addr{}
	}
	other := ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "other-ns", Name: "x", UID: "other-uid"}
	res := func(ip netip.Addr, o ipkeeperv1alpha1.ReservationOwner) *ipkeeperv1alpha1.IPReservation {
		return &ipkeeperv1alpha1.IPReservation{
			ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("blue", ip)},
			Spec:       ipkeeperv1alpha1.IPReservationSpec{Pool: "blue", Network: "blue", IP: ip.String(), Owner: o, InterfaceName: "net1", Node: "node-b"},
		}
	}
	fillV6 := func(s *fakeStore, a *Agent) {
		for i := 1; i <= 7; i++ {
			watched(a, s.put(res(netip.MustParseAddr("fd00::"+string(rune('0'+i))), other)))
		}
	}

	tests := []struct {
		name  string
		h     holder
		conf  string
		setup func(t *testing.T, s *fakeStore, a *Agent)
		// wantCode is the CNI code of the error; 0 means success.
		wantCode  uint
		wantErr   string
		wantHeld  int // reservations the holder owns afterwards
		wantNew   int // of them created by this call
		wantConfl float64
	}{
		{
			name: "both families free", h: podHolder, conf: dual,
			wantHeld: 2, wantNew: 2,
		},
		{
			name: "first candidate taken by another agent, index not yet aware", h: podHolder, conf: dual,
			setup: func(t *testing.T, s *fakeStore, _ *Agent) {
				s.put(res(first(t, podHolder, "10.0.0.0/29"), other))
			},
			wantHeld: 2, wantNew: 2, wantConfl: 1,
		},
		{
			name: "lost create response: the holder's own reservation is adopted", h: podHolder, conf: dual,
			setup: func(t *testing.T, s *fakeStore, _ *Agent) {
				s.put(res(first(t, podHolder, "10.0.0.0/29"), podHolder.owner))
			},
			wantHeld: 2, wantNew: 1,
		},
		{
			name: "same pod, other interface, is not adopted", h: podHolder, conf: dual,
			setup: func(t *testing.T, s *fakeStore, _ *Agent) {
				r := res(first(t, podHolder, "10.0.0.0/29"), podHolder.owner)
				r.Spec.InterfaceName = "net2"
				s.put(r)
			},
			wantHeld: 3, wantNew: 2, wantConfl: 1,
		},
		{
			name: "IPv6 exhausted: IPv4 rolled back", h: podHolder, conf: dual,
			setup:    func(_ *testing.T, s *fakeStore, a *Agent) { fillV6(s, a) },
			wantCode: types.ErrInternal, wantErr: "exhausted", wantHeld: 0,
		},
		{
			name: "IPv6 create fails: IPv4 rolled back", h: podHolder, conf: dual,
			setup: func(_ *testing.T, s *fakeStore, _ *Agent) {
				s.beforeCreate = func(r *ipkeeperv1alpha1.IPReservation) error {
					if strings.Contains(r.Spec.IP, ":") {
						return errors.New("etcdserver: request timed out")
					}
					return nil
				}
			},
			wantCode: types.ErrTryAgainLater, wantErr: "request timed out", wantHeld: 0,
		},
		{
			name: "rollback delete fails: the error is the allocation's", h: podHolder, conf: dual,
			setup: func(_ *testing.T, s *fakeStore, a *Agent) {
				fillV6(s, a)
				s.beforeDelete = func(string) error { return errors.New("connection refused") }
			},
			wantCode: types.ErrInternal, wantErr: "exhausted", wantHeld: 1, wantNew: 1, // kept: the retried ADD reuses it
		},
		{
			name: "static address taken by another namespace", h: podHolder,
			conf: `{"cniVersion":"1.0.0","name":"blue","type":"bridge","runtimeConfig":{"ips":["10.0.0.3/29"]},"ipam":{"type":"ipkeeper","range":"10.0.0.0/29"}}`,
			setup: func(_ *testing.T, s *fakeStore, _ *Agent) {
				s.put(res(netip.MustParseAddr("10.0.0.3"), other))
			},
			wantCode: types.ErrInternal, wantErr: "already reserved by a workload in another namespace", wantHeld: 0,
		},
		{
			name: "static address outside the range is a configuration error", h: podHolder,
			conf:     `{"cniVersion":"1.0.0","name":"blue","type":"bridge","runtimeConfig":{"ips":["10.0.0.7/29"]},"ipam":{"type":"ipkeeper","range":"10.0.0.0/29"}}`,
			wantCode: types.ErrInvalidNetworkConfig, wantErr: "broadcast", wantHeld: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newFakeStore()
			a := newTestAgent(t, store, newFakeClaims())
			if tt.setup != nil {
				tt.setup(t, store, a)
			}
			before := map[types2.UID]bool{}
			for _, r := range reservationsOwnedBy(store, tt.h.owner.UID) {
				before[r.UID] = true
			}
			req := testRequest(t, cniproto.CmdAdd, tt.conf, "s", pod)
			ips, err := a.reserve(context.Background(), req, tt.h, nil)
			if got := cniCodeOf(err); got != tt.wantCode {
				t.Fatalf("reserve() error = %v (code %d), want code %d", err, got, tt.wantCode)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %q lacks %q", err, tt.wantErr)
				}
				if ips != nil {
					t.Errorf("a failed reserve returned %v", ips)
				}
			} else if len(ips) != len(req.cfg.Ranges) {
				t.Errorf("reserve() = %v, want one address per range", ips)
			}
			held := reservationsOwnedBy(store, tt.h.owner.UID)
			if got := len(held); got != tt.wantHeld {
				t.Errorf("holder owns %d reservations, want %d", got, tt.wantHeld)
			}
			created := 0
			for _, r := range held {
				if !before[r.UID] {
					created++
				}
			}
			if created != tt.wantNew {
				t.Errorf("created = %d, want %d", created, tt.wantNew)
			}
			if got := counterValue(t, a.metrics.conflicts); got != tt.wantConfl {
				t.Errorf("conflicts counted = %v, want %v", got, tt.wantConfl)
			}
			checkIndex(t, a.reservations)
		})
	}
}

// TestReleaseOne table-tests a release at an exact version.
func TestReleaseOne(t *testing.T) {
	ip := netip.MustParseAddr("10.9.0.3")
	name := naming.Reservation("small", ip)
	base := &ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Pool: "small", Network: "small", IP: ip.String(), InterfaceName: "net1", ContainerID: "s1", Node: "node-a",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "web", UID: "pod-1"},
		},
	}
	sandboxS1 := func(r *ipkeeperv1alpha1.IPReservation) bool { return r.Spec.ContainerID == "s1" }
	tests := []struct {
		name       string
		change     func(s *fakeStore)
		wantGone   bool
		wantErr    string
		wantInIdx  bool
		wantNewUID bool
	}{
		{name: "unchanged: deleted", wantGone: true},
		{name: "already gone: success", change: func(s *fakeStore) { delete(s.objs, name) }, wantGone: true},
		{name: "changed, still matches: deleted at the new version", change: func(s *fakeStore) {
			s.modify(name, func(r *ipkeeperv1alpha1.IPReservation) { r.Spec.Node = "node-a" })
		}, wantGone: true},
		{name: "changed, no longer matches: kept and indexed as is", change: func(s *fakeStore) {
			s.modify(name, func(r *ipkeeperv1alpha1.IPReservation) { r.Spec.ContainerID = "s2" })
		}, wantInIdx: true},
		{name: "replaced by another object of the name: kept", change: func(s *fakeStore) {
			delete(s.objs, name)
			c := base.DeepCopy()
			c.UID = "someone-else"
			s.put(c)
		}, wantInIdx: true, wantNewUID: true},
		{name: "API error: reported", change: func(s *fakeStore) {
			s.beforeDelete = func(string) error { return errors.New("connection refused") }
		}, wantErr: "connection refused", wantInIdx: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newFakeStore()
			a := newTestAgent(t, store, newFakeClaims())
			stored := store.put(base)
			e, _ := index.EntryOf(stored)
			a.reservations.Watched(e)
			if tt.change != nil {
				tt.change(store)
			}
			err := a.releaseOne(context.Background(), e, "DEL", sandboxS1, true)
			if (err != nil) != (tt.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("releaseOne() = %v, want error %q", err, tt.wantErr)
			}
			cur, ok := store.get(name)
			if gone := !ok || cur.UID != stored.UID; gone != tt.wantGone && !tt.wantNewUID {
				t.Errorf("deleted = %v, want %v", gone, tt.wantGone)
			}
			got, inIdx := a.reservations.Get(name)
			if inIdx != tt.wantInIdx {
				t.Errorf("in index = %v, want %v", inIdx, tt.wantInIdx)
			}
			if tt.wantNewUID && got.UID != "someone-else" {
				t.Errorf("index holds uid %s, want the new object's", got.UID)
			}
			checkIndex(t, a.reservations)
		})
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// A CNI GC must not release what the runtime's list may predate: a
// reservation this agent wrote a moment ago, or a version taken over by a
// new sandbox after the GC judged the old one.
func TestGCSparesRecentAndTakenOverReservations(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	ctx := context.Background()
	pod := testPod("web", "pod-uid-gc")
	ips, err := a.allocateForPod(ctx, testRequest(t, cniproto.CmdAdd, smallConf, "sandbox-new", pod), pod)
	if err != nil {
		t.Fatal(err)
	}
	gc := strings.TrimSuffix(smallConf, "}") + `,"cni.dev/valid-attachments":[]}`
	if err := a.GC(ctx, &cniproto.Request{Command: cniproto.CmdGC, Config: []byte(gc)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.get(naming.Reservation("small", ips[0].Addr())); !ok {
		t.Fatal("GC released a reservation this agent wrote a moment ago (an ADD that finished after the runtime built its list)")
	}

	// An old reservation (seen only through the informer) whose GC
	// decision is overtaken by a takeover: the judged version must be the
	// one deleted, or none.
	ip := netip.MustParseAddr("10.9.0.6")
	if ip == ips[0].Addr() {
		ip = netip.MustParseAddr("10.9.0.5")
	}
	name := naming.Reservation("small", ip)
	old := store.put(&ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Pool: "small", Network: "small", IP: ip.String(), InterfaceName: "net1", ContainerID: "gone", Node: "node-a",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "db", UID: "pod-uid-db"},
		},
	})
	watched(a, old)
	e, _ := a.reservations.Get(name)
	newer := store.modify(name, func(r *ipkeeperv1alpha1.IPReservation) { r.Spec.ContainerID = "new" })
	watched(a, newer)                                                   // the takeover, seen before GC takes the lock
	stale := func(*ipkeeperv1alpha1.IPReservation) bool { return true } // the runtime's list names neither
	if err := a.releaseAttachment(ctx, e, "GC", stale, true); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.get(name); !ok {
		t.Fatal("GC deleted a version newer than the one it judged")
	}
}

// A CNI GC judges a reservation's age from the object, not from the
// agent's memory: after a restart between the runtime's list of valid
// attachments and its GC call, what the agent wrote (or took over for a
// new sandbox) moments before is spared.
func TestGCAfterARestartSparesWhatWasWrittenMomentsBefore(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	ctx := context.Background()
	pod := testPod("web", "pod-uid-gc")
	created, err := a.allocateForPod(ctx, testRequest(t, cniproto.CmdAdd, smallConf, "sandbox-1", pod), pod)
	if err != nil {
		t.Fatal(err)
	}
	// An old reservation of another pod, taken over by its new sandbox.
	ip := netip.MustParseAddr("10.9.0.6")
	if ip == created[0].Addr() {
		ip = netip.MustParseAddr("10.9.0.5")
	}
	old := store.put(&ipkeeperv1alpha1.IPReservation{
		ObjectMeta: metav1.ObjectMeta{Name: naming.Reservation("small", ip), CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))},
		Spec: ipkeeperv1alpha1.IPReservationSpec{
			Pool: "small", Network: "small", IP: ip.String(), InterfaceName: "net1", ContainerID: "sandbox-old", Node: "node-a",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "vms", Name: "db", UID: "pod-uid-db"},
		},
	})
	watched(a, old)
	db := testPod("db", "pod-uid-db")
	if _, err := a.allocateForPod(ctx, testRequest(t, cniproto.CmdAdd, smallConf, "sandbox-new", db), db); err != nil {
		t.Fatal(err)
	}

	restarted := newTestAgent(t, store, newFakeClaims())
	for _, r := range store.all() {
		watched(restarted, r)
	}
	gc := strings.TrimSuffix(smallConf, "}") + `,"cni.dev/valid-attachments":[]}`
	if err := restarted.GC(ctx, &cniproto.Request{Command: cniproto.CmdGC, Config: []byte(gc)}); err != nil {
		t.Fatal(err)
	}
	for _, ip := range []netip.Addr{created[0].Addr(), ip} {
		if _, ok := store.get(naming.Reservation("small", ip)); !ok {
			t.Errorf("a GC after a restart released %s, written moments before", ip)
		}
	}
}
