// SPDX-License-Identifier: Apache-2.0

package inlinepool

import (
	"context"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

func nadOf(ns, name, conf string) *nadv1.NetworkAttachmentDefinition {
	return &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: conf},
	}
}

// events drains what the recorder holds: the reconciler records
// synchronously, so everything it recorded is there when Reconcile returns.
func events(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// The controller makes an inline network's pool from its NAD, unless a
// rule refuses the network, and tells why on the NAD.
func TestReconcile(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	const (
		blue      = `{"cniVersion":"1.0.0","name":"blue","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`
		blueOther = `{"cniVersion":"1.0.0","name":"blue","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.0.9.0/24"}}`
		red       = `{"cniVersion":"1.0.0","name":"red","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.0.0.128/25"}}`
		shared    = `{"cniVersion":"1.0.0","name":"green","type":"macvlan","ipam":{"type":"ipkeeper","pool":"shared"}}`
		invalid   = `{"cniVersion":"1.0.0","name":"blue","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.0.0.0/33"}}`
		foreign   = `{"cniVersion":"1.0.0","name":"blue","type":"macvlan","ipam":{"type":"whereabouts","range":"10.0.0.0/24"}}`
		// Without cniVersion no runtime can attach the network.
		noVersion     = `{"name":"blue","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}`
		noListVersion = `{"name":"blue","plugins":[{"type":"macvlan","ipam":{"type":"ipkeeper","range":"10.0.0.0/24"}}]}`
	)
	// redPool is network red's pool, made from a NAD of another tenant.
	redPool := func() *ipkeeperv1alpha1.IPPool {
		p := Build(parse(t, red), types.NamespacedName{Namespace: "tenant-b", Name: "red"})
		p.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
		return p
	}
	bluePool := func() *ipkeeperv1alpha1.IPPool {
		return Build(parse(t, blue), types.NamespacedName{Namespace: "tenant-a", Name: "first"})
	}
	for _, tt := range []struct {
		name   string
		nad    string
		cached []client.Object // pools the cache shows
		live   []client.Object // pools the API server has
		// made is whether the reconcile creates IPPool blue.
		made bool
		// event is the reason and parts of the message of the one Event
		// recorded; "" for none.
		event    EventReason
		eventHas []string
		eventNot []string
	}{
		{name: "makes the pool", nad: blue, made: true, event: ReasonPoolCreated, eventHas: []string{"Normal", "made IPPool blue", `network "blue"`}},
		{name: "an older overlapping network refuses", nad: blue, live: []client.Object{redPool()}, event: ReasonNetworksOverlap,
			eventHas: []string{"Warning", `IPPool "red"`, "another namespace", "NAD tenant-a/second"}, eventNot: []string{"tenant-b"}},
		{name: "a pool only the API server shows yet is judged, not made", nad: blue, live: []client.Object{bluePool()}},
		{name: "a disagreeing NAD is told", nad: blueOther, cached: []client.Object{bluePool()}, event: ReasonDisagrees,
			eventHas: []string{"Warning", "created from NAD tenant-a/first", "10.0.9.0/24"}},
		{name: "an agreeing NAD is not", nad: blue, cached: []client.Object{bluePool()}},
		{name: "a missing named pool", nad: shared, event: ReasonPoolNotFound, eventHas: []string{"Warning", `IPPool "shared" does not exist`}},
		{name: "an invalid configuration", nad: invalid, event: ReasonInvalidConfig, eventHas: []string{"Warning", "ipam.range"}},
		{name: "another IPAM's network", nad: foreign},
		{name: "no cniVersion", nad: noVersion, event: ReasonInvalidConfig, eventHas: []string{"Warning", "spec.config.cniVersion", "no IPPool"}},
		{name: "no cniVersion in a plugin list", nad: noListVersion, event: ReasonInvalidConfig, eventHas: []string{"Warning", "spec.config.cniVersion", "no IPPool"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nad := nadOf("tenant-a", "second", tt.nad)
			cached := fake.NewClientBuilder().WithScheme(s).WithObjects(append([]client.Object{nad}, tt.cached...)...).Build()
			live := fake.NewClientBuilder().WithScheme(s).WithObjects(append(append([]client.Object{nad.DeepCopy()}, tt.cached...), tt.live...)...).Build()
			rec := record.NewFakeRecorder(10)
			r := &Reconciler{Client: cached, APIReader: live, Recorder: rec}
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nad)}); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			var pool ipkeeperv1alpha1.IPPool
			err := cached.Get(context.Background(), client.ObjectKey{Name: "blue"}, &pool)
			switch {
			case tt.made && err != nil:
				t.Errorf("pool blue not made: %v", err)
			case tt.made && pool.Annotations[ipkeeperv1alpha1.DefinedByAnnotation] != "NAD tenant-a/second":
				t.Errorf("pool blue made with annotations %v, want it defined by NAD tenant-a/second", pool.Annotations)
			case !tt.made && err == nil && len(tt.cached) == 0:
				t.Errorf("pool blue made: %+v", pool)
			case err != nil && !apierrors.IsNotFound(err):
				t.Fatal(err)
			}
			got := events(rec)
			if tt.event == "" {
				if len(got) != 0 {
					t.Errorf("events %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], " "+string(tt.event)+" ") {
				t.Fatalf("events %q, want one %s", got, tt.event)
			}
			for _, w := range tt.eventHas {
				if !strings.Contains(got[0], w) {
					t.Errorf("event %q lacks %q", got[0], w)
				}
			}
			for _, n := range tt.eventNot {
				if strings.Contains(got[0], n) {
					t.Errorf("event %q names %q", got[0], n)
				}
			}
		})
	}
}

