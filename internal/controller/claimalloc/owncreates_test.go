// SPDX-License-Identifier: Apache-2.0

package claimalloc

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

func TestOwnCreateIsToldOnceAndOnlyAtItsVersion(t *testing.T) {
	var o ownCreates
	res := &ipkeeperv1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: "blue-10-0-0-5", ResourceVersion: "7"}}
	o.add(res, time.Now())
	later := res.DeepCopy()
	later.ResourceVersion = "8"
	if o.take(later) {
		t.Error("a later version of an own create was told as its create")
	}
	if !o.take(res) {
		t.Error("the event of an own create was not told")
	}
	if o.take(res) {
		t.Error("an own create was told twice")
	}
}

func TestOwnCreatesForgetOldOnes(t *testing.T) {
	var o ownCreates
	old := time.Now().Add(-2 * ownCreateTTL)
	for i := range 1024 {
		o.add(&ipkeeperv1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r%d", i), ResourceVersion: "1"}}, old)
	}
	o.add(&ipkeeperv1alpha1.IPReservation{ObjectMeta: metav1.ObjectMeta{Name: "new", ResourceVersion: "2"}}, time.Now())
	if n := len(o.byName); n != 1 {
		t.Errorf("%d creates remembered after a prune of those older than %s, want 1", n, ownCreateTTL)
	}
}
