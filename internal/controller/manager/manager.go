// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/ipkeeper/ipkeeper/internal/controller/certs"
	"github.com/ipkeeper/ipkeeper/internal/tlsconfig"
)

// newManager builds the main manager: cache, leader election, metrics,
// probes and (with the webhook) the webhook server. certServer is non-nil
// with self-managed certificates.
func newManager(cfg *rest.Config, s *runtime.Scheme, o Options) (ctrl.Manager, *certs.Server, error) {
	byObject := map[client.Object]cache.ByObject{}
	var certServer *certs.Server
	var hookServer webhook.Server
	tlsSettings := o.tlsSettings()
	if o.EnableWebhook {
		serverOpts := webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort}
		switch o.CertMode {
		case CertsSelfManaged:
			// Only the webhook's own Secret and configuration are watched,
			// which also keeps the RBAC to those two names.
			byObject[&corev1.Secret{}] = cache.ByObject{
				Namespaces: map[string]cache.Config{o.Namespace: {}},
				Field:      fields.OneTermEqualSelector("metadata.name", o.SecretName),
			}
			byObject[&admissionregistrationv1.MutatingWebhookConfiguration{}] = cache.ByObject{
				Field: fields.OneTermEqualSelector("metadata.name", o.WebhookConfig),
			}
			// The cache is not running yet; GetCertificate reads it lazily.
			certServer = &certs.Server{Namespace: o.Namespace, Name: o.SecretName}
			serverOpts.TLSOpts = []func(*tls.Config){certs.TLSOptions(tlsSettings, certServer.GetCertificate)}
		case CertsProvided:
			serverOpts.CertDir, serverOpts.CertName, serverOpts.KeyName = o.CertDir, "tls.crt", "tls.key"
			serverOpts.TLSOpts = []func(*tls.Config){certs.TLSOptions(tlsSettings, nil)}
		}
		hookServer = webhook.NewServer(serverOpts)
	}
	metricsOpts := metricsserver.Options{BindAddress: o.MetricsAddr}
	var metricsCert *certwatcher.CertWatcher
	if o.MetricsCertDir != "" {
		// The watcher is made here, not by controller-runtime from
		// CertDir: that would fall back to a self-signed certificate
		// when the files are missing, where an error is wanted.
		var err error
		if metricsCert, err = tlsconfig.WatchCertDir("metrics-cert-dir", o.MetricsCertDir); err != nil {
			return nil, nil, err
		}
		metricsOpts.SecureServing = true
		metricsOpts.TLSOpts = []func(*tls.Config){certs.TLSOptions(tlsSettings, metricsCert.GetCertificate)}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        s,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.ProfilingAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectID,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
		// Controller names are fixed and each is built once per manager;
		// the KubeVirt part is rebuilt when its CRDs come back, and tests
		// build the controller more than once per process.
		Controller:    config.Controller{SkipNameValidation: ptr.To(true)},
		WebhookServer: hookServer,
		Cache: cache.Options{
			ByObject:         byObject,
			DefaultTransform: cache.TransformStripManagedFields(),
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the manager: %w", err)
	}
	if certServer != nil {
		certServer.Reader = mgr.GetClient()
	}
	if metricsCert != nil {
		// Reloads the files when they change; runs on every replica.
		if err := mgr.Add(metricsCert); err != nil {
			return nil, nil, fmt.Errorf("adding the metrics certificate watcher: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, nil, fmt.Errorf("adding healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("caches", cachesSynced(mgr)); err != nil {
		return nil, nil, fmt.Errorf("adding readyz: %w", err)
	}
	return mgr, certServer, nil
}

// cachesSynced is ready once the manager's informers have synced.
func cachesSynced(mgr ctrl.Manager) healthz.Checker {
	return func(*http.Request) error {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return fmt.Errorf("caches not synced yet")
		}
		return nil
	}
}
