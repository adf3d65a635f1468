// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// crdCase is an object the API server must take and one it must refuse,
// with the words ("|"-separated) the refusal must contain: the field first.
type crdCase struct {
	name      string
	valid     client.Object
	invalid   client.Object
	wantField string
}

// TestCRDsAcceptValidAndRejectInvalid checks every CRD ipkeeper ships is
// installed, takes a valid object and refuses an invalid one
// with an error that names the offending field.
func TestCRDsAcceptValidAndRejectInvalid(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "crds")

	tests := []crdCase{
		{
			name:  "IPReservation IPv4",
			valid: newReservation("crd-test", "10.10.0.5"),
			invalid: func() client.Object {
				r := newReservation("crd-test", "10.10.0.6")
				r.Spec.IP = "10.10.0.6/24"
				return r
			}(),
			wantField: "spec.ip",
		},
		{
			name:  "IPReservation IPv6",
			valid: newReservation("crd-test", "fd00:10::5"),
			invalid: func() client.Object {
				r := newReservation("crd-test", "fd00:10::6")
				r.Spec.IP = "fd00:10:0:0::6" // not canonical
				return r
			}(),
			wantField: "spec.ip",
		},
		{
			name:  "IPReservation owner kind",
			valid: newReservation("crd-test", "10.10.0.7"),
			invalid: func() client.Object {
				r := newReservation("crd-test", "10.10.0.8")
				r.Spec.Owner.Kind = "Node"
				return r
			}(),
			wantField: "spec.owner.kind",
		},
		{
			name:  "IPReservation pod owner needs interface",
			valid: newReservation("crd-test", "10.10.0.9"),
			invalid: func() client.Object {
				r := newReservation("crd-test", "10.10.0.10")
				r.Spec.InterfaceName = ""
				return r
			}(),
			wantField: "spec",
		},
		{
			name: "IPAMClaim",
			valid: &ipamclaimsv1alpha1.IPAMClaim{
				ObjectMeta: metav1.ObjectMeta{Name: "vm1.blue", Namespace: ns},
				Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue", Interface: "pod16477688c0e"},
			},
			invalid: &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
				"metadata": map[string]any{"name": "vm1.red", "namespace": ns},
				"spec":     map[string]any{"interface": "net1"}, // network is required
			}},
			wantField: "spec.network",
		},
		{
			name: "NetworkAttachmentDefinition",
			valid: &nadv1.NetworkAttachmentDefinition{
				ObjectMeta: metav1.ObjectMeta{Name: "blue", Namespace: ns},
				Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"1.0.0","name":"blue","type":"bridge"}`},
			},
			invalid: &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
				"metadata": map[string]any{"name": "red", "namespace": ns},
				"spec":     map[string]any{"config": int64(42)},
			}},
			wantField: "spec.config",
		},
	}
	// An IPBlock larger than any a pool's geometry cuts (a compromised
	// node's block covering a whole pool) is refused.
	block := func(name, cidr string) client.Object {
		return &ipkeeperv1alpha1.IPBlock{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: ipkeeperv1alpha1.IPBlockSpec{Pool: "crd-test", CIDR: cidr, Node: "node-1"}}
	}
	tests = append(tests,
		crdCase{"IPBlock IPv4 size", block("crd-block-4-ok", "10.77.0.32/27"), block("crd-block-4", "10.77.0.0/16"), "spec.cidr|at most 32 IPv4"},
		crdCase{"IPBlock IPv6 size", block("crd-block-6-ok", "fd00:77::100/120"), block("crd-block-6", "fd00:77::/64"), "spec.cidr|256 IPv6"})
	// IPPools: every field is checked at admission, with a message naming
	// it, so that a pool no reader can use is never stored.
	pool := func(name string, rng map[string]any, spec map[string]any) client.Object {
		r := map[string]any{"range": "10.77.0.0/24"}
		for k, v := range rng {
			r[k] = v
		}
		sp := map[string]any{"ranges": []any{r}}
		for k, v := range spec {
			sp[k] = v
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "ipkeeper.io/v1alpha1", "kind": "IPPool",
			"metadata": map[string]any{"name": name}, "spec": sp,
		}}
	}
	for _, pc := range []struct {
		name          string
		rng, spec     map[string]any
		field, phrase string
	}{
		{"reuseCooldown", nil, map[string]any{"reuseCooldown": "30 seconds"}, "spec.reuseCooldown", "duration"},
		{"reuseCooldown negative", nil, map[string]any{"reuseCooldown": "-5m"}, "spec.reuseCooldown", "duration"},
		{"range prefix", map[string]any{"range": "10.77.0.0/33"}, nil, "spec.ranges[0].range", "CIDR"},
		{"range not an address", map[string]any{"range": "ten.0.0.0/24"}, nil, "spec.ranges[0].range", "CIDR"},
		{"range_start outside", map[string]any{"range_start": "10.78.0.10"}, nil, "spec.ranges[0]", "range_start"},
		{"range_end not an address", map[string]any{"range_end": "10.77.0.300"}, nil, "spec.ranges[0].range_end", "IP address"},
		{"gateway outside", map[string]any{"gateway": "192.168.0.1"}, nil, "spec.ranges[0]", "gateway"},
		{"exclude", map[string]any{"exclude": []any{"10.77.0.0/40"}}, nil, "spec.ranges[0].exclude", "CIDR"},
	} {
		name := "crd-pool-" + strings.ReplaceAll(strings.ReplaceAll(strings.ToLower(pc.name), " ", "-"), "_", "-")
		tests = append(tests, crdCase{
			name:      "IPPool " + pc.name,
			valid:     pool(name+"-ok", map[string]any{"range_start": "10.77.0.10", "gateway": "10.77.0.1", "exclude": []any{"10.77.0.128/25"}}, map[string]any{"reuseCooldown": "1m30s"}),
			invalid:   pool(name, pc.rng, pc.spec),
			wantField: pc.field + "|" + pc.phrase,
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := cp.Client.Create(ctx, tt.valid); err != nil {
				t.Fatalf("valid object refused: %v", err)
			}
			t.Cleanup(func() { _ = cp.Client.Delete(ctx, tt.valid) })
			err := cp.Client.Create(ctx, tt.invalid)
			if err == nil {
				_ = cp.Client.Delete(ctx, tt.invalid)
				t.Fatalf("invalid object accepted")
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, want := range strings.Split(tt.wantField, "|") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestIPReservationSpecIsImmutable: a reservation is released by deleting it,
// never by rewriting its owner or address (that would hand an address over
// silently).
func TestIPReservationSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	r := newReservation("immutable-test", "10.20.0.1")
	if err := cp.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, r) })
	r.Spec.Owner.Name = "someone-else"
	err := cp.Client.Update(ctx, r)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "owner is immutable") {
		t.Fatalf("owner change: want Invalid error mentioning immutability, got %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
		t.Fatal(err)
	}
	r.Spec.IP = "10.20.0.2"
	if err := cp.Client.Update(ctx, r); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ip is immutable") {
		t.Fatalf("ip change: want Invalid error, got %v", err)
	}
	// A pod's new sandbox takes over the attachment: container ID and node may change.
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
		t.Fatal(err)
	}
	r.Spec.ContainerID, r.Spec.Node = "new-sandbox", "node-2"
	if err := cp.Client.Update(ctx, r); err != nil {
		t.Fatalf("container ID change refused: %v", err)
	}
}

// TestPrinterColumns asks the API server for the table kubectl prints and
// checks the columns operators rely on.
func TestPrinterColumns(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "columns")
	r := newReservation("columns-test", "10.30.0.1")
	if err := cp.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, r) })
	claim := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1.blue", Namespace: ns},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue", Interface: "podabc"},
	}
	if err := cp.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	claim.Status = ipamclaimsv1alpha1.IPAMClaimStatus{
		IPs:      []string{"10.30.0.2/24"},
		OwnerPod: &ipamclaimsv1alpha1.OwnerPod{Name: "virt-launcher-vm1-abcde"},
		Conditions: []metav1.Condition{{
			Type: "IPsAllocated", Status: metav1.ConditionTrue, Reason: "SuccessfulAllocation",
			Message: "allocated", LastTransitionTime: metav1.Now(),
		}},
	}
	if err := cp.Client.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}

	// A released address cooling down reads so, next to a held one.
	cooling := newReservation("columns-test", "10.30.0.3")
	reuseAfter := metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
	cooling.Spec.ReuseAfter = &reuseAfter
	if err := cp.Client.Create(ctx, cooling); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, cooling) })
	// An invalid pool says it is not Ready without -o wide: its counts
	// alone (0 0 0) look like an empty pool.
	pool := &ipkeeperv1alpha1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "columns-test"},
		Spec: ipkeeperv1alpha1.IPPoolSpec{Ranges: []ipkeeperv1alpha1.PoolRange{{Range: "10.30.1.0/24"}}}}
	if err := cp.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, pool) })
	pool.Status.Conditions = []metav1.Condition{{Type: ipkeeperv1alpha1.PoolReady, Status: metav1.ConditionFalse, Reason: "Invalid",
		Message: "invalid", LastTransitionTime: metav1.Now()}}
	if err := cp.Client.Status().Update(ctx, pool); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		path        string
		wantColumns []string
		wantCells   []string
	}{
		{
			path:        "/apis/ipkeeper.io/v1alpha1/ipreservations/" + r.Name,
			wantColumns: []string{"Name", "Pool", "Network", "IP", "Owner-Kind", "Owner", "Node", "Reuse-After", "Age"},
			wantCells:   []string{"columns-test", "10.30.0.1", "Pod", "pod-a", "node-1", "null"},
		},
		{
			path:        "/apis/ipkeeper.io/v1alpha1/ipreservations/" + cooling.Name,
			wantColumns: []string{"Name", "Pool", "Network", "IP", "Owner-Kind", "Owner", "Node", "Reuse-After", "Age"},
			wantCells:   []string{"10.30.0.3", reuseAfter.UTC().Format(time.RFC3339)},
		},
		{
			path:        "/apis/ipkeeper.io/v1alpha1/ippools/" + pool.Name,
			wantColumns: []string{"Name", "Size", "Used", "Free", "Ready", "Age"},
			wantCells:   []string{`"False"`},
		},
		{
			path:        "/apis/k8s.cni.cncf.io/v1alpha1/namespaces/" + ns + "/ipamclaims/vm1.blue",
			wantColumns: []string{"Name", "Network", "Interface", "IPs", "Owner-Pod", "Ready", "Age"},
			wantCells:   []string{"blue", "podabc", "10.30.0.2/24", "virt-launcher-vm1-abcde", "True"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			raw, err := cp.Clientset.CoreV1().RESTClient().Get().AbsPath(tt.path).
				SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var table metav1.Table
			if err := json.Unmarshal(raw, &table); err != nil {
				t.Fatalf("decoding table: %v", err)
			}
			var cols []string
			for _, c := range table.ColumnDefinitions {
				if c.Priority == 0 {
					cols = append(cols, c.Name)
				}
			}
			if strings.Join(cols, ",") != strings.Join(tt.wantColumns, ",") {
				t.Errorf("columns = %v, want %v", cols, tt.wantColumns)
			}
			if len(table.Rows) != 1 {
				t.Fatalf("want 1 row, got %d", len(table.Rows))
			}
			row, _ := json.Marshal(table.Rows[0].Cells)
			for _, cell := range tt.wantCells {
				if !strings.Contains(string(row), cell) {
					t.Errorf("row %s lacks %q", row, cell)
				}
			}
		})
	}
}

// TestIPReservationLentOwnerPassesOnlyToTheBorrower: a claim's reservation
// lent to another claim (a decentralized live migration) may pass to that
// claim, which then leaves lentTo, and to no one else; only a claim's
// address is lent, and never to its own owner.
func TestIPReservationLentOwnerPassesOnlyToTheBorrower(t *testing.T) {
	ctx := context.Background()
	claimOwner := func(ns, name, uid string) ipkeeperv1alpha1.ReservationOwner {
		return ipkeeperv1alpha1.ReservationOwner{Kind: ipkeeperv1alpha1.OwnerIPAMClaim, Namespace: ns, Name: name, UID: types.UID(uid)}
	}
	src, dst := claimOwner("a", "vm1.blue", "uid-a"), claimOwner("b", "vm1r.blue", "uid-b")

	pod := newReservation("lent-pod-test", "10.20.0.3")
	pod.Spec.LentTo = &dst
	if err := cp.Client.Create(ctx, pod); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "only an IPAMClaim's address is lent") {
		t.Fatalf("a pod's reservation lent: want Invalid, got %v", err)
	}

	r := newReservation("lent-test", "10.20.0.4")
	r.Spec.Owner, r.Spec.InterfaceName = src, ""
	self := src
	r.Spec.LentTo = &self
	if err := cp.Client.Create(ctx, r); !apierrors.IsInvalid(err) {
		t.Fatalf("lent to its own owner: want Invalid, got %v", err)
	}
	r.Spec.LentTo = nil
	if err := cp.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(ctx, r) })
	// Not lent: the owner cannot change.
	r.Spec.Owner = dst
	if err := cp.Client.Update(ctx, r); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "owner is immutable") {
		t.Fatalf("owner change of a reservation not lent: want Invalid, got %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
		t.Fatal(err)
	}
	r.Spec.LentTo = &dst
	if err := cp.Client.Update(ctx, r); err != nil {
		t.Fatalf("lending: %v", err)
	}
	// To a third claim, or to the borrower while keeping lentTo: refused.
	r.Spec.Owner = claimOwner("c", "vm9.blue", "uid-c")
	if err := cp.Client.Update(ctx, r); !apierrors.IsInvalid(err) {
		t.Fatalf("owner change to a claim it was not lent to: want Invalid, got %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
		t.Fatal(err)
	}
	r.Spec.Owner = dst
	if err := cp.Client.Update(ctx, r); !apierrors.IsInvalid(err) {
		t.Fatalf("owner change keeping lentTo: want Invalid, got %v", err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(r), r); err != nil {
		t.Fatal(err)
	}
	r.Spec.Owner, r.Spec.LentTo = dst, nil
	if err := cp.Client.Update(ctx, r); err != nil {
		t.Fatalf("passing to the claim it was lent to: %v", err)
	}
}
