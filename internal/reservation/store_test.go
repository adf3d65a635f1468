// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// TestCreateThroughRESTReadsTheServerSetMetadata checks KubeStore.Create
// with REST set against an HTTP server answering as the API server does:
// the object is posted whole, the server-set metadata is read back, a
// name taken is ErrTaken, and an answer without uid is an error.
func TestCreateThroughRESTReadsTheServerSetMetadata(t *testing.T) {
	var answer func(w http.ResponseWriter, posted map[string]any)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/apis/ipkeeper.io/v1alpha1/ipreservations" {
			t.Errorf("got %s %s, want POST of ipreservations", req.Method, req.URL.Path)
		}
		body, _ := io.ReadAll(req.Body)
		posted := map[string]any{}
		if err := json.Unmarshal(body, &posted); err != nil {
			t.Errorf("posted body %q: %v", body, err)
		}
		w.Header().Set("Content-Type", "application/json")
		answer(w, posted)
	}))
	defer srv.Close()
	s := runtime.NewScheme()
	if err := ipkeeperv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	rc, err := rest.RESTClientFor(&rest.Config{Host: srv.URL, APIPath: "/apis", ContentConfig: rest.ContentConfig{
		GroupVersion: &ipkeeperv1alpha1.GroupVersion, ContentType: "application/json",
		NegotiatedSerializer: serializer.NewCodecFactory(s).WithoutConversion(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	store := KubeStore{REST: rc}
	newRes := func() *ipkeeperv1alpha1.IPReservation {
		return New(Params{Pool: "blue", Key: "blue", Network: "blue", IP: netip.MustParseAddr("10.0.0.7"), Interface: "net1",
			Owner: ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerPod, Namespace: "ns", Name: "p", UID: "pod-uid"}})
	}

	answer = func(w http.ResponseWriter, posted map[string]any) {
		if posted["apiVersion"] != "ipkeeper.io/v1alpha1" || posted["kind"] != "IPReservation" {
			t.Errorf("posted apiVersion %v kind %v", posted["apiVersion"], posted["kind"])
		}
		spec, _ := posted["spec"].(map[string]any)
		if spec["ip"] != "10.0.0.7" || spec["pool"] != "blue" {
			t.Errorf("posted spec %v", spec)
		}
		meta := posted["metadata"].(map[string]any)
		meta["uid"], meta["resourceVersion"], meta["generation"], meta["creationTimestamp"] = "res-uid", "42", 1, "2026-11-27T10:00:00Z"
		meta["managedFields"] = []any{map[string]any{"manager": "ipkeeper-agent", "operation": "Update"}}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(posted)
	}
	r := newRes()
	if err := store.Create(context.Background(), r); err != nil {
		t.Fatalf("create: %v", err)
	}
	if r.UID != "res-uid" || r.ResourceVersion != "42" || r.Generation != 1 || !r.CreationTimestamp.Equal(&metav1.Time{Time: mustTime(t, "2026-11-27T10:00:00Z")}) {
		t.Errorf("server-set metadata not read back: uid %q rv %q generation %d created %v", r.UID, r.ResourceVersion, r.Generation, r.CreationTimestamp)
	}
	if r.Spec.IP != "10.0.0.7" || r.Spec.Owner.UID != "pod-uid" {
		t.Errorf("the reservation as sent changed: %+v", r.Spec)
	}

	answer = func(w http.ResponseWriter, _ map[string]any) {
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"AlreadyExists","code":409,"message":"exists"}`)
	}
	if err := store.Create(context.Background(), newRes()); !errors.Is(err, ErrTaken) {
		t.Errorf("a name taken: got %v, want ErrTaken", err)
	}

	answer = func(w http.ResponseWriter, posted map[string]any) {
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(posted)
	}
	if err := store.Create(context.Background(), newRes()); err == nil || !strings.Contains(err.Error(), "no uid") {
		t.Errorf("an answer without uid: got %v, want an error saying so", err)
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}
