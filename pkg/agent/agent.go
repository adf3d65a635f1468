package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	ipkscheme "github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
	"github.com/ipkeeper/ipkeeper/pkg/cniproto"
)

// Options configure an Agent.
type Options struct {
	// NodeName is the node this agent serves; pods are cached for it only.
	NodeName string
	// SocketPath is the unix socket the CNI shim talks to.
	SocketPath string
	// CNIBinDir, when set, receives a copy of PluginSource named "ipkeeper".
	CNIBinDir    string
	PluginSource string
	// MetricsAddr and ProbeAddr, when set, serve /metrics and /healthz, /readyz.
	MetricsAddr string
	ProbeAddr   string
	// Registry receives the agent's metrics; a new one when nil.
	Registry *prometheus.Registry
	// Logger for structured logs; slog.Default() when nil.
	Logger *slog.Logger
	// ClaimWaitTimeout bounds how long an ADD waits for the IPAMClaim it
	// references to be created (default 30s).
	ClaimWaitTimeout time.Duration
	// MultusDefaultNetworks is the number of Multus defaultNetworks (from
	// Multus' configuration), needed to tell which networks annotation
	// element a positional net<N> interface is; negative when unknown, and
	// then an attachment that only its position could identify is refused.
	MultusDefaultNetworks int
	// MultusSystemNamespaces are Multus' systemNamespaces, whose pods get no
	// default networks; nil means Multus' default, kube-system.
	MultusSystemNamespaces []string
}

// Agent serves CNI requests for one node. It implements cniproto.Handler.
type Agent struct {
	opts   Options
	log    *slog.Logger
	cache  cache.Cache
	store  Store
	claims ClaimStore
	pods   *podLookup
	idx    *index
	locks  *keyLocks
	// uncertain remembers creates whose response was lost.
	uncertain *uncertainCreates
	metrics   *metrics
	ready     atomic.Bool // caches synced
	serving   atomic.Bool // socket listening
}

var _ cniproto.Handler = (*Agent)(nil)

// New builds an agent talking to the API server of cfg. Nothing runs until Run.
func New(cfg *rest.Config, opts Options) (*Agent, error) {
	if opts.NodeName == "" {
		return nil, errors.New("node name is required (--node-name, usually from the downward API spec.nodeName)")
	}
	if opts.SocketPath == "" {
		opts.SocketPath = cniproto.DefaultSocketPath
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ClaimWaitTimeout <= 0 {
		opts.ClaimWaitTimeout = 30 * time.Second
	}
	s, err := ipkscheme.New()
	if err != nil {
		return nil, err
	}
	live, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("creating API client: %w", err)
	}
	c, err := cache.New(cfg, cache.Options{
		Scheme: s,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {
				Field:     fields.OneTermEqualSelector("spec.nodeName", opts.NodeName),
				Transform: trimPod,
			},
			&ipkeeperv1alpha1.IPReservation{}: {Transform: trimReservation},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating caches: %w", err)
	}
	a := &Agent{
		opts:  opts,
		log:   opts.Logger.With("node", opts.NodeName),
		cache: c,
		pods:  &podLookup{cached: c, live: live, node: opts.NodeName},
		idx:   newIndex(),
		locks: newKeyLocks(),

		uncertain: newUncertainCreates(),
	}
	if a.metrics, err = newMetrics(opts.Registry, a.idx.len); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	a.store = &apiStore{c: live, metrics: a.metrics}
	a.pods.metrics = a.metrics
	a.claims = &apiClaimStore{c: live, metrics: a.metrics}
	return a, nil
}

// Run starts the caches, installs the CNI binary, serves the socket (and
// metrics and probes) and blocks until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	if a.opts.ProbeAddr != "" {
		go func() { errc <- serveHTTP(ctx, a.opts.ProbeAddr, a.probeHandler()) }()
	}
	if a.opts.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(a.opts.Registry, promhttp.HandlerOpts{}))
		go func() { errc <- serveHTTP(ctx, a.opts.MetricsAddr, mux) }()
	}
	if err := a.start(ctx); err != nil {
		return err
	}
	if a.opts.CNIBinDir != "" {
		dst, err := installPlugin(a.opts.PluginSource, a.opts.CNIBinDir)
		if err != nil {
			return err
		}
		a.log.Info("installed the CNI plugin", "path", dst)
	}
	ln, err := cniproto.Listen(a.opts.SocketPath)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", a.opts.SocketPath, err)
	}
	a.serving.Store(true)
	a.log.Info("serving CNI requests", "socket", a.opts.SocketPath, "reservations", a.idx.len())
	go func() { errc <- cniproto.ServeListener(ctx, ln, cniproto.NewHTTPHandler(a, a.log)) }()
	select {
	case <-ctx.Done():
		a.serving.Store(false)
		// Let the socket server drain; it returns once in-flight requests finish.
		return <-errc
	case err := <-errc:
		return err
	}
}

// start runs the informers and waits until the index holds every reservation.
func (a *Agent) start(ctx context.Context) error {
	resInf, err := a.cache.GetInformer(ctx, &ipkeeperv1alpha1.IPReservation{})
	if err != nil {
		return fmt.Errorf("reservation informer: %w", err)
	}
	reg, err := resInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    a.onReservation,
		UpdateFunc: func(_, obj any) { a.onReservation(obj) },
		DeleteFunc: a.onReservationDeleted,
	})
	if err != nil {
		return fmt.Errorf("reservation informer handler: %w", err)
	}
	if _, err := a.cache.GetInformer(ctx, &corev1.Pod{}); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	go func() {
		if err := a.cache.Start(ctx); err != nil {
			a.log.Error("caches stopped", "error", err)
		}
	}()
	start := time.Now()
	if !a.cache.WaitForCacheSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return fmt.Errorf("caches did not sync: %w", context.Cause(ctx))
	}
	a.ready.Store(true)
	a.log.Info("caches synced", "reservations", a.idx.len(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func (a *Agent) onReservation(obj any) {
	if r, ok := obj.(*ipkeeperv1alpha1.IPReservation); ok {
		if e, ok := entryOf(r); ok {
			a.idx.observe(e)
		}
	}
}

func (a *Agent) onReservationDeleted(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if r, ok := obj.(*ipkeeperv1alpha1.IPReservation); ok {
		a.idx.remove(r.Name, r.UID)
	}
}

// Ready reports whether the agent serves CNI requests.
func (a *Agent) Ready() bool { return a.ready.Load() && a.serving.Load() }

func (a *Agent) probeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.Ready() {
			http.Error(w, "caches not synced or socket not serving", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

func serveHTTP(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving %s: %w", addr, err)
	}
	return nil
}
