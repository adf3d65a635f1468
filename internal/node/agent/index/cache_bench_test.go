// SPDX-License-Identifier: Apache-2.0

package index

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// A synthetic but realistically shaped population of reservations: 24
// networks (every sixth with a name that is not a DNS label, so its
// reservation names carry a hash), two thirds IPv4 and one third IPv6, one
// in five owned by an IPAMClaim, Kubernetes-length pod names, UIDs,
// container IDs and node names.
const benchReservations = 50_000

type benchSpec struct {
	name, network, ip                  string
	kind                               ipkeeperv1alpha1.OwnerKind
	namespace, owner, ownerUID, ifName string
	containerID, node, uid             string
}

func benchNetwork(n int) string {
	if n%6 == 5 {
		return fmt.Sprintf("Tenant %02d / SR-IOV data plane", n)
	}
	return fmt.Sprintf("tenant-%02d-storage-net", n)
}

func benchUID(kind byte, k int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", k*2654435761&0xffffffff, k&0xffff, kind, k&0xfff, k*40503)
}

func benchSpecOf(k int) benchSpec {
	const networks = 24
	n, j := k%networks, k/networks
	network := benchNetwork(n)
	var ip netip.Addr
	if k%3 == 2 {
		ip = netip.AddrFrom16([16]byte{0xfd, 0, byte(n), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(j >> 8), byte(j)})
	} else {
		ip = netip.AddrFrom4([4]byte{10, byte(n), byte((j + 1) >> 8), byte(j + 1)})
	}
	apps := []string{"checkout-api", "payments-worker", "search-indexer", "media-transcoder", "ledger"}
	s := benchSpec{
		name: naming.Reservation(network, ip), network: network, ip: ip.String(),
		kind:        ipkeeperv1alpha1.OwnerPod,
		namespace:   fmt.Sprintf("team-%02d-production", k%40),
		owner:       fmt.Sprintf("%s-%08x%02x-%05x", apps[k%len(apps)], k*7919&0xffffffff, k%256, k*31&0xfffff),
		ownerUID:    benchUID('p', k), // one attachment per pod-owned entry: the most byPod sets
		ifName:      "net1",
		containerID: fmt.Sprintf("%016x%016x%016x%016x", k, k*31, k*131, k*1031),
		node:        fmt.Sprintf("ip-10-0-%d-%d.eu-west-1.compute.internal", k%64, k%251),
		uid:         benchUID('r', k),
	}
	if k%5 == 0 {
		s.kind = ipkeeperv1alpha1.OwnerIPAMClaim
		s.owner = fmt.Sprintf("vm-%06d.net1", k)
		s.ownerUID = benchUID('c', k)
	}
	return s
}

