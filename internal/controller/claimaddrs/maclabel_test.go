// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/macaddr"
)

// The claim's MAC label is written by its own lane after the fill, not by
// the fill: derived from the claim's IPv4 address, or the VM's own MAC when
// the claim records one; a claim already labelled with its MAC is neither
// queued nor written again, and a claim without addresses gets no label.
func TestMACLabelIsALaneOfItsOwn(t *testing.T) {
	n := nad(ns, "blue", dualConf)
	f := newFixture(t, n, poolOfNAD(t, n), claim("vm1.blue"), claim("vm2.blue"))
	if _, ok := wantedMACLabel(f.claim(t, "vm1.blue")); ok {
		t.Error("a claim without addresses wants a MAC label")
	}
	f.labelMAC(t, "vm1.blue")
	if v, ok := f.claim(t, "vm1.blue").Labels[macaddr.Label]; ok {
		t.Fatalf("a claim without addresses was labelled %s=%s", macaddr.Label, v)
	}

	f.reconcile(t, "vm1.blue")
	c := f.claim(t, "vm1.blue")
	if _, ok := c.Labels[macaddr.Label]; ok || len(c.Status.IPs) != 2 {
		t.Fatalf("after the fill: status.ips %v, labels %v; want two addresses and no MAC label yet", c.Status.IPs, c.Labels)
	}
	if want, ok := wantedMACLabel(c); !ok || !strings.HasPrefix(want, "0a-58-0a-00-00-") {
		t.Fatalf("a filled claim wants label %q (%v), want the MAC derived from %s", want, ok, c.Status.IPs[0])
	}
	f.labelMAC(t, "vm1.blue")
	c = f.claim(t, "vm1.blue")
	if mac, _, _ := macaddr.OfClaim(c); c.Labels[macaddr.Label] != macaddr.LabelValue(mac) {
		t.Fatalf("label %s = %q, want %s", macaddr.Label, c.Labels[macaddr.Label], macaddr.LabelValue(mac))
	}
	if _, ok := wantedMACLabel(c); ok {
		t.Error("a claim labelled with its MAC is queued again")
	}
	rv := c.ResourceVersion
	f.labelMAC(t, "vm1.blue")
	if got := f.claim(t, "vm1.blue").ResourceVersion; got != rv {
		t.Errorf("a second look wrote the claim (resourceVersion %s -> %s)", rv, got)
	}

	// The VM's own MAC wins over the derived one.
	c.Annotations = map[string]string{macaddr.OwnAnnotation: "02:00:00:00:aa:02"}
	if err := f.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	f.labelMAC(t, "vm1.blue")
	if got := f.claim(t, "vm1.blue").Labels[macaddr.Label]; got != "02-00-00-00-aa-02" {
		t.Errorf("label %s = %q with the VM's own MAC recorded, want 02-00-00-00-aa-02", macaddr.Label, got)
	}

	// A claim being deleted is left alone.
	f.reconcile(t, "vm2.blue")
	c2 := f.claim(t, "vm2.blue")
	c2.DeletionTimestamp = &metav1.Time{}
	if _, ok := wantedMACLabel(c2); ok {
		t.Error("a claim being deleted wants a MAC label")
	}
	// A claim gone is no error.
	f.labelMAC(t, "vm9.blue")
}
