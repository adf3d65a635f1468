// SPDX-License-Identifier: Apache-2.0

package claimalloc

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// WatchBlocks feeds set from the IPBlock informer of informers (every
// holder's blocks: the Set keeps those of its own holder apart) and
// returns whether that informer has delivered every block yet.
func WatchBlocks(ctx context.Context, informers cache.Informers, set *blocks.Set) (synced func() bool, err error) {
	inf, err := informers.GetInformer(ctx, &ipkeeperv1alpha1.IPBlock{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("getting the IPBlock informer: %w", err)
	}
	observe := func(obj any) {
		if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok {
			set.Record(b)
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if b, ok := obj.(*ipkeeperv1alpha1.IPBlock); ok {
				set.Forget(b)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watching IPBlocks: %w", err)
	}
	return reg.HasSynced, nil
}
