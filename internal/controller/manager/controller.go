// SPDX-License-Identifier: Apache-2.0

package manager

// Why the controller is built the way it is:
//
// ipkeeper-controller must never hold a cluster hostage. It is the only
// place addresses of vanished pods are collected, so its garbage collector
// runs on every cluster, with or without KubeVirt; and it sits in the
// admission path of every VM, so its webhook is called only when it can
// matter and answers within bounds.
//
// One manager (manager.go) runs what every cluster needs: on the leader,
// the reservation garbage collector, the IPPool status controllers, the
// inline pool controller (IPPools made from NADs) and the IPAMClaim
// address controller (every claim's addresses, chosen and recorded by
// this one writer); on every replica, the webhook server and certificates
// and the probes. The
// parts for optional APIs, KubeVirt
// (kubevirt.go) and Cluster API (clusterapi.go), are not wired into that
// manager: each follows discovery for its CRDs (optional.go) and runs a
// manager of its own (controllers on the leader; for KubeVirt also the
// webhook's cache on every replica) while they are installed, stopping it
// cleanly when they are removed. Controllers cannot be removed from a
// running manager, and informers for a kind the API server does not serve
// fail forever; a separate manager is what can be started and stopped.
// The reservation cache and its indexes (package reservationindex) stay in
// the main manager, shared by all.

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ipkeeper/ipkeeper/internal/blocks"
	"github.com/ipkeeper/ipkeeper/internal/controller/blockgc"
	"github.com/ipkeeper/ipkeeper/internal/controller/capi"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimaddrs"
	"github.com/ipkeeper/ipkeeper/internal/controller/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/controller/poolstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationgc"
	"github.com/ipkeeper/ipkeeper/internal/controller/reservationindex"
	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claimmaker"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
)

// New builds the controller's manager from validated options. Start it
// with mgr.Start(ctx).
func New(ctx context.Context, cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := RegisterMetrics(metrics.Registry); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.APIQPS), o.APIBurst
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	if err := capi.AddToScheme(s); err != nil {
		return nil, err
	}
	mgr, certServer, err := newManager(cfg, s, o)
	if err != nil {
		return nil, err
	}
	if err := reservationindex.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	collector := &reservationgc.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), GracePeriod: o.GCGracePeriod}
	if err := collector.SetupWithManager(ctx, mgr); err != nil {
		return nil, fmt.Errorf("setting up the reservation garbage collector: %w", err)
	}
	recorder := mgr.GetEventRecorderFor("ipkeeper-controller")
	// One cache of held addresses, fed once: pool status counts from it,
	// the claims' allocator picks from it.
	addrs := reservationindex.NewAddresses()
	pools := &poolstatus.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Index: addrs}
	if err := pools.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the IPPool status controller: %w", err)
	}
	blockGC := &blockgc.Reconciler{Client: mgr.GetClient(), Addrs: addrs, Grace: o.BlockGrace}
	if err := blockGC.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the address block garbage collector: %w", err)
	}
	claimBlocks := blocks.NewSet(string(ipkeeperv1alpha1.HolderIPAMClaims))
	blocksSynced, err := claimalloc.WatchBlocks(ctx, mgr.GetCache(), claimBlocks)
	if err != nil {
		return nil, err
	}
	alloc := claimalloc.New(mgr.GetClient(), mgr.GetAPIReader(), addrs, claimBlocks, blocksSynced, mgr.GetLogger().WithName("claim-allocator"))
	fills := &claimaddrs.Fills{}
	fill := &claimaddrs.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Alloc: alloc, Recorder: recorder, Workers: o.ClaimWorkers, Fills: fills}
	if err := fill.SetupWithManager(ctx, mgr); err != nil {
		return nil, fmt.Errorf("setting up the IPAMClaim address controller: %w", err)
	}
	// The KubeVirt support reads claims from this manager's cache
	// (sharedcache.go); its claims' index is registered here, once.
	if err := claims.SetupClaimIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	macLabel := &claimaddrs.MACLabeler{Client: mgr.GetClient(), Fills: fills}
	if err := macLabel.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the IPAMClaim MAC label controller: %w", err)
	}
	inline := &inlinepool.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder}
	if err := inline.SetupWithManager(ctx, mgr); err != nil {
		return nil, fmt.Errorf("setting up the inline pool controller: %w", err)
	}
	inPool := &poolstatus.InPoolReconciler{Client: mgr.GetClient()}
	if err := inPool.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the claims' AddressesInPool controller: %w", err)
	}
	hook, err := addWebhook(mgr, o, certServer)
	if err != nil {
		return nil, err
	}
	setting, err := claimmaker.ParseSetting(o.ClaimsController)
	if err != nil {
		return nil, err
	}
	maker, err := claimmaker.New(ctx, setting, mgr.GetAPIReader(), recorder, o.ClaimsControllerInterval)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(maker); err != nil {
		return nil, fmt.Errorf("adding the claims maker check: %w", err)
	}
	kv, err := newKubeVirtSupport(cfg, s, mgr, o, hook, maker)
	if err != nil {
		return nil, err
	}
	if err := kv.add("kubevirt-support"); err != nil {
		return nil, err
	}
	capiSupport, err := newClusterAPISupport(cfg, s, mgr, o, collector, alloc)
	if err != nil {
		return nil, err
	}
	if err := capiSupport.add("cluster-api-support"); err != nil {
		return nil, err
	}
	return mgr, nil
}

// Run builds and runs the controller until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	mgr, err := New(ctx, cfg, o)
	if err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
