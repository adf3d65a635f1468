// SPDX-License-Identifier: Apache-2.0

package controllermanager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ipkeeper/ipkeeper/internal/claims"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/retry"
	podwebhook "github.com/ipkeeper/ipkeeper/internal/webhook"
)

var kubeVirtSupportGauge = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "ipkeeper_controller_kubevirt_support",
	Help: "1 while KubeVirt support (IPAMClaim controllers, virt-launcher pod webhook) runs because KubeVirt's CRDs are installed; 0 without them (reservation garbage collection only).",
})

func init() { metrics.Registry.MustRegister(kubeVirtSupportGauge) }

// Modes of KubeVirt support, for readiness.
const (
	modeUnknown  int32 = iota // not looked yet, or the last look failed
	modeAbsent                // KubeVirt CRDs not installed
	modeStarting              // installed; caches syncing
	modeActive                // running
)

// kubeVirtSupport runs on every replica. While KubeVirt's CRDs are served it
// runs a manager of its own: the claims controllers and the webhook scope
// (started once this replica leads) and the caches the pod webhook reads.
// When the CRDs go it stops that manager and, on the leader, takes the
// webhook's rules off.
type kubeVirtSupport struct {
	cfg    *rest.Config
	scheme *runtime.Scheme
	main   ctrl.Manager
	o      Options
	hook   *podwebhook.Switch
	disco  discovery.DiscoveryInterface
	mode   atomic.Int32
}

func newKubeVirtSupport(cfg *rest.Config, s *runtime.Scheme, main ctrl.Manager, o Options, hook *podwebhook.Switch) (*kubeVirtSupport, error) {
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the discovery client: %w", err)
	}
	return &kubeVirtSupport{cfg: cfg, scheme: s, main: main, o: o, hook: hook, disco: disco}, nil
}

// NeedLeaderElection: every replica serves the webhook, so every replica
// follows the CRDs; the controllers inside wait for leadership themselves.
func (k *kubeVirtSupport) NeedLeaderElection() bool { return false }

func (k *kubeVirtSupport) ready(*http.Request) error {
	switch k.mode.Load() {
	case modeAbsent, modeActive:
		return nil
	case modeStarting:
		return errors.New("KubeVirt support: caches not synced yet")
	}
	return errors.New("KubeVirt support: not yet known whether the KubeVirt CRDs are installed")
}

// Start follows the CRDs until ctx ends.
func (k *kubeVirtSupport) Start(ctx context.Context) error {
	logger := k.main.GetLogger().WithName("kubevirt-support")
	var run *childRun
	defer func() {
		if run != nil {
			run.stop()
		}
	}()
	for {
		installed, err := k.installed()
		switch {
		case err != nil:
			logger.Error(err, "checking whether the KubeVirt CRDs are installed; keeping the current mode")
		case installed && run == nil:
			logger.Info("KubeVirt CRDs found; starting KubeVirt support (IPAMClaim controllers, virt-launcher pod webhook)")
			k.mode.Store(modeStarting)
			if run, err = k.startChild(ctx); err != nil {
				logger.Error(err, "starting KubeVirt support; retrying")
				k.mode.Store(modeUnknown)
			}
		case !installed && run != nil:
			logger.Info("KubeVirt CRDs removed; stopping KubeVirt support, reservation garbage collection continues")
			run.stop()
			run = nil
			k.absent(ctx)
		case !installed:
			if k.mode.Swap(modeAbsent) != modeAbsent {
				logger.Info("KubeVirt CRDs not installed; running without KubeVirt support: reservation garbage collection only")
			}
			k.absent(ctx)
		}
		var exited <-chan error
		if run != nil {
			exited = run.done
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-exited:
			logger.Error(err, "KubeVirt support stopped unexpectedly; restarting it")
			k.hook.Set(nil)
			run.cancel()
			run = nil
			k.mode.Store(modeUnknown)
			kubeVirtSupportGauge.Set(0)
		case <-time.After(k.o.KubeVirtDiscoveryInterval):
		}
	}
}

// installed reports whether the API server serves the KubeVirt kinds the
// controller watches.
func (k *kubeVirtSupport) installed() (bool, error) {
	gv := kubevirtv1.SchemeGroupVersion.String()
	list, err := k.disco.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", gv, err)
	}
	want := map[string]bool{"virtualmachines": true, "virtualmachineinstances": true}
	if k.o.RequireGate {
		want["kubevirts"] = true
	}
	for _, r := range list.APIResources {
		delete(want, r.Name)
	}
	return len(want) == 0, nil
}

// absent is the state without KubeVirt: nothing to admit, and (on the
// leader) the webhook's rules off so the API server does not call it.
func (k *kubeVirtSupport) absent(ctx context.Context) {
	kubeVirtSupportGauge.Set(0)
	k.hook.Set(nil)
	if k.hook == nil || !isClosed(k.main.Elected()) {
		return
	}
	if err := podwebhook.SetScope(ctx, k.main.GetAPIReader(), k.main.GetClient(), k.o.WebhookConfig, false); err != nil {
		k.main.GetLogger().Error(err, "taking the webhook's rules off")
	}
}

type childRun struct {
	cancel context.CancelFunc
	done   chan error
}

func (r *childRun) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
	}
}

