// SPDX-License-Identifier: Apache-2.0

package inlinepool

import (
	"context"
	"errors"
	"fmt"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/retry"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// EventReason is the reason of an Event on a NetworkAttachmentDefinition.
type EventReason string

// The Event reasons, listed in docs/troubleshooting.md.
const (
	ReasonPoolCreated     EventReason = "IPPoolCreated"
	ReasonPoolNotFound    EventReason = "IPPoolNotFound"
	ReasonInvalidConfig   EventReason = "InvalidConfiguration"
	ReasonDisagrees       EventReason = "DefinitionDisagrees"
	ReasonNetworksOverlap EventReason = "NetworksOverlap"
	// ReasonUnknownKeys (Normal): ipam keys nobody reads, ignored. A
	// misspelling that would hand out a gateway or an exclude is an
	// InvalidConfiguration (Warning) instead: ipamconfig.Parse refuses it.
	ReasonUnknownKeys EventReason = "UnknownKeys"
)

// indexNADPool maps the NADs whose IPAM is ipkeeper to their pool's name.
const indexNADPool = "inlinepool.pool"

// Reconciler makes the IPPool of each inline network from its NADs, and
// tells on a NAD (Events) why its network cannot have the pool it
// describes. It runs on the leader with one worker, and judges overlaps
// against a live list of pools just before it makes one: so it never
// makes a pool it would refuse, and two NADs of overlapping networks
// never both get theirs.
type Reconciler struct {
	// Client reads NADs and pools from the main manager's cache and
	// writes to the API server.
	Client client.Client
	// APIReader reads from the API server.
	APIReader client.Reader
	Recorder  record.EventRecorder
}

// Reconcile looks at one NAD.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var nad nadv1.NetworkAttachmentDefinition
	if err := r.Client.Get(ctx, req.NamespacedName, &nad); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cfg, found, err := Network(&nad)
	switch {
	case err != nil:
		var ne *multus.NADError
		if errors.As(err, &ne) && ne.Field == cniVersionField {
			r.warn(&nad, ReasonInvalidConfig, "%v", err)
			return reconcile.Result{}, nil
		}
		r.warn(&nad, ReasonInvalidConfig, "%v; pods cannot attach to it (CNI error 7)", err)
		return reconcile.Result{}, nil
	case !found:
		return reconcile.Result{}, nil // another IPAM's network
	}
	if len(cfg.UnknownKeys) > 0 {
		r.Recorder.Eventf(&nad, corev1.EventTypeNormal, string(ReasonUnknownKeys),
			"network %q: ipkeeper ignores ipam keys it does not know: %s; fix or remove them", cfg.Name, strings.Join(cfg.UnknownKeyList(), ", "))
	}
	key := req.NamespacedName
	var pool ipkeeperv1alpha1.IPPool
	err = r.Client.Get(ctx, client.ObjectKey{Name: cfg.PoolName()}, &pool)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, client.ObjectKey{Name: cfg.PoolName()}, &pool)
	}
	switch {
	case err == nil:
		r.judge(ctx, &nad, cfg, &pool)
		return reconcile.Result{}, nil
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("reading IPPool %s: %w", cfg.PoolName(), err)
	case cfg.Pool != "":
		r.warn(&nad, ReasonPoolNotFound, "ipam.pool %q: IPPool %q does not exist; create it (see docs/pools.md) or fix the NAD", cfg.Pool, cfg.Pool)
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, r.make(ctx, &nad, key, cfg)
}

// make makes the pool of an inline network from its NAD, unless the
// network overlaps another inline network's.
func (r *Reconciler) make(ctx context.Context, nad *nadv1.NetworkAttachmentDefinition, key types.NamespacedName, cfg *ipamconfig.Config) error {
	var pools ipkeeperv1alpha1.IPPoolList
	if err := r.APIReader.List(ctx, &pools); err != nil {
		return fmt.Errorf("listing IPPools: %w", err)
	}
	if _, refused := FindOverlap(cfg.Name, cfg.NetworkName, cfg.Ranges, nil, pools.Items, rangesOf); refused != nil {
		r.warn(nad, ReasonNetworksOverlap, "%s; no IPPool is made for it, and pods cannot attach to it (CNI error 7)", refused.Explain(nad.Namespace, "NAD "+key.String()))
		return nil
	}
	pool := Build(cfg, key)
	err := r.Client.Create(ctx, pool)
	switch {
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("IPPool %s appeared while making it (cache behind); looking again", pool.Name)
	case apierrors.IsInvalid(err):
		// The API server's checks of a pool (its limits on excludes, say)
		// are stricter than none: a configuration a pool cannot hold.
		r.warn(nad, ReasonInvalidConfig, "network %q: its ranges cannot be stored as IPPool %q: %v", cfg.Name, pool.Name, err)
		return nil
	case err != nil:
		return fmt.Errorf("making the IPPool %s of network %q: %w", pool.Name, cfg.Name, err)
	}
	log.FromContext(ctx).Info("made the IPPool of an inline network", "pool", pool.Name, "network", cfg.Name, "nad", key.String())
	r.Recorder.Eventf(nad, corev1.EventTypeNormal, string(ReasonPoolCreated), "made IPPool %s, the definition of network %q, from this NAD's ranges", pool.Name, cfg.Name)
	return nil
}

