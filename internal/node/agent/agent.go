// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto/cniserver"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/nodeblocks"
	"github.com/ipkeeper/ipkeeper/internal/tlsconfig"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	ipkscheme "github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
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
	// ProfilingAddr, when set, serves Go's profiles (/debug/pprof/) there,
	// plain HTTP and unauthenticated: for a loopback address while
	// investigating, never by default.
	ProfilingAddr string
	// MetricsCertDir, when set, serves /metrics over TLS with tls.crt and
	// tls.key from this directory, reloaded when they change, with
	// MetricsTLS's minimum version (TLS 1.3 when zero), cipher suites,
	// curves and ALPN protocols (HTTP/1.1 only unless EnableHTTP2).
	// The probes stay plain HTTP, for the kubelet.
	MetricsCertDir string
	MetricsTLS     tlsconfig.Server
	// Registry receives the agent's metrics; a new one when nil.
	Registry *prometheus.Registry
	// Logger for structured logs; slog's default logger when unset.
	Logger logr.Logger
	// ClaimWaitTimeout bounds how long an ADD waits for the IPAMClaim it
	// references to exist and have addresses, which ipkeeper-controller
	// records (default 30s).
	ClaimWaitTimeout time.Duration
	// PoolWaitTimeout bounds how long an ADD of an inline network waits for
	// ipkeeper-controller to make its IPPool (default 10s).
	PoolWaitTimeout time.Duration
	// CNIGCMinAge spares, from a CNI GC, reservations this agent wrote
	// less than this long ago: the runtime builds its list of valid
	// attachments before it calls, so one set up meanwhile may be missing
	// from it. Negative means none are spared; zero means the default (1m).
	CNIGCMinAge time.Duration
	// MultusDefaultNetworks is the number of Multus defaultNetworks (from
	// Multus' configuration), needed to tell which networks annotation
	// element a positional net<N> interface is; negative when unknown, and
	// then an attachment that only its position could identify is refused.
	MultusDefaultNetworks int
	// MultusSystemNamespaces are Multus' systemNamespaces, whose pods get no
	// default networks; nil means Multus' default, kube-system.
	MultusSystemNamespaces []string
	// WebhookConfigurationName is ipkeeper's MutatingWebhookConfiguration:
	// while it has rules, a virt-launcher interface of a persistent-IP
	// network without a claim reference is refused (code 11); "" turns
	// the check off.
	WebhookConfigurationName string
}

// Agent serves CNI requests for one node. It implements cniserver.Handler.
type Agent struct {
	opts  Options
	log   logr.Logger
	cache cache.Cache
	live  client.WithWatch
	// reservationREST is a REST client of IPReservations, whose watch the
	// cache decodes itself (package index).
	reservationREST rest.Interface
	store           Store
	claims          ClaimStore
	// poolStore reads IPPools; parsed caches their parsed ranges.
	poolStore PoolStore
	parsed    parsedPools
	pods      *podLookup
	// reservations is the cache of the reservations this node's agent
	// sees; conflicts live there too.
	reservations *index.Cache
	// blocks are the address blocks this node holds, where its ADDs find
	// addresses first. Without them (unit tests of allocation) addresses
	// come from the whole range.
	blocks *nodeblocks.Node
	// engine is the search over both (newEngine).
	engine *ipam.Engine
	locks  *keyLocks
	// uncertain remembers creates whose response was lost.
	uncertain *uncertainCreates
	metrics   *metrics
	// metricsCert serves and reloads MetricsCertDir's certificate.
	metricsCert *certwatcher.CertWatcher
	ready       atomic.Bool // caches synced
	serving     atomic.Bool // socket listening
	// waiting says what start-up waits for while not ready, for /readyz,
	// STATUS and the errors of requests that arrive meanwhile.
	waiting atomic.Pointer[string]

	// webhook remembers whether ipkeeper's pod webhook is in force.
	webhook webhookScope

	// ignoredNoted holds, per network, the ignored and unknown ipam keys
	// last logged (noteIgnoredKeys), so they are logged once, not at every ADD.
	ignoredNoted sync.Map
}

var _ cniserver.Handler = (*Agent)(nil)

