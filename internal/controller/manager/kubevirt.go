// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"context"
	"fmt"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claimmaker"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/guestnet"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/handover"
	podwebhook "github.com/ipkeeper/ipkeeper/internal/kubevirt/webhook"
	"github.com/ipkeeper/ipkeeper/internal/retry"
)

var kubeVirtSupportGauge = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "ipkeeper_controller_kubevirt_support",
	Help: "1 while KubeVirt support (IPAMClaim controllers, virt-launcher pod webhook) runs because KubeVirt's CRDs are installed; 0 without them (reservation garbage collection only).",
})

// kubeVirtSupport is the KubeVirt feature (see optionalAPI): while
// KubeVirt's CRDs are served, the claims controllers and the webhook scope
// (started once this replica leads) and the caches the pod webhook reads.
// When the CRDs go, the leader takes the webhook's rules off.
type kubeVirtSupport struct {
	scheme *runtime.Scheme
	main   ctrl.Manager
	o      Options
	hook   *podwebhook.Switch
	maker  *claimmaker.Maker
}

// newKubeVirtSupport is the optional API runner for KubeVirt.
func newKubeVirtSupport(cfg *rest.Config, s *runtime.Scheme, main ctrl.Manager, o Options, hook *podwebhook.Switch, maker *claimmaker.Maker) (*optionalAPI, error) {
	resources := []string{"virtualmachines", "virtualmachineinstances"}
	if o.RequireGate {
		resources = append(resources, "kubevirts")
	}
	return newOptionalAPI(cfg, s, main, apiSpec{
		name:     "KubeVirt",
		what:     "IPAMClaim controllers, virt-launcher pod webhook",
		required: []apiResources{{groupVersion: kubevirtv1.SchemeGroupVersion.String(), resources: resources}},
		interval: o.KubeVirtDiscoveryInterval,
		gauge:    kubeVirtSupportGauge,
		feature:  &kubeVirtSupport{scheme: s, main: main, o: o, hook: hook, maker: maker},
	})
}

// stopped: nothing to admit until the support runs again. The rules stay
// on (the webhook denies), so no launcher pod slips by without its claim.
func (k *kubeVirtSupport) stopped() { k.hook.Set(nil) }

// absent is the state without KubeVirt: nothing to admit, and (on the
// leader) the webhook's rules off so the API server does not call it.
func (k *kubeVirtSupport) absent(ctx context.Context) {
	k.hook.Set(nil)
	if k.hook == nil || !isClosed(k.main.Elected()) {
		return
	}
	if err := podwebhook.SetScope(ctx, k.main.GetAPIReader(), k.main.GetClient(), k.o.WebhookConfig, false, podwebhook.ReferencesNone); err != nil {
		k.main.GetLogger().Error(err, "taking the webhook's rules off")
	}
}

// setup wires the KubeVirt manager; the webhook answers once its caches
// have synced.
func (k *kubeVirtSupport) setup(ctx context.Context, child ctrl.Manager, _ map[string]bool) (func(), error) {
	mutator, err := k.setupChild(ctx, child)
	if err != nil {
		return nil, err
	}
	return func() { k.hook.Set(mutator) }, nil
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
		{"VM claims controller", (&claims.VMReconciler{Client: child.GetClient(), Recorder: recorder, Gate: gate, Maker: k.maker, WatchKubeVirt: k.o.RequireGate, MaxRetention: k.o.MaxAddressRetention}).SetupWithManager},
		{"VMI claims controller", (&claims.VMIReconciler{Client: child.GetClient(), Recorder: recorder, Gate: gate, Maker: k.maker, WatchKubeVirt: k.o.RequireGate, MaxRetention: k.o.MaxAddressRetention}).SetupWithManager},
		{"claim release controller", (&claims.ClaimReleaser{Client: child.GetClient(), APIReader: child.GetAPIReader(), Recorder: recorder, Maker: k.maker, ResyncPeriod: k.o.ClaimResync,
			// Reservations and pools are in the main manager's cache, with
			// the reservations' owner index.
			Retainer: &claims.Retainer{Reservations: k.main.GetClient(), Live: k.main.GetAPIReader(), Writer: k.main.GetClient(), Max: k.o.MaxAddressRetention, Now: time.Now},
		}).SetupWithManager},
		{"guest network configuration controller", (&guestnet.Reconciler{Client: child.GetClient(), Pools: k.main.GetClient(), Recorder: recorder}).SetupWithManager},
		{"guest addresses controller", (&guestnet.DriftReconciler{Client: child.GetClient(), Pods: k.main.GetClient(), Recorder: recorder}).SetupWithManager},
		{"migration handover controller", func(m ctrl.Manager) error {
			// Reservations are in the main manager's cache (its lentTo
			// and owner indexes), written through it.
			return (&handover.Reconciler{Client: child.GetClient(), Reservations: k.main.GetClient(), ReservationCache: k.main.GetCache(), Recorder: recorder}).SetupWithManager(ctx, m)
		}},
	}
	if k.o.RequireGate {
		setups = append(setups, struct {
			name  string
			setup func(ctrl.Manager) error
		}{"feature gate notice", (&claims.GateNotice{Client: child.GetClient(), Recorder: recorder}).SetupWithManager})
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
	return &podwebhook.PodMutator{Reader: child.GetClient(), APIReader: live, Gate: gate, Maker: k.maker, Decoder: admission.NewDecoder(k.scheme)}, nil
}

// setupScope registers the controller that keeps the webhook's rules on
// and records which references it makes: once at start, then on every
// change of the gate or of the claims maker.
func (k *kubeVirtSupport) setupScope(gate kubevirt.Gate) func(ctrl.Manager) error {
	return func(mgr ctrl.Manager) error {
		r := &podwebhook.ScopeReconciler{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Gate: gate, Maker: k.maker, ConfigName: k.o.WebhookConfig}
		key := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: k.o.WebhookConfig}}
		kick := make(chan event.GenericEvent, 1)
		kick <- event.GenericEvent{Object: key}
		toKey := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(key)}}
		})
		b := ctrl.NewControllerManagedBy(mgr).
			Named("webhook-scope").
			WithOptions(retry.Options()).
			WatchesRawSource(source.Channel(kick, &handler.EnqueueRequestForObject{})).
			WatchesRawSource(source.Channel(k.maker.Listen(), toKey))
		if k.o.RequireGate {
			b = b.Watches(&kubevirtv1.KubeVirt{}, toKey, builder.WithPredicates(kubevirt.GateChanged()))
		}
		return b.Complete(r)
	}
}
