// SPDX-License-Identifier: Apache-2.0

package index

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	ipkscheme "github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// watchStream returns n watch events of reservations as the API server
// sends them: labels, managed fields and all.
func watchStream(tb testing.TB, n int) []byte {
	var buf bytes.Buffer
	for k := range n {
		r := &ipkeeperv1alpha1.IPReservation{
			TypeMeta: metav1.TypeMeta{APIVersion: "ipkeeper.io/v1alpha1", Kind: "IPReservation"},
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("net1-10-0-%d-%d", k>>8, k&255), UID: types.UID(fmt.Sprintf("0f6c1b2e-0000-4000-8000-%012d", k)),
				ResourceVersion: fmt.Sprint(1000 + k), Generation: 1, CreationTimestamp: metav1.Unix(1700000000, 0),
				Labels: map[string]string{"ipkeeper.io/network": "net1", "ipkeeper.io/owner-kind": "Pod"},
				ManagedFields: []metav1.ManagedFieldsEntry{{
					Manager: "ipkeeper-agent", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "ipkeeper.io/v1alpha1",
					Time: &metav1.Time{}, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:ipkeeper.io/network":{},"f:ipkeeper.io/owner-kind":{}}},"f:spec":{".":{},"f:containerID":{},"f:interfaceName":{},"f:ip":{},"f:network":{},"f:node":{},"f:owner":{".":{},"f:kind":{},"f:name":{},"f:namespace":{},"f:uid":{}},"f:pool":{}}}`)},
				}},
			},
			Spec: ipkeeperv1alpha1.IPReservationSpec{Network: "net1", Pool: "net1", IP: fmt.Sprintf("10.0.%d.%d", k>>8, k&255), InterfaceName: "net1",
				ContainerID: fmt.Sprintf("%064d", k), Node: "node-7",
				Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "tenant-a", Name: fmt.Sprintf("pod-%d", k), UID: types.UID(fmt.Sprintf("5d1e0000-0000-4000-8000-%012d", k))}},
		}
		raw, err := json.Marshal(r)
		if err != nil {
			tb.Fatal(err)
		}
		ev, err := json.Marshal(metav1.WatchEvent{Type: string(watch.Added), Object: runtime.RawExtension{Raw: raw}})
		if err != nil {
			tb.Fatal(err)
		}
		buf.Write(ev)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// clientGoDecoder is the decoder client-go's REST client puts under a watch
// of a JSON resource.
func clientGoDecoder(tb testing.TB, body io.ReadCloser) watch.Decoder {
	s, err := ipkscheme.New()
	if err != nil {
		tb.Fatal(err)
	}
	info, ok := runtime.SerializerInfoForMediaType(serializer.NewCodecFactory(s).WithoutConversion().SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		tb.Fatal("no JSON serializer")
	}
	ss := info.StreamSerializer
	return restclientwatch.NewDecoder(streaming.NewDecoder(ss.NewFrameReader(body), ss.Serializer), info.Serializer)
}