// entry is a reservation as the agent's cache holds it.
type entry = index.Entry

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
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.FromSlogHandler(slog.Default().Handler())
	}
	if opts.ClaimWaitTimeout <= 0 {
		opts.ClaimWaitTimeout = 30 * time.Second
	}
	if opts.PoolWaitTimeout <= 0 {
		opts.PoolWaitTimeout = 10 * time.Second
	}
	if opts.CNIGCMinAge == 0 {
		opts.CNIGCMinAge = time.Minute
	}
	var metricsCert *certwatcher.CertWatcher
	if opts.MetricsCertDir != "" {
		// Read now, so that missing or broken files stop the start.
		var err error
		if metricsCert, err = tlsconfig.WatchCertDir("metrics-cert-dir", opts.MetricsCertDir); err != nil {
			return nil, err
		}
	}
	s, err := ipkscheme.New()
	if err != nil {
		return nil, err
	}
	live, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("creating API client: %w", err)
	}
	reservationREST, err := index.RESTClient(cfg, s)
	if err != nil {
		return nil, err
	}
	// IPPools and NADs get their transform as the default rather than from
	// ByObject: a ByObject entry is resolved against the API server here,
	// and would fail New before the CRD is installed (start waits for it).
	// IPReservations have no informer: reflectors feed the agent's own
	// cache (package index).
	c, err := cache.New(cfg, cache.Options{
		Scheme: s,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {
				Field:     fields.OneTermEqualSelector("spec.nodeName", opts.NodeName),
				Transform: trimPod,
			},
		},
		DefaultTransform: trimCached,
	})
	if err != nil {
		return nil, fmt.Errorf("creating caches: %w", err)
	}
	a := &Agent{
		opts:            opts,
		log:             opts.Logger.WithValues("node", opts.NodeName),
		cache:           c,
		live:            live,
		reservationREST: reservationREST,
		pods:            &podLookup{cached: c, live: live, node: opts.NodeName},
		reservations:    index.New(opts.NodeName),
		locks:           newKeyLocks(),
		metricsCert:     metricsCert,

		uncertain: newUncertainCreates(),
	}
	a.setWaiting("caches not synced yet")
	if a.metrics, err = newMetrics(opts.Registry, a.reservations.Len, a.Ready); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	a.store = &apiStore{c: live, rest: reservationREST, metrics: a.metrics}
	a.blocks = nodeblocks.New(live, opts.NodeName, nodeblocks.Hooks{
		Read:   func(verb string) { a.metrics.apiReads.WithLabelValues(verb).Inc() },
		Write:  func(verb string) { a.metrics.apiWrites.WithLabelValues(verb).Inc() },
		Took:   a.metrics.blocksTaken.Inc,
		Failed: ipam.LogBlockErrors(a.log, "cannot take an address block; borrowing addresses instead (every agent then watches their reservations)"),
	})
	a.engine = a.newEngine()
	a.pods.metrics = a.metrics
	a.claims = &apiClaimStore{c: live, metrics: a.metrics}
	a.poolStore = &apiPoolStore{cached: c, live: live, metrics: a.metrics}
	return a, nil
}