// judge tells on a NAD whose network has a pool why pods cannot attach
// through it, if they cannot: its ranges differ from the pool's, or its
// network overlaps an older one.
func (r *Reconciler) judge(ctx context.Context, nad *nadv1.NetworkAttachmentDefinition, cfg *ipamconfig.Config, pool *ipkeeperv1alpha1.IPPool) {
	if cfg.Pool != "" {
		return
	}
	ranges, err := rangesOf(pool)
	if err != nil {
		return // the pool's own status says it is invalid
	}
	name := "NAD " + nad.Namespace + "/" + nad.Name
	if d := CheckDefinition(cfg, pool, ranges); d != nil {
		r.warn(nad, ReasonDisagrees, "%s; pods cannot attach through this NAD (CNI error 7)", d.Explain(nad.Namespace, name))
		return
	}
	var pools ipkeeperv1alpha1.IPPoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		return
	}
	if _, refused := FindOverlap(cfg.Name, pool.Annotations[ipkeeperv1alpha1.NetworkNameAnnotation], ranges, pool, pools.Items, rangesOf); refused != nil {
		r.warn(nad, ReasonNetworksOverlap, "%s; pods cannot attach to it (CNI error 7)", refused.Explain(nad.Namespace, name))
	}
}

func (r *Reconciler) warn(nad *nadv1.NetworkAttachmentDefinition, reason EventReason, format string, args ...any) {
	r.Recorder.Eventf(nad, corev1.EventTypeWarning, string(reason), format, args...)
}

func rangesOf(p *ipkeeperv1alpha1.IPPool) ([]iprange.Range, error) {
	return ipamconfig.PoolRanges(&p.Spec)
}

// cniVersionField is where a NAD's CNI version is (a plugin list's, for
// a list, which Multus passes to each plugin).
const cniVersionField = "spec.config.cniVersion"

// Network parses the ipkeeper configuration of a NAD's network; found is
// false when no plugin of the NAD uses ipkeeper as its IPAM. A NAD
// without cniVersion is refused (a *multus.NADError naming the field): no
// runtime attaches it, so its network gets no pool and its claims no
// addresses.
func Network(nad *nadv1.NetworkAttachmentDefinition) (*ipamconfig.Config, bool, error) {
	conf, found, err := multus.PluginConfig(nad, ipamconfig.PluginType)
	if err != nil || !found {
		return nil, found, err
	}
	cfg, err := ipamconfig.Parse(conf)
	if err != nil {
		return nil, true, fmt.Errorf("NetworkAttachmentDefinition %s/%s: %w", nad.Namespace, nad.Name, err)
	}
	if cfg.CNIVersion == "" {
		return nil, true, &multus.NADError{NAD: types.NamespacedName{Namespace: nad.Namespace, Name: nad.Name}, Field: cniVersionField,
			Problem: `missing: the container runtime attaches no network without it, so ipkeeper makes no IPPool for it; set it (for example "1.0.0")`}
	}
	return cfg, true, nil
}

// SetupWithManager registers the controller: a NAD is looked at when it
// changes, and when a pool of its network changes or any pool goes (a
// pool deleted by hand is made again; one gone may let an overlapping
// network have its own).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &nadv1.NetworkAttachmentDefinition{}, indexNADPool, func(o client.Object) []string {
		cfg, found, err := Network(o.(*nadv1.NetworkAttachmentDefinition))
		if err != nil || !found {
			return nil
		}
		return []string{cfg.PoolName()}
	}); err != nil {
		return fmt.Errorf("indexing NADs by pool: %w", err)
	}
	c := mgr.GetClient()
	nads := func(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
		var list nadv1.NetworkAttachmentDefinitionList
		if err := c.List(ctx, &list, opts...); err != nil {
			log.FromContext(ctx).Error(err, "listing NADs to look at again")
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return reqs
	}
	type q = workqueue.TypedRateLimitingInterface[reconcile.Request]
	add := func(q q, reqs []reconcile.Request) {
		for _, r := range reqs {
			q.Add(r)
		}
	}
	onPool := handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q q) {
			add(q, nads(ctx, client.MatchingFields{indexNADPool: e.Object.GetName()}))
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q q) {
			add(q, nads(ctx, client.MatchingFields{indexNADPool: e.ObjectNew.GetName()}))
		},
		DeleteFunc: func(ctx context.Context, _ event.TypedDeleteEvent[client.Object], q q) {
			add(q, nads(ctx))
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("inline-pools").
		WithOptions(retry.Options()).
		For(&nadv1.NetworkAttachmentDefinition{}).
		Watches(&ipkeeperv1alpha1.IPPool{}, onPool).
		Complete(r)
}
