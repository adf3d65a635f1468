// SPDX-License-Identifier: Apache-2.0

// Package claimmaker decides which controller makes KubeVirt VMs' IPAMClaims
// and the claim references of their launcher pods: ipkeeper-controller, or
// another IPAMClaims controller already running in the cluster, such as
// KubeVirt's ipam-extensions ("kubevirt-ipam-controller", which the network
// addons operator and OpenShift Virtualization deploy). Two makers on the
// same claims would fight: both use the finalizer kubevirt.io/persistent-ipam,
// both webhooks set ipam-claim-reference, and they name claims differently
// for names that are not object names. So exactly one makes them; ipkeeper
// fills the addresses of either's claims, applies its who-may-use rule and
// releases their reservations when they go.
package claimmaker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Setting is the --claims-controller value.
type Setting string

// The settings.
const (
	// Auto: ipkeeper makes the claims unless another IPAMClaims controller's
	// webhook is registered (ExtensionsWebhook), re-checked while running.
	Auto Setting = "auto"
	// Ipkeeper: ipkeeper-controller makes them, whatever else runs.
	Ipkeeper Setting = "ipkeeper"
	// External: another controller makes them; ipkeeper never does.
	External Setting = "external"
)

// ParseSetting reads a --claims-controller value.
func ParseSetting(s string) (Setting, error) {
	switch v := Setting(s); v {
	case Auto, Ipkeeper, External:
		return v, nil
	}
	return "", fmt.Errorf("--claims-controller=%q: want auto, ipkeeper or external", s)
}

// ExtensionsWebhook is the name ipam-extensions gives its pod webhook
// (webhooks[].name of its MutatingWebhookConfiguration, whatever the
// configuration's own name, which differs between its install.yaml and the
// network addons operator's).
const ExtensionsWebhook = "ipam-claims.k8s.cni.cncf.io"

// EventReason is the reason of the Event told when the maker changes.
type EventReason string

// ReasonClaimsMaker is on the MutatingWebhookConfiguration of the other
// controller when ipkeeper starts or stops leaving claims to it.
const ReasonClaimsMaker EventReason = "IPAMClaimsMaker"

var makerGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "ipkeeper_controller_claims_maker",
	Help: "1 for the controller that makes KubeVirt VMs' IPAMClaims and launcher claim references: maker=\"ipkeeper\" (ipkeeper-controller) or maker=\"external\" (another controller, e.g. ipam-extensions); 0 for the other.",
}, []string{"maker"})

// Collectors are this package's metrics. The binary registers them
// (manager.RegisterMetrics): nothing registers on import.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{makerGauge}
}

// Maker tells, at any moment, whether another controller makes the claims.
// With Auto it lists MutatingWebhookConfigurations every interval (through
// a live reader: the manager's cache watches only ipkeeper's own).
type Maker struct {
	setting  Setting
	reader   client.Reader
	recorder record.EventRecorder
	interval time.Duration

	// found is the MutatingWebhookConfiguration holding ExtensionsWebhook
	// ("" when there is none), as last seen.
	found atomic.Pointer[string]

	mu        sync.Mutex
	listeners []chan<- event.GenericEvent
}

// New returns the maker for setting; with Auto it looks once now, so that
// nothing acts on claims before the answer is known.
func New(ctx context.Context, setting Setting, reader client.Reader, recorder record.EventRecorder, interval time.Duration) (*Maker, error) {
	m := &Maker{setting: setting, reader: reader, recorder: recorder, interval: interval}
	none := ""
	m.found.Store(&none)
	if setting == Auto {
		config, err := m.detect(ctx)
		if err != nil {
			return nil, err
		}
		m.found.Store(&config)
	}
	m.publish(ctx, "")
	return m, nil
}

// External reports whether another controller makes the claims now.
func (m *Maker) External() bool {
	switch m.setting {
	case External:
		return true
	case Ipkeeper:
		return false
	}
	return *m.found.Load() != ""
}

