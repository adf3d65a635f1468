// SPDX-License-Identifier: Apache-2.0

package index

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// reservationFeed is where a reservation reflector writes: straight into
// the cache. An informer would also keep every reservation it is sent as a
// decoded object, which nothing reads: the cache's compact entries are
// all the agent needs.
//
// It keeps what an informer's store gives its handlers: the UID of each
// object it delivered, so that a relist (Replace) deletes exactly the
// delivered objects it no longer lists, as an informer's DeletedFinalState
// does, and leaves alone the agent's own writes it never delivered.
//
// The agent's reflectors (one per reservationScopes scope; today one)
// share that record: with more than one, an object whose label moved it
// from one scope to another is sent as deleted by the first and added by
// the second, in either order, and only the scope that delivered it last
// may take it out of the cache.
type reservationFeed struct {
	x      *Cache
	shared *deliveries
	synced atomic.Bool
}

// deliveries records, by name, the last delivered object's UID and feed.
type deliveries struct {
	mu sync.Mutex
	m  map[string]delivery
}

type delivery struct {
	uid  types.UID
	feed *reservationFeed
}

var (
	_ toolscache.ReflectorStore    = (*reservationFeed)(nil)
	_ toolscache.TransformingStore = (*reservationFeed)(nil)
)

// newReservationFeeds returns n feeds into x sharing one record of
// deliveries.
func newReservationFeeds(x *Cache, n int) []*reservationFeed {
	shared := &deliveries{m: map[string]delivery{}}
	feeds := make([]*reservationFeed, n)
	for i := range feeds {
		feeds[i] = &reservationFeed{x: x, shared: shared}
	}
	return feeds
}

// Watch starts the reflectors that feed x (one per reservationScopes
// scope), listing through c and watching through rc (see RESTClient), until
// ctx is done. hasSynced reports whether every one has delivered its first
// list.
func (x *Cache) Watch(ctx context.Context, c client.WithWatch, rc rest.Interface) (hasSynced func() bool) {
	scopes := reservationScopes(x.node)
	feeds := newReservationFeeds(x, len(scopes))
	for i, scope := range scopes {
		r := toolscache.NewReflectorWithOptions(reservationListWatch(c, rc, x.node, scope.selector), &ipkeeperv1alpha1.IPReservation{}, feeds[i],
			toolscache.ReflectorOptions{Name: "ipreservations " + scope.name, TypeDescription: "ipkeeper.io/v1alpha1, Kind=IPReservation"})
		go r.RunWithContext(ctx)
	}
	return func() bool {
		for _, f := range feeds {
			if !f.HasSynced() {
				return false
			}
		}
		return true
	}
}

func (f *reservationFeed) Add(obj any) error    { f.deliver(obj); return nil }
func (f *reservationFeed) Update(obj any) error { f.deliver(obj); return nil }
func (f *reservationFeed) Resync() error        { return nil }

func (f *reservationFeed) Delete(obj any) error {
	r, ok := obj.(*ipkeeperv1alpha1.IPReservation)
	if !ok {
		return nil
	}
	f.shared.mu.Lock()
	if d, ok := f.shared.m[r.Name]; ok && d.feed != f {
		// Another scope delivered it since: it only left this one.
		f.shared.mu.Unlock()
		return nil
	}
	delete(f.shared.m, r.Name)
	f.shared.mu.Unlock()
	f.x.WatchedDeletion(r.Name, r.UID)
	return nil
}

func (f *reservationFeed) deliver(obj any) {
	r, ok := obj.(*ipkeeperv1alpha1.IPReservation)
	if !ok {
		return
	}
	f.shared.mu.Lock()
	f.shared.m[r.Name] = delivery{uid: r.UID, feed: f}
	f.shared.mu.Unlock()
	f.watched(r)
}

// watched puts a delivered reservation into the cache.
func (f *reservationFeed) watched(r *ipkeeperv1alpha1.IPReservation) {
	if e, ok := EntryOf(r); ok {
		f.x.Watched(e)
	}
}