// Run starts the caches, installs the CNI binary, serves the socket (and
// metrics and probes) and blocks until ctx is done.
//
// The socket is served from the start so that the plugin's STATUS, and
// requests that come early, learn why the agent is not ready (for example
// a missing CRD) instead of finding no agent; requests other than STATUS
// are refused with "try again later" until the caches have synced.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	if a.opts.ProbeAddr != "" {
		go func() { errc <- serveHTTP(ctx, a.opts.ProbeAddr, a.probeHandler(), nil) }()
	}
	if a.opts.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(a.opts.Registry, promhttp.HandlerOpts{}))
		var tlsConfig *tls.Config
		if a.metricsCert != nil {
			go func() {
				// Without the watch the loaded certificate is still
				// served, until it expires: say so, do not stop.
				if err := a.metricsCert.Start(ctx); err != nil {
					a.log.Error(err, "watching the metrics certificate for changes", "dir", a.opts.MetricsCertDir)
				}
			}()
			tlsConfig = a.opts.MetricsTLS.Config(a.metricsCert.GetCertificate)
		}
		go func() { errc <- serveHTTP(ctx, a.opts.MetricsAddr, mux, tlsConfig) }()
	}
	if a.opts.ProfilingAddr != "" {
		go func() { errc <- serveHTTP(ctx, a.opts.ProfilingAddr, profilingHandler(), nil) }()
	}
	// The plugin is installed at once: until the agent is ready it answers
	// with the reason, which says more than a plugin missing from the node.
	if a.opts.CNIBinDir != "" {
		dst, err := installPlugin(a.opts.PluginSource, a.opts.CNIBinDir)
		if err != nil {
			return err
		}
		a.log.Info("installed the CNI plugin", "path", dst)
	}
	ln, err := cniserver.Listen(a.opts.SocketPath)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", a.opts.SocketPath, err)
	}
	a.serving.Store(true)
	go func() { errc <- cniserver.ServeListener(ctx, ln, untilReady{a}, a.log) }()

	started := make(chan error, 1)
	go func() { started <- a.start(ctx) }()
	select {
	case err := <-started:
		if err != nil && ctx.Err() != nil {
			// Stopped while starting (e.g. still waiting for the CRD): a
			// clean shutdown, not a failure.
			a.serving.Store(false)
			return <-errc
		}
		if err != nil {
			return err
		}
	case err := <-errc:
		return err
	}
	a.ready.Store(true)
	a.waiting.Store(nil)
	a.log.Info("serving CNI requests", "socket", a.opts.SocketPath, "reservations", a.reservations.Len())
	select {
	case <-ctx.Done():
		a.serving.Store(false)
		// Let the socket server drain; it returns once in-flight requests finish.
		return <-errc
	case err := <-errc:
		return err
	}
}

