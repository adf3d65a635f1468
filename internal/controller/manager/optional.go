// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Modes of an optional API's support, for readiness.
const (
	modeUnknown  int32 = iota // not looked yet, or the last look failed
	modeAbsent                // CRDs not installed
	modeStarting              // installed; caches syncing
	modeActive                // running
)

// apiResources are resources of one group version, by their plural names.
type apiResources struct {
	groupVersion string
	resources    []string
}

// apiFeature is what ipkeeper does with an optional API (KubeVirt, Cluster
// API) while the API server serves it.
type apiFeature interface {
	// setup wires the feature into child, its own manager; served tells
	// which of the optional resources are served ("group/version/resource").
	// It returns what to run once child's caches have synced (or nil).
	setup(ctx context.Context, child ctrl.Manager, served map[string]bool) (func(), error)
	// stopped is called when child stops, on purpose or not.
	stopped()
	// absent is called on every look that finds the API not served.
	absent(ctx context.Context)
}

// apiSpec says which optional API a runner follows and what it runs.
type apiSpec struct {
	// name is the API as logs say it: "KubeVirt", "Cluster API".
	name string
	// what says what the support runs, for the log line that starts it.
	what     string
	required []apiResources
	optional []apiResources
	interval time.Duration
	gauge    prometheus.Gauge
	feature  apiFeature
}

// optionalAPI runs on every replica and follows discovery: while every
// required resource is served it runs a manager of its own for the
// feature, stops it when one goes, and restarts it when the set of
// optional resources served changes (their watches are wired at setup).
type optionalAPI struct {
	apiSpec
	cfg    *rest.Config
	scheme *runtime.Scheme
	main   ctrl.Manager
	disco  discovery.DiscoveryInterface
	mode   atomic.Int32
}

func newOptionalAPI(cfg *rest.Config, s *runtime.Scheme, main ctrl.Manager, spec apiSpec) (*optionalAPI, error) {
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the discovery client: %w", err)
	}
	return &optionalAPI{apiSpec: spec, cfg: cfg, scheme: s, main: main, disco: disco}, nil
}

// add registers a with the main manager, with its readiness check.
func (a *optionalAPI) add(check string) error {
	if err := a.main.Add(a); err != nil {
		return fmt.Errorf("adding %s support: %w", a.name, err)
	}
	if err := a.main.AddReadyzCheck(check, a.ready); err != nil {
		return fmt.Errorf("adding readyz: %w", err)
	}
	return nil
}

// NeedLeaderElection: every replica follows the CRDs (the webhook needs
// its caches everywhere); controllers inside wait for leadership themselves.
func (a *optionalAPI) NeedLeaderElection() bool { return false }

func (a *optionalAPI) ready(*http.Request) error {
	switch a.mode.Load() {
	case modeAbsent, modeActive:
		return nil
	case modeStarting:
		return fmt.Errorf("%s support: caches not synced yet", a.name)
	}
	return fmt.Errorf("%s support: not yet known whether the %s CRDs are installed", a.name, a.name)
}