// Name says who makes the claims, for logs, events and messages.
func (m *Maker) Name() string {
	switch {
	case m.setting == External:
		return "another IPAMClaims controller (--claims-controller=external)"
	case m.External():
		return fmt.Sprintf("another IPAMClaims controller (webhook %s of MutatingWebhookConfiguration %s, as ipam-extensions registers it)", ExtensionsWebhook, *m.found.Load())
	}
	return "ipkeeper-controller"
}

// Listen returns a channel that gets one event each time the maker
// changes, for a controller that must look at every VM again then.
func (m *Maker) Listen() <-chan event.GenericEvent {
	ch := make(chan event.GenericEvent, 1)
	m.mu.Lock()
	m.listeners = append(m.listeners, ch)
	m.mu.Unlock()
	return ch
}

// NeedLeaderElection is false: every replica serves the webhook.
func (m *Maker) NeedLeaderElection() bool { return false }

// Start looks again every interval (Auto only) until ctx ends.
func (m *Maker) Start(ctx context.Context) error {
	if m.setting != Auto || m.interval <= 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		config, err := m.detect(ctx)
		if err != nil {
			// Keep the last answer: a failed list says nothing new.
			log.FromContext(ctx).Error(err, "checking for another IPAMClaims controller")
			continue
		}
		if prev := *m.found.Swap(&config); prev != config {
			m.publish(ctx, prev)
		}
	}
}

// detect looks for the other controller's webhook (Detect).
func (m *Maker) detect(ctx context.Context) (string, error) { return Detect(ctx, m.reader) }

// Detect returns the name of the MutatingWebhookConfiguration holding
// ExtensionsWebhook, or "": the one test of whether another IPAMClaims
// controller makes claims, for the controller and `kubectl ipkeeper why`.
// The other webhook's selectors are not read: registered for some
// namespaces only, it still makes ipkeeper leave claims everywhere.
func Detect(ctx context.Context, reader client.Reader) (string, error) {
	var list admissionregistrationv1.MutatingWebhookConfigurationList
	if err := reader.List(ctx, &list); err != nil {
		return "", fmt.Errorf("listing MutatingWebhookConfigurations to find another IPAMClaims controller's webhook %s (--claims-controller=auto; set ipkeeper or external to skip): %w", ExtensionsWebhook, err)
	}
	var names []string
	for _, c := range list.Items {
		if slices.ContainsFunc(c.Webhooks, func(w admissionregistrationv1.MutatingWebhook) bool { return w.Name == ExtensionsWebhook }) {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "", nil
	}
	return names[0], nil
}

// publish reports the current maker: log, metric, an Event on the other
// controller's webhook configuration, and a wake-up for the listeners.
// prev is the configuration seen before ("" at start or when none was).
func (m *Maker) publish(ctx context.Context, prev string) {
	external := m.External()
	makerGauge.WithLabelValues("external").Set(b2f(external))
	makerGauge.WithLabelValues("ipkeeper").Set(b2f(!external))
	log.FromContext(ctx).Info("VMs' IPAMClaims and launcher claim references are made by "+m.Name(), "setting", string(m.setting))
	if m.recorder != nil {
		now := *m.found.Load()
		switch {
		case now != "":
			m.recorder.Eventf(webhookConfig(now), corev1.EventTypeNormal, string(ReasonClaimsMaker),
				"ipkeeper-controller leaves VMs' IPAMClaims and launcher claim references to the controller behind webhook %s; it fills their addresses", ExtensionsWebhook)
		case prev != "":
			m.recorder.Eventf(webhookConfig(prev), corev1.EventTypeNormal, string(ReasonClaimsMaker),
				"webhook %s is gone; ipkeeper-controller makes VMs' IPAMClaims and launcher claim references again, adopting the existing claims", ExtensionsWebhook)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ch := range m.listeners {
		select {
		case ch <- event.GenericEvent{Object: webhookConfig("claims-maker")}:
		default: // one pending wake-up is enough
		}
	}
}

func webhookConfig(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
