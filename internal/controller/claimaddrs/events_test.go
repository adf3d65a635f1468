// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/macaddr"
)

// versioned is claim c at resourceVersion rv.
func versioned(c *ipamclaimsv1alpha1.IPAMClaim, rv string) *ipamclaimsv1alpha1.IPAMClaim {
	c = c.DeepCopy()
	c.ResourceVersion = rv
	return c
}

func passes(w *ownWrites, old, cur *ipamclaimsv1alpha1.IPAMClaim) bool {
	return claimUpdates(w).Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur})
}

func TestEchoOfOwnStatusWriteIsDropped(t *testing.T) {
	var w ownWrites
	before := versioned(claim("vm1.blue"), "10")
	written := versioned(before, "11")
	written.Status.IPs = []string{"10.0.0.5/24"}
	w.wrote(before, written)
	older := versioned(before, "9")
	older.Spec.Interface = "pod0"
	if !passes(&w, older, before) {
		t.Error("an update to the version the write replaced was dropped")
	}
	if passes(&w, before, written) {
		t.Error("the echo of the controller's own status write was let through")
	}
	// Once seen, the same version is not an echo any more (a relist).
	if w.echo(written) {
		t.Error("a write's echo was recognised twice")
	}
	admin := versioned(written, "12")
	admin.Status.IPs = []string{"10.0.0.9/24"}
	if !passes(&w, written, admin) {
		t.Error("an administrator's edit of status.ips after the write was dropped")
	}
}

func TestUpdatesOfOthersPartsAreDropped(t *testing.T) {
	var w ownWrites
	filled := versioned(claim("vm1.blue"), "20")
	filled.Status.IPs = []string{"10.0.0.5/24"}
	for _, typ := range []string{claimstatus.ConditionInPool, claimstatus.ConditionGuestAddresses} {
		cur := versioned(filled, "21")
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "X"})
		if passes(&w, filled, cur) {
			t.Errorf("an update setting only condition %s (another package's) was let through", typ)
		}
	}
	labelled := versioned(filled, "22")
	labelled.Labels = map[string]string{macaddr.Label: "02-00-00-00-00-01"}
	if passes(&w, filled, labelled) {
		t.Error("an update setting only the MAC label was let through")
	}
	for name, edit := range map[string]func(*ipamclaimsv1alpha1.IPAMClaim){
		"its IPsAllocated condition": func(c *ipamclaimsv1alpha1.IPAMClaim) {
			meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: claimstatus.ConditionIPsAllocated, Status: metav1.ConditionFalse, Reason: "X"})
		},
		"an annotation": func(c *ipamclaimsv1alpha1.IPAMClaim) { c.Annotations[claimstatus.RequestedAnnotation] = `["10.0.0.7"]` },
		"another label": func(c *ipamclaimsv1alpha1.IPAMClaim) { c.Labels = map[string]string{"team": "a"} },
		"status.ips":    func(c *ipamclaimsv1alpha1.IPAMClaim) { c.Status.IPs = nil },
		"its deletion":  func(c *ipamclaimsv1alpha1.IPAMClaim) { c.DeletionTimestamp = &metav1.Time{} },
		"status.ownerPod": func(c *ipamclaimsv1alpha1.IPAMClaim) {
			c.Status.OwnerPod = &ipamclaimsv1alpha1.OwnerPod{Name: "virt-launcher-vm1-x"}
		},
	} {
		cur := versioned(filled, "23")
		edit(cur)
		if !passes(&w, filled, cur) {
			t.Errorf("an update of %s was dropped", name)
		}
	}
}

// fresher swaps in what was written only for the exact object the write
// replaced: not for another claim of the same name, nor for a newer version.
func TestFresherSwapsOnlyTheReplacedVersion(t *testing.T) {
	var w ownWrites
	before := versioned(claim("vm1.blue"), "30")
	written := versioned(before, "31")
	written.Status.IPs = []string{"10.0.0.5/24"}
	w.wrote(before, written)
	if got := w.fresher(versioned(before, "30")); got.ResourceVersion != "31" || len(got.Status.IPs) != 1 {
		t.Errorf("fresher of the replaced version gave version %q with %v, want the write (31)", got.ResourceVersion, got.Status.IPs)
	}
	newer := versioned(before, "32")
	if got := w.fresher(newer); got != newer {
		t.Errorf("fresher of a newer version gave version %q, want it unchanged", got.ResourceVersion)
	}
	recreated := versioned(before, "30")
	recreated.UID = "another"
	if got := w.fresher(recreated); got != recreated {
		t.Error("fresher swapped the write of a claim of the same name, but another UID")
	}
	w.forget(client.ObjectKeyFromObject(before))
	if got := w.fresher(before); got != before {
		t.Error("fresher swapped a write forgotten")
	}
}