// Start follows the CRDs until ctx ends.
func (a *optionalAPI) Start(ctx context.Context) error {
	logger := a.main.GetLogger().WithName(strings.ToLower(strings.ReplaceAll(a.name, " ", "-")) + "-support")
	var run *childRun
	stop := func() {
		run.stop()
		run = nil
		a.feature.stopped()
	}
	defer func() {
		if run != nil {
			stop()
		}
	}()
	for {
		installed, served, err := a.look()
		switch {
		case err != nil:
			logger.Error(err, fmt.Sprintf("checking whether the %s CRDs are installed; keeping the current mode", a.name))
		case installed && run != nil && !resourceSet(served).equal(run.served):
			logger.Info(fmt.Sprintf("%s resources changed; restarting %s support", a.name, a.name), "served", resourceSet(served).keys())
			stop()
			fallthrough
		case installed && run == nil:
			logger.Info(fmt.Sprintf("%s CRDs found; starting %s support (%s)", a.name, a.name, a.what))
			a.mode.Store(modeStarting)
			if run, err = a.startChild(ctx, served); err != nil {
				logger.Error(err, fmt.Sprintf("starting %s support; retrying", a.name))
				a.mode.Store(modeUnknown)
			}
		case !installed && run != nil:
			logger.Info(fmt.Sprintf("%s CRDs removed; stopping %s support", a.name, a.name))
			stop()
			a.gauge.Set(0)
			a.mode.Store(modeAbsent)
			a.feature.absent(ctx)
		case !installed:
			if a.mode.Swap(modeAbsent) != modeAbsent {
				logger.Info(fmt.Sprintf("%s CRDs not installed; running without %s support", a.name, a.name))
			}
			a.gauge.Set(0)
			a.feature.absent(ctx)
		}
		var exited <-chan error
		if run != nil {
			exited = run.done
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-exited:
			logger.Error(err, fmt.Sprintf("%s support stopped unexpectedly; restarting it", a.name))
			run.cancel()
			run = nil
			a.feature.stopped()
			a.mode.Store(modeUnknown)
			a.gauge.Set(0)
		case <-time.After(a.interval):
		}
	}
}

// look reports whether every required resource is served, and which
// optional ones are.
func (a *optionalAPI) look() (installed bool, served map[string]bool, err error) {
	for _, want := range a.required {
		have, err := a.servedOf(want)
		if err != nil || len(have) < len(want.resources) {
			return false, nil, err
		}
	}
	served = map[string]bool{}
	for _, want := range a.optional {
		have, err := a.servedOf(want)
		if err != nil {
			return false, nil, err
		}
		for r := range have {
			served[want.groupVersion+"/"+r] = true
		}
	}
	return true, served, nil
}

// servedOf returns which of want's resources the API server serves.
func (a *optionalAPI) servedOf(want apiResources) (map[string]bool, error) {
	list, err := a.disco.ServerResourcesForGroupVersion(want.groupVersion)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discovering %s: %w", want.groupVersion, err)
	}
	have := map[string]bool{}
	for _, r := range list.APIResources {
		if slices.Contains(want.resources, r.Name) {
			have[r.Name] = true
		}
	}
	return have, nil
}

type childRun struct {
	served map[string]bool
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

// startChild builds and starts the feature's manager; it marks support
// active once its caches have synced.
func (a *optionalAPI) startChild(ctx context.Context, served map[string]bool) (*childRun, error) {
	child, err := ctrl.NewManager(a.cfg, ctrl.Options{
		Scheme:                 a.scheme,
		Logger:                 a.main.GetLogger().WithName(strings.ToLower(strings.ReplaceAll(a.name, " ", "-"))),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		// IPAMClaims come from the main manager's cache (sharedcache.go).
		NewCache: newCacheSharedWith(a.main.GetCache()),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the %s manager: %w", a.name, err)
	}
	onSynced, err := a.feature.setup(ctx, child, served)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	run := &childRun{served: served, cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := child.Start(runCtx)
		if runCtx.Err() == nil && err == nil {
			err = fmt.Errorf("the %s manager returned", a.name)
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
		if onSynced != nil {
			onSynced()
		}
		if a.mode.CompareAndSwap(modeStarting, modeActive) {
			a.gauge.Set(1)
			child.GetLogger().Info(a.name + " support running")
		}
	}()
	return run, nil
}

// resourceSet is a set of served resources ("group/version/resource").
type resourceSet map[string]bool

func (m resourceSet) equal(o map[string]bool) bool {
	if len(m) != len(o) {
		return false
	}
	for k := range m {
		if !o[k] {
			return false
		}
	}
	return true
}

func (m resourceSet) keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// leaderGated is a feature's manager as its leader-only controllers see
// it: what they add starts once the main manager leads. (The feature's
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
