// SPDX-License-Identifier: Apache-2.0

package claimstatus

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func claimWith(ips ...string) *ipamclaimsv1alpha1.IPAMClaim {
	c := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm.blue"}}
	c.Status.IPs = ips
	return c
}

func TestEntriesNameTheBadEntry(t *testing.T) {
	got, err := Entries(claimWith("10.0.0.5/24", "fd00::5"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Index: 0, Raw: "10.0.0.5/24", IP: netip.MustParseAddr("10.0.0.5"), Prefix: netip.MustParsePrefix("10.0.0.5/24")},
		{Index: 1, Raw: "fd00::5", IP: netip.MustParseAddr("fd00::5"), Prefix: netip.MustParsePrefix("fd00::5/128")},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Entries = %+v, want %+v", got, want)
	}
	_, err = Entries(claimWith("10.0.0.5/24", "ten"))
	var ee *EntryError
	if !errors.As(err, &ee) || ee.Index != 1 || err.Error()[:len(`status.ips[1] "ten": `)] != `status.ips[1] "ten": ` {
		t.Errorf("Entries of a bad entry = %v, want an *EntryError naming status.ips[1] \"ten\"", err)
	}
	if a := Addresses(claimWith("ten", "10.0.0.5/24")); len(a) != 1 || a[0] != netip.MustParseAddr("10.0.0.5") {
		t.Errorf("Addresses = %v, want only the readable 10.0.0.5", a)
	}
}

func TestRecordAddsOnlyWhatIsNotRecorded(t *testing.T) {
	c := claimWith("10.0.0.5/24")
	if Record(&c.Status, netip.MustParsePrefix("10.0.0.5/24")) {
		t.Errorf("Record of a recorded address reported a change")
	}
	if !Record(&c.Status, netip.MustParsePrefix("10.0.0.5/24"), netip.MustParsePrefix("fd00::5/64")) {
		t.Errorf("Record of a new address reported no change")
	}
	if !slices.Equal(c.Status.IPs, []string{"10.0.0.5/24", "fd00::5/64"}) || !Records(c, netip.MustParseAddr("fd00::5")) || !Filled(c) {
		t.Errorf("status.ips = %v", c.Status.IPs)
	}
	cond := Allocated(&c.Status, "blue", "imported", 3)
	if cond.Message != `10.0.0.5/24, fd00::5/64 allocated on network "blue" (imported)` || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != 3 {
		t.Errorf("Allocated = %+v", cond)
	}
}

func TestWriteNeverWritesNullIPs(t *testing.T) {
	s := runtime.NewScheme()
	if err := ipamclaimsv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := claimWith()
	c.Status.IPs = nil
	cl := fake.NewClientBuilder().WithScheme(s).WithObjects(c).WithStatusSubresource(c).Build()
	c.Status.Conditions = []metav1.Condition{NotAllocated(ReasonExhausted, "full", 1)}
	c.Status.Conditions[0].LastTransitionTime = metav1.Now()
	if err := Write(context.Background(), cl, c); err != nil {
		t.Fatal(err)
	}
	if c.Status.IPs == nil {
		t.Errorf("status.ips written as null")
	}
}
