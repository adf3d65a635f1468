// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// condIs: the pool status has condition typ with status s.
func condIs(st *ipkeeperv1alpha1.IPPoolStatus, typ string, s metav1.ConditionStatus) bool {
	return meta.IsStatusConditionPresentAndEqual(st.Conditions, typ, s)
}

// waitPool polls pool (updating it) until ok holds for its status.
func waitPool(t *testing.T, pool *ipkeeperv1alpha1.IPPool, what string, ok func(*ipkeeperv1alpha1.IPPoolStatus) bool) {
	t.Helper()
	if err := framework.Eventually(context.Background(), 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return false, err
		}
		return ok(&pool.Status), nil
	}); err != nil {
		t.Fatalf("IPPool %s not %s: %v; status %+v", pool.Name, what, err, pool.Status)
	}
}