// benchJSON is the object as the API server sends it for an agent-created
// reservation, managed fields included.
func benchJSON(s benchSpec) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"ipkeeper.io/v1alpha1","kind":"IPReservation","metadata":{`+
		`"creationTimestamp":"2026-01-02T03:04:05Z","generation":1,`+
		`"labels":{"ipkeeper.io/network":%q,"ipkeeper.io/owner-kind":%q},`+
		`"managedFields":[{"apiVersion":"ipkeeper.io/v1alpha1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:ipkeeper.io/network":{},"f:ipkeeper.io/owner-kind":{}}},"f:spec":{".":{},"f:containerID":{},"f:interfaceName":{},"f:ip":{},"f:network":{},"f:node":{},"f:owner":{".":{},"f:kind":{},"f:name":{},"f:namespace":{},"f:uid":{}}}},"manager":"ipkeeper-agent","operation":"Update","time":"2026-01-02T03:04:05Z"}],`+
		`"name":%q,"resourceVersion":"%d","uid":%q},`+
		`"spec":{"containerID":%q,"interfaceName":%q,"ip":%q,"network":%q,"node":%q,`+
		`"owner":{"kind":%q,"name":%q,"namespace":%q,"uid":%q}}}`,
		naming.NetworkLabelValue(s.network), s.kind, s.name, 1_000_000+len(s.name)*7919, s.uid,
		s.containerID, s.ifName, s.ip, s.network, s.node, s.kind, s.owner, s.namespace, s.ownerUID)
}

// benchObjects decodes n reservations as the reflector does.
func benchObjects(tb testing.TB, n int) []*ipkeeperv1alpha1.IPReservation {
	tb.Helper()
	out := make([]*ipkeeperv1alpha1.IPReservation, n)
	for k := range out {
		out[k] = benchObject(tb, k)
	}
	return out
}

func benchObject(tb testing.TB, k int) *ipkeeperv1alpha1.IPReservation {
	r := &ipkeeperv1alpha1.IPReservation{}
	if err := json.Unmarshal(benchJSON(benchSpecOf(k)), r); err != nil {
		tb.Fatal(err)
	}
	return r
}

// liveHeap returns how much live heap what build returns keeps, measured
// after full collections; the result is kept alive until measured.
func liveHeap(build func() any) (int64, any) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := build()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), v
}

// buildIndex feeds entries to an index as the reservation feed does.
func buildIndex(entries []Entry) *Cache {
	x := New("")
	for _, e := range entries {
		x.Watched(e)
	}
	return x
}

// BenchmarkIndex50k times building the agent's index of 50,000
// reservations and reports, per reservation, the live heap of:
//
//	index-B/res  the index of one node's agent, fed from decoded objects
//	             that are then dropped: all the agent keeps per reservation
//	             (the others are spread over 64 nodes, so most are another
//	             node's pod reservations, kept compact)
//	whole-B/res  the same with every reservation kept whole
//	obj-B/res    one decoded IPReservation, for comparison: what an
//	             informer would keep on top
//
// B/op and allocs/op (with -benchmem) are those of one 50,000-entry build.
func BenchmarkIndex50k(b *testing.B) {
	const n = benchReservations
	perRes := func(v int64) float64 { return float64(v) / n }

	fill := func(x *Cache) func() any {
		return func() any {
			for k := range n {
				e, ok := EntryOf(benchObject(b, k))
				if !ok {
					b.Fatalf("entryOf(%d) failed", k)
				}
				x.Watched(e)
			}
			return x
		}
	}
	idxBytes, idxAny := liveHeap(fill(New(benchSpecOf(0).node)))
	wholeBytes, wholeAny := liveHeap(fill(New("")))
	for _, x := range []*Cache{idxAny.(*Cache), wholeAny.(*Cache)} {
		if x.Len() != n {
			b.Fatalf("index holds %d reservations, want %d (names collide)", x.Len(), n)
		}
	}
	runtime.KeepAlive(idxAny)
	runtime.KeepAlive(wholeAny)

	objBytes, objsAny := liveHeap(func() any { return benchObjects(b, n) })
	objs := objsAny.([]*ipkeeperv1alpha1.IPReservation)
	entries := make([]Entry, 0, n)
	kinds := map[ipkeeperv1alpha1.OwnerKind]int{}
	v6 := 0
	for _, r := range objs {
		e, _ := EntryOf(r)
		entries = append(entries, e)
		kinds[e.Owner.Kind]++
		if e.IP.Is6() {
			v6++
		}
	}
	b.Logf("%d reservations: %d IPv6, %d pod-owned, %d claim-owned; names %q ... %q",
		n, v6, kinds[ipkeeperv1alpha1.OwnerPod], kinds[ipkeeperv1alpha1.OwnerIPAMClaim], objs[0].Name, objs[5].Name)

	for b.Loop() { // only the loop is timed
		buildIndex(entries)
	}

	b.ReportMetric(perRes(idxBytes), "index-B/res")
	b.ReportMetric(perRes(wholeBytes), "whole-B/res")
	b.ReportMetric(perRes(objBytes), "obj-B/res")
	runtime.KeepAlive(objs)
}
