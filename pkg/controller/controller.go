package controller

import (
	"context"
	"crypto/tls"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/ipkeeper/ipkeeper/pkg/apis/scheme"
	"github.com/ipkeeper/ipkeeper/pkg/certs"
	"github.com/ipkeeper/ipkeeper/pkg/claims"
	"github.com/ipkeeper/ipkeeper/pkg/gc"
	"github.com/ipkeeper/ipkeeper/pkg/kubevirt"
	podwebhook "github.com/ipkeeper/ipkeeper/pkg/webhook"
)

// New builds the controller's manager from validated options. Start it
// with mgr.Start(ctx).
func New(ctx context.Context, cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.APIQPS), o.APIBurst
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}

	byObject := map[client.Object]cache.ByObject{}
	var serverOpts webhook.Options
	if o.EnableWebhook {
		serverOpts = webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort}
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
		case CertsProvided:
			serverOpts.CertDir, serverOpts.CertName, serverOpts.KeyName = o.CertDir, "tls.crt", "tls.key"
			serverOpts.TLSOpts = []func(*tls.Config){certs.TLSOptions(o.tlsMinVersionID, nil)}
		}
	}

	mgrOpts := ctrl.Options{
		Scheme:                        s,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectID,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(o.InProcessRestart)},
		Cache: cache.Options{
			ByObject:         byObject,
			DefaultTransform: cache.TransformStripManagedFields(),
		},
	}
	var certServer *certs.Server
	if o.EnableWebhook && o.CertMode == CertsSelfManaged {
		// The cache is not running yet; GetCertificate reads it lazily.
		certServer = &certs.Server{Namespace: o.Namespace, Name: o.SecretName}
		serverOpts.TLSOpts = []func(*tls.Config){certs.TLSOptions(o.tlsMinVersionID, certServer.GetCertificate)}
	}
	if o.EnableWebhook {
		mgrOpts.WebhookServer = webhook.NewServer(serverOpts)
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if certServer != nil {
		certServer.Reader = mgr.GetClient()
	}

	var gate kubevirt.Gate = kubevirt.AlwaysOn{}
	if o.RequireGate {
		gate = kubevirt.CRGate{Reader: mgr.GetClient()}
	}
	recorder := mgr.GetEventRecorderFor("ipkeeper-controller")
	if err := claims.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	setups := []struct {
		name  string
		setup func(ctrl.Manager) error
	}{
		{"VM claims controller", (&claims.VMReconciler{Client: mgr.GetClient(), Recorder: recorder, Gate: gate, WatchKubeVirt: o.RequireGate}).SetupWithManager},
		{"VMI claims controller", (&claims.VMIReconciler{Client: mgr.GetClient(), Recorder: recorder, Gate: gate, WatchKubeVirt: o.RequireGate}).SetupWithManager},
		{"claim release controller", (&claims.ClaimReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, ResyncPeriod: o.ClaimResync}).SetupWithManager},
		{"reservation garbage collector", func(mgr ctrl.Manager) error {
			return (&gc.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), GracePeriod: o.GCGracePeriod}).SetupWithManager(ctx, mgr)
		}},
	}
	for _, s := range setups {
		if err := s.setup(mgr); err != nil {
			return nil, fmt.Errorf("setting up the %s: %w", s.name, err)
		}
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding healthz: %w", err)
	}
	if o.EnableWebhook {
		if certServer != nil {
			dns, ips := o.sans()
			rotator := &certs.Rotator{Client: mgr.GetClient(), Options: certs.Options{
				SecretNamespace: o.Namespace, SecretName: o.SecretName, WebhookConfigName: o.WebhookConfig,
				DNSNames: dns, IPAddresses: ips, CertValidity: o.CertValidity, CAValidity: o.CAValidity,
			}}
			if err := rotator.SetupWithManager(mgr); err != nil {
				return nil, fmt.Errorf("setting up webhook certificate rotation: %w", err)
			}
			if err := mgr.AddReadyzCheck("webhook-certificate", certServer.Ready); err != nil {
				return nil, fmt.Errorf("adding readyz: %w", err)
			}
		}
		mutator := &podwebhook.PodMutator{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Gate: gate, Decoder: admission.NewDecoder(s)}
		mgr.GetWebhookServer().Register(podwebhook.Path, &webhook.Admission{Handler: mutator})
		if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return nil, fmt.Errorf("adding readyz: %w", err)
		}
	} else if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding readyz: %w", err)
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