func BenchmarkWatchDecode(b *testing.B) {
	const n = 1000
	stream := watchStream(b, n)
	for _, c := range []struct {
		name string
		dec  func(io.ReadCloser) watch.Decoder
	}{
		{"client-go", func(r io.ReadCloser) watch.Decoder { return clientGoDecoder(b, r) }},
		{"lean", func(r io.ReadCloser) watch.Decoder { return newReservationEventDecoder(r) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d := c.dec(io.NopCloser(bytes.NewReader(stream)))
				for range n {
					if _, _, err := d.Decode(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/event")
		})
	}
}

// The lean decoder must give the index what client-go's decoder gives it,
// for every kind of event a reservation watch carries.
func TestReservationEventDecoder(t *testing.T) {
	var stream bytes.Buffer
	stream.Write(watchStream(t, 3))
	event := func(typ watch.EventType, obj any) {
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := json.Marshal(metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}})
		if err != nil {
			t.Fatal(err)
		}
		stream.Write(ev)
	}
	released := &ipkeeperv1alpha1.IPReservation{
		TypeMeta:   metav1.TypeMeta{APIVersion: "ipkeeper.io/v1alpha1", Kind: "IPReservation"},
		ObjectMeta: metav1.ObjectMeta{Name: "claimed", UID: "u-c", ResourceVersion: "77", CreationTimestamp: metav1.Unix(1700000100, 0)},
		Spec: ipkeeperv1alpha1.IPReservationSpec{Network: "net2", IP: "fd00::7", ReuseAfter: &metav1.Time{Time: metav1.Unix(1700000200, 0).Time},
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: "vms", Name: "vm1.net2", UID: "u-claim"}},
	}
	event(watch.Modified, released)
	event(watch.Deleted, released)
	event(watch.Bookmark, &ipkeeperv1alpha1.IPReservation{
		TypeMeta:   metav1.TypeMeta{APIVersion: "ipkeeper.io/v1alpha1", Kind: "IPReservation"},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: "99", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
	})
	event(watch.Error, &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
		Message: "too old resource version: 5 (80)", Reason: metav1.StatusReasonExpired, Code: 410})

	want := clientGoDecoder(t, io.NopCloser(bytes.NewReader(stream.Bytes())))
	got := newReservationEventDecoder(io.NopCloser(bytes.NewReader(stream.Bytes())))
	for k := 0; ; k++ {
		wt, wo, werr := want.Decode()
		gt, gobj, gerr := got.Decode()
		if errors.Is(werr, io.EOF) {
			if !errors.Is(gerr, io.EOF) {
				t.Fatalf("event %d: client-go's decoder is at the end, the lean one gave %s %v, %v", k, gt, gobj, gerr)
			}
			if k != 7 {
				t.Fatalf("decoded %d events, want 7", k)
			}
			break
		}
		if werr != nil || gerr != nil {
			t.Fatalf("event %d: errors: client-go %v, lean %v", k, werr, gerr)
		}
		if wt != gt {
			t.Fatalf("event %d: type %s, want %s", k, gt, wt)
		}
		switch w := wo.(type) {
		case *ipkeeperv1alpha1.IPReservation:
			g, ok := gobj.(*ipkeeperv1alpha1.IPReservation)
			if !ok {
				t.Fatalf("event %d: %T, want an IPReservation", k, gobj)
			}
			if g.ManagedFields != nil || g.Labels != nil {
				t.Errorf("event %d: the lean object keeps metadata the agent drops: %+v", k, g.ObjectMeta)
			}
			if g.Name != w.Name || g.UID != w.UID || g.ResourceVersion != w.ResourceVersion || !g.CreationTimestamp.Equal(&w.CreationTimestamp) ||
				g.Annotations[metav1.InitialEventsAnnotationKey] != w.Annotations[metav1.InitialEventsAnnotationKey] {
				t.Errorf("event %d: metadata %+v, want that of %+v", k, g.ObjectMeta, w.ObjectMeta)
			}
			if !apiequality.Semantic.DeepEqual(g.Spec, w.Spec) {
				t.Errorf("event %d: spec %+v, want %+v", k, g.Spec, w.Spec)
			}
			we, wok := EntryOf(w)
			ge, gok := EntryOf(g)
			if wok != gok || we != ge {
				t.Errorf("event %d: the index gets %+v (%v), want %+v (%v)", k, ge, gok, we, wok)
			}
		case *metav1.Status:
			g, ok := gobj.(*metav1.Status)
			if !ok {
				t.Fatalf("event %d: %T, want a Status", k, gobj)
			}
			if g.Code != w.Code || g.Reason != w.Reason || g.Message != w.Message || g.Status != w.Status {
				t.Errorf("event %d: status %+v, want %+v", k, g, w)
			}
		default:
			t.Fatalf("event %d: client-go decoded a %T", k, wo)
		}
	}

	// A stream cut in the middle of an event is an error, not an event.
	cut := newReservationEventDecoder(io.NopCloser(bytes.NewReader(stream.Bytes()[:40])))
	if typ, obj, err := cut.Decode(); err == nil {
		t.Errorf("a cut event decoded as %s %v", typ, obj)
	}
	odd := newReservationEventDecoder(io.NopCloser(bytes.NewReader([]byte(`{"type":"SURPRISE","object":{}}`))))
	if _, _, err := odd.Decode(); err == nil || !strings.Contains(err.Error(), "SURPRISE") {
		t.Errorf("an unknown event type: %v, want an error naming it", err)
	}
}