// A NAD's ipam keys ipkeeper does not know are told on the NAD, with the
// key each is closest to: a Normal UnknownKeys event when ignoring them
// changes nothing the network hands out (its pool is made), and a Warning
// InvalidConfiguration with no pool when the key is a misspelling of one
// that keeps addresses from being handed out (gatway: the gateway would
// be handed out).
func TestUnknownKeysAreTold(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, nad string
		made      bool
		want      [][]string // each event's parts, in order
	}{
		{name: "a misspelt key that guards nothing",
			nad:  `{"cniVersion":"1.0.0","name":"blue","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.0.0.0/24","sticky_mca":true,"subnet":"x"}}`,
			made: true,
			want: [][]string{
				{"Normal", " UnknownKeys ", `ipam.sticky_mca (did you mean "sticky_mac"?)`, "ipam.subnet", "ignores"},
				{"Normal", " IPPoolCreated "},
			}},
		{name: "a misspelt gateway",
			nad: `{"cniVersion":"1.0.0","name":"blue","type":"macvlan","ipam":{"type":"ipkeeper","range":"10.90.3.0/24","gatway":"10.90.3.1"}}`,
			want: [][]string{
				{"Warning", " InvalidConfiguration ", `ipam.gatway: unknown key; did you mean "gateway"?`, "CNI error 7"},
			}},
		{name: "a misspelt gateway next to a named pool",
			nad: `{"cniVersion":"1.0.0","name":"green","type":"macvlan","ipam":{"type":"ipkeeper","pool":"shared","gatway":"10.90.3.1"}}`,
			want: [][]string{
				{"Warning", " InvalidConfiguration ", `did you mean "gateway"?`},
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nad := nadOf("tenant-a", "second", tt.nad)
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(nad).Build()
			rec := record.NewFakeRecorder(10)
			r := &Reconciler{Client: c, APIReader: c, Recorder: rec}
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nad)}); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			var pool ipkeeperv1alpha1.IPPool
			if err := c.Get(context.Background(), client.ObjectKey{Name: "blue"}, &pool); (err == nil) != tt.made {
				t.Errorf("pool blue made: %v, want %v (%v)", err == nil, tt.made, err)
			}
			got := events(rec)
			if len(got) != len(tt.want) {
				t.Fatalf("events %q, want %d", got, len(tt.want))
			}
			for i, parts := range tt.want {
				for _, w := range parts {
					if !strings.Contains(got[i], w) {
						t.Errorf("event %q lacks %q", got[i], w)
					}
				}
			}
		})
	}
}
