// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/ipkeeper/ipkeeper/internal/controller/capi"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationgc"
)

var clusterAPISupportGauge = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "ipkeeper_controller_cluster_api_support",
	Help: "1 while the Cluster API IPAM provider (IPAddressClaims of ipkeeper IPPools) runs because Cluster API's IPAM CRDs are installed; 0 without them.",
})

// clusterAPIKey names Cluster API's Cluster resource among the served
// optional resources.
var clusterAPIKey = clusterv1.GroupVersion.String() + "/clusters"

// clusterAPISupport is the Cluster API feature (see optionalAPI): while
// Cluster API's IPAM kinds are served, the IPAddressClaim controller (on
// the leader), with a watch on Clusters (pause) when that kind is served
// too; and it tells the reservation collector of deleted claims.
type clusterAPISupport struct {
	main      ctrl.Manager
	collector *reservationgc.Reconciler
	alloc     *claimalloc.Allocator
}

// newClusterAPISupport is the optional API runner for Cluster API.
func newClusterAPISupport(cfg *rest.Config, s *runtime.Scheme, main ctrl.Manager, o Options, collector *reservationgc.Reconciler, alloc *claimalloc.Allocator) (*optionalAPI, error) {
	return newOptionalAPI(cfg, s, main, apiSpec{
		name:     "Cluster API",
		what:     "IPAM provider: IPAddressClaims of ipkeeper IPPools",
		required: []apiResources{{groupVersion: ipamv1.GroupVersion.String(), resources: []string{"ipaddressclaims", "ipaddresses"}}},
		optional: []apiResources{{groupVersion: clusterv1.GroupVersion.String(), resources: []string{"clusters"}}},
		interval: o.ClusterAPIDiscoveryInterval,
		gauge:    clusterAPISupportGauge,
		feature:  &clusterAPISupport{main: main, collector: collector, alloc: alloc},
	})
}

func (c *clusterAPISupport) stopped()               {}
func (c *clusterAPISupport) absent(context.Context) {}

func (c *clusterAPISupport) setup(ctx context.Context, child ctrl.Manager, served map[string]bool) (func(), error) {
	if err := capi.SetupIndexes(ctx, child.GetFieldIndexer()); err != nil {
		return nil, err
	}
	lead := &leaderGated{Manager: child, elected: c.main.Elected()}
	r := &capi.AddressClaimReconciler{
		Client:        child.GetClient(),
		Reservations:  c.main.GetClient(), // the main cache has the reservation indexes
		Alloc:         c.alloc,
		APIReader:     child.GetAPIReader(),
		WatchClusters: served[clusterAPIKey],
	}
	if err := r.SetupWithManager(lead); err != nil {
		return nil, fmt.Errorf("setting up the IPAddressClaim controller: %w", err)
	}
	if err := lead.Add(manager.RunnableFunc(c.reportDeletions(child))); err != nil {
		return nil, fmt.Errorf("adding the IPAddressClaim deletion feed: %w", err)
	}
	return nil, nil
}

// reportDeletions tells the reservation collector (which cannot watch a
// kind that may not be served) of every IPAddressClaim deleted, so a
// reservation whose claim went without its release (finalizer removed by
// hand) is released.
func (c *clusterAPISupport) reportDeletions(child ctrl.Manager) func(context.Context) error {
	return func(ctx context.Context) error {
		inf, err := child.GetCache().GetInformer(ctx, &ipamv1.IPAddressClaim{})
		if err != nil {
			return fmt.Errorf("getting the IPAddressClaim informer: %w", err)
		}
		reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			DeleteFunc: func(obj any) {
				if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				if o, ok := obj.(client.Object); ok {
					c.collector.OwnerGone(ctx, o)
				}
			},
		})
		if err != nil {
			return fmt.Errorf("watching IPAddressClaim deletions: %w", err)
		}
		<-ctx.Done()
		_ = inf.RemoveEventHandler(reg)
		return nil
	}
}