// start runs the reflectors and informers and waits until the reservation
// cache holds every reservation the agent watches.
func (a *Agent) start(ctx context.Context) error {
	if err := waitForKind(ctx, a, reservationCRD, func() error {
		_, err := a.live.IsObjectNamespaced(&ipkeeperv1alpha1.IPReservation{})
		return err
	}); err != nil {
		return err
	}
	// One reflector: this node's labelled pod reservations and the
	// shared ones; other nodes' labelled ones lie in their blocks.
	reservationsSynced := a.reservations.Watch(ctx, a.live, a.reservationREST)
	// Its own node's blocks only: which blocks others hold is read live
	// when it takes one, so a block taken is not sent to every agent.
	if err := waitForKind(ctx, a, blockCRD, func() error {
		_, err := a.live.IsObjectNamespaced(&ipkeeperv1alpha1.IPBlock{})
		return err
	}); err != nil {
		return err
	}
	blocksSynced := a.blocks.Watch(ctx, a.live)
	if err := waitForKind(ctx, a, poolCRD, func() error {
		_, err := a.cache.GetInformer(ctx, &ipkeeperv1alpha1.IPPool{})
		return err
	}); err != nil {
		return err
	}
	// NADs say whether a claim-backed attachment's network keeps its
	// addresses: cached, so a VM start costs no read of its NAD.
	if err := waitForKind(ctx, a, nadCRD, func() error {
		_, err := a.cache.GetInformer(ctx, &nadv1.NetworkAttachmentDefinition{})
		return err
	}); err != nil {
		return err
	}
	if _, err := a.cache.GetInformer(ctx, &corev1.Pod{}); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	go func() {
		if err := a.cache.Start(ctx); err != nil {
			a.log.Error(err, "caches stopped")
		}
	}()
	start := time.Now()
	a.setWaiting("caches not synced yet")
	synced := func() bool {
		return blocksSynced() && reservationsSynced()
	}
	if !a.cache.WaitForCacheSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), synced) {
		return fmt.Errorf("caches did not sync: %w", context.Cause(ctx))
	}
	a.log.Info("caches synced", "reservations", a.reservations.Len(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// The CRDs the agent cannot work without, by kind.
var (
	reservationCRD = crdName{"IPReservation", "ipreservations.ipkeeper.io"}
	poolCRD        = crdName{"IPPool", "ippools.ipkeeper.io"}
	blockCRD       = crdName{"IPBlock", "ipblocks.ipkeeper.io"}
	nadCRD         = crdName{"NetworkAttachmentDefinition", "network-attachment-definitions.k8s.cni.cncf.io"}
)

type crdName struct{ kind, name string }

func (c crdName) String() string { return "the " + c.kind + " CRD (" + c.name + ")" }

// missingCRD is the not-ready reason while one of ipkeeper's CRDs is absent.
func missingCRD(crd crdName) string {
	return crd.String() + " is not installed; " +
		"install ipkeeper (kubectl apply --server-side -k manifests/, or -k manifests/overlays/existing-crds/ where another component owns the IPAMClaim CRD; see docs/install.md) and the agent becomes ready without a restart"
}

// CRD polling backs off to crdPollMax: every agent of the cluster polls
// discovery while the CRD is missing.
const (
	crdPollMin = 500 * time.Millisecond
	crdPollMax = 10 * time.Second
)

// waitForKind returns once try (a call that needs the kind of crd) no
// longer fails for want of its CRD: an agent may start before it, e.g.
// when a DaemonSet and the CRDs are applied together, or after an upgrade
// that added a CRD the agent's DaemonSet was rolled before.
func waitForKind(ctx context.Context, a *Agent, crd crdName, try func() error) error {
	var lastLog time.Time
	delay := crdPollMin
	for {
		err := try()
		if err == nil {
			if !lastLog.IsZero() {
				a.log.Info("the "+crd.kind+" CRD is installed; starting", "crd", crd.name)
			}
			return nil
		}
		if !meta.IsNoMatchError(err) {
			return fmt.Errorf("starting on %s: %w", crd, err)
		}
		a.setWaiting(missingCRD(crd))
		if time.Since(lastLog) >= time.Minute {
			a.log.Info("waiting for the "+crd.kind+" CRD: "+missingCRD(crd), "crd", crd.name)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", crd, context.Cause(ctx))
		case <-time.After(delay):
		}
		delay = min(2*delay, crdPollMax)
	}
}

// setWaiting records what start-up waits for.
func (a *Agent) setWaiting(reason string) { a.waiting.Store(&reason) }

// notReady returns why the agent does not serve yet, or nil when it does.
func (a *Agent) notReady() error {
	if a.Ready() {
		return nil
	}
	why := "not serving"
	if w := a.waiting.Load(); w != nil {
		why = *w
	}
	return fmt.Errorf("ipkeeper-agent on node %s is not ready: %s", a.opts.NodeName, why)
}

// untilReady refuses CNI requests until the agent is ready: before its
// caches have synced the reservation cache is incomplete, so an ADD could pick a held
// address and a DEL could miss what it must release. They fail with "try
// again later"; STATUS says why the plugin is not available.
type untilReady struct{ a *Agent }

func (u untilReady) Add(ctx context.Context, req *cniproto.Request) (*types100.Result, error) {
	if err := u.a.notReady(); err != nil {
		return nil, cniError(codeTryAgainLater, err)
	}
	return u.a.Add(ctx, req)
}

func (u untilReady) Del(ctx context.Context, req *cniproto.Request) error {
	if err := u.a.notReady(); err != nil {
		return cniError(codeTryAgainLater, err)
	}
	return u.a.Del(ctx, req)
}

func (u untilReady) Check(ctx context.Context, req *cniproto.Request) error {
	if err := u.a.notReady(); err != nil {
		return cniError(codeTryAgainLater, err)
	}
	return u.a.Check(ctx, req)
}

func (u untilReady) GC(ctx context.Context, req *cniproto.Request) error {
	if err := u.a.notReady(); err != nil {
		return cniError(codeTryAgainLater, err)
	}
	return u.a.GC(ctx, req)
}

// Status says why the agent is not ready; the server reports it as
// "plugin not available".
func (u untilReady) Status(ctx context.Context) error { return u.a.Status(ctx) }

// Ready reports whether the agent serves CNI requests.
func (a *Agent) Ready() bool { return a.ready.Load() && a.serving.Load() }

func (a *Agent) probeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.notReady(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// serveHTTP serves h on addr until ctx is done: over TLS with tlsConfig,
// plain HTTP when it is nil.
// profilingHandler serves net/http/pprof's handlers under /debug/pprof/.
func profilingHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

func serveHTTP(ctx context.Context, addr string, h http.Handler, tlsConfig *tls.Config) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
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