// startChild builds and starts the KubeVirt manager; it marks support
// active once its caches have synced.
func (k *kubeVirtSupport) startChild(ctx context.Context) (*childRun, error) {
	child, err := ctrl.NewManager(k.cfg, ctrl.Options{
		Scheme:                 k.scheme,
		Logger:                 k.main.GetLogger().WithName("kubevirt"),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the KubeVirt manager: %w", err)
	}
	mutator, err := k.setupChild(ctx, child)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	run := &childRun{cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := child.Start(runCtx)
		if runCtx.Err() == nil && err == nil {
			err = errors.New("the KubeVirt manager returned")
		}
		if runCtx.Err() == nil {
			run.done <- err
		}
		close(run.done)
	}()
	go func() {
		if !child.GetCache().WaitForCacheSync(runCtx) {
			return
		}
		k.hook.Set(mutator)
		if k.mode.CompareAndSwap(modeStarting, modeActive) {
			kubeVirtSupportGauge.Set(1)
			child.GetLogger().Info("KubeVirt support running")
		}
	}()
	return run, nil
}

// setupChild wires the claims controllers and the webhook scope (leader
// only) and the webhook's informers (every replica) into child.
func (k *kubeVirtSupport) setupChild(ctx context.Context, child ctrl.Manager) (*podwebhook.PodMutator, error) {
	if err := claims.SetupIndexes(ctx, child.GetFieldIndexer()); err != nil {
		return nil, err
	}
	var gate kubevirt.Gate = kubevirt.AlwaysOn{}
	if k.o.RequireGate {
		gate = kubevirt.CRGate{Reader: child.GetClient()}
	}
	lead := &leaderGated{Manager: child, elected: k.main.Elected()}
	recorder := child.GetEventRecorderFor("ipkeeper-controller")
	setups := []struct {
		name  string
		setup func(ctrl.Manager) error
	}{
		{"VM claims controller", (&claims.VMReconciler{Client: child.GetClient(), Recorder: recorder, Gate: gate, WatchKubeVirt: k.o.RequireGate}).SetupWithManager},
		{"VMI claims controller", (&claims.VMIReconciler{Client: child.GetClient(), Recorder: recorder, Gate: gate, WatchKubeVirt: k.o.RequireGate}).SetupWithManager},
		{"claim release controller", (&claims.ClaimReleaser{Client: child.GetClient(), APIReader: child.GetAPIReader(), Recorder: recorder, ResyncPeriod: k.o.ClaimResync}).SetupWithManager},
	}
	if k.hook != nil {
		setups = append(setups, struct {
			name  string
			setup func(ctrl.Manager) error
		}{"webhook scope", k.setupScope(gate)})
	}
	for _, s := range setups {
		if err := s.setup(lead); err != nil {
			return nil, fmt.Errorf("setting up the %s: %w", s.name, err)
		}
	}
	if k.hook == nil {
		return nil, nil
	}
	// Informers the webhook reads, started with the manager on every
	// replica (not lazily on the first admission request).
	for _, obj := range []client.Object{&kubevirtv1.VirtualMachineInstance{}, &nadv1.NetworkAttachmentDefinition{}, &ipamclaimsv1alpha1.IPAMClaim{}} {
		if _, err := child.GetCache().GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("registering the webhook's %T informer: %w", obj, err)
		}
	}
	if k.o.RequireGate {
		if _, err := child.GetCache().GetInformer(ctx, &kubevirtv1.KubeVirt{}); err != nil {
			return nil, fmt.Errorf("registering the KubeVirt CR informer: %w", err)
		}
	}
	live := podwebhook.RateLimitedReader{Reader: child.GetAPIReader(), Limiter: rate.NewLimiter(rate.Limit(k.o.WebhookLiveReadQPS), 2*int(max(1, k.o.WebhookLiveReadQPS)))}
	return &podwebhook.PodMutator{Reader: child.GetClient(), APIReader: live, Gate: gate, Decoder: admission.NewDecoder(k.scheme)}, nil
}

// setupScope registers the controller that turns the webhook's rules on
// and off with the gate: once at start, then on every gate change.
func (k *kubeVirtSupport) setupScope(gate kubevirt.Gate) func(ctrl.Manager) error {
	return func(mgr ctrl.Manager) error {
		r := &podwebhook.ScopeReconciler{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Gate: gate, ConfigName: k.o.WebhookConfig}
		key := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: k.o.WebhookConfig}}
		kick := make(chan event.GenericEvent, 1)
		kick <- event.GenericEvent{Object: key}
		toKey := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(key)}}
		})
		b := ctrl.NewControllerManagedBy(mgr).
			Named("webhook-scope").
			WithOptions(retry.Options()).
			WatchesRawSource(source.Channel(kick, &handler.EnqueueRequestForObject{}))
		if k.o.RequireGate {
			b = b.Watches(&kubevirtv1.KubeVirt{}, toKey, builder.WithPredicates(kubevirt.GateChanged()))
		}
		return b.Complete(r)
	}
}

// leaderGated is the KubeVirt manager as its leader-only controllers see
// it: what they add starts once the main manager leads. (The KubeVirt
// manager itself runs on every replica, for the webhook's caches.)
type leaderGated struct {
	manager.Manager
	elected <-chan struct{}
}

func (m *leaderGated) Add(r manager.Runnable) error {
	return m.Manager.Add(manager.RunnableFunc(func(ctx context.Context) error {
		select {
		case <-m.elected:
		case <-ctx.Done():
			return nil
		}
		return r.Start(ctx)
	}))
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