// Replace takes a full list (the first one, or a relist after the watch
// was lost): every object listed is delivered, and every object this feed
// delivered before that the list lacks was deleted meanwhile (or left its
// scope).
func (f *reservationFeed) Replace(list []any, _ string) error {
	listed := make(map[string]types.UID, len(list))
	for _, obj := range list {
		if r, ok := obj.(*ipkeeperv1alpha1.IPReservation); ok {
			listed[r.Name] = r.UID
			f.watched(r)
		}
	}
	f.shared.mu.Lock()
	gone := map[string]types.UID{}
	for name, d := range f.shared.m {
		if _, ok := listed[name]; !ok && d.feed == f {
			gone[name] = d.uid
			delete(f.shared.m, name)
		}
	}
	for name, uid := range listed {
		f.shared.m[name] = delivery{uid: uid, feed: f}
	}
	f.shared.mu.Unlock()
	for name, uid := range gone {
		f.x.WatchedDeletion(name, uid)
	}
	f.synced.Store(true)
	return nil
}

// HasSynced reports whether the first list has been delivered.
func (f *reservationFeed) HasSynced() bool { return f.synced.Load() }

// Transformer trims each reservation of a streamed first list (client-go's
// WatchListClient) as it arrives: the reflector collects the whole list in
// a temporary store before Replace, and untrimmed objects there would be
// the agent's peak memory.
func (f *reservationFeed) Transformer() toolscache.TransformFunc {
	return func(obj any) (any, error) {
		if r, ok := obj.(*ipkeeperv1alpha1.IPReservation); ok {
			trimReservation(r, f.x.node)
		}
		return obj, nil
	}
}

// trimReservation drops what EntryOf does not read (managed fields are most
// of a decoded reservation) and, of a reservation that is not this node's
// pods', what the cache does not keep of it (see Cache.remote).
func trimReservation(r *ipkeeperv1alpha1.IPReservation, node string) {
	r.ObjectMeta = metav1.ObjectMeta{
		Name: r.Name, UID: r.UID, ResourceVersion: r.ResourceVersion, CreationTimestamp: r.CreationTimestamp,
	}
	if remoteTo(node, r.Spec.Node, r.Spec.Owner.Kind) {
		r.Spec.Owner = ipkeeperv1alpha1.ReservationOwner{Kind: r.Spec.Owner.Kind}
		r.Spec.InterfaceName, r.Spec.ContainerID = "", ""
	}
}

// reservationScope is one label selector of the reservations an agent watches.
type reservationScope struct{ name, selector string }

// reservationScopes are what the agent of node watches: its node's
// labelled pod reservations and every shared one, in one watch
// (naming.AgentReservationSelector): every reservation but those in other
// holders' address blocks (other nodes', labelled with their node, and
// IPAMClaims', labelled as in a block of claims), whose addresses this
// agent never hands out. One watch, not one per kind: the API server
// offers each reservation event to each watch.
func reservationScopes(node string) []reservationScope {
	return []reservationScope{{"of this node or shared", naming.AgentReservationSelector(node)}}
}

// reservationListWatch lists IPReservations matching selector through c
// and watches them through rc, decoding the watch itself
// (reservationEventDecoder); listed objects are trimmed for an agent of
// node.
func reservationListWatch(c client.WithWatch, rc rest.Interface, node, selector string) *toolscache.ListWatch {
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			l := &ipkeeperv1alpha1.IPReservationList{}
			// Limit and Continue are set twice: ListOptions copies its own
			// over Raw's, and the reflector pages its first list.
			if err := c.List(ctx, l, &client.ListOptions{Raw: &o, Limit: o.Limit, Continue: o.Continue}); err != nil {
				return nil, err
			}
			// The reflector holds every page until the last one is in.
			for i := range l.Items {
				trimReservation(&l.Items[i], node)
			}
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch, o.LabelSelector = true, selector
			body, err := rc.Get().Resource("ipreservations").VersionedParams(&o, metav1.ParameterCodec).
				SetHeader("Accept", runtime.ContentTypeJSON).Stream(ctx)
			if err != nil {
				return nil, err
			}
			return watch.NewStreamWatcher(newReservationEventDecoder(body),
				apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
		},
	}
}

// RESTClient returns the REST client of ipkeeper.io/v1alpha1 on cfg's API
// server that Watch watches through (client-go's transport cache gives it
// the connection the agent's other clients of cfg use).
func RESTClient(cfg *rest.Config, s *runtime.Scheme) (rest.Interface, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the HTTP client of the reservation watch: %w", err)
	}
	rc, err := apiutil.RESTClientForGVK(ipkeeperv1alpha1.GroupVersion.WithKind("IPReservation"), true, false, cfg, serializer.NewCodecFactory(s), hc)
	if err != nil {
		return nil, fmt.Errorf("creating the REST client of the reservation watch: %w", err)
	}
	return rc, nil
}
