// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/webhook"
	"github.com/ipkeeper/ipkeeper/internal/logging"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

var setLoggerOnce sync.Once

// setControllerLogger sets controller-runtime's logger, once per process,
// to the in-process controller's log. Start calls it before anything runs:
// controller-runtime sets a logger of its own from whichever goroutine
// logs first once 30 s passed without one, which races with a later
// SetLogger.
func (cp *ControlPlane) setControllerLogger() error {
	logOut, err := cp.ComponentLog("ipkeeper-controller")
	if err != nil {
		return err
	}
	setLoggerOnce.Do(func() {
		log, err := logging.New(logOut, "debug")
		if err != nil {
			panic(err) // a constant level
		}
		ctrllog.SetLogger(log)
	})
	return nil
}

// Controller is an in-process ipkeeper-controller with its webhook
// registered with the API server.
type Controller struct {
	Options manager.Options
	// WebhookConfig is the MutatingWebhookConfiguration registered for it.
	WebhookConfig string
	cancel        context.CancelFunc
	done          chan error
}

// StartController runs ipkeeper-controller in-process with ns as its own
// namespace (lease, webhook Secret), self-managed webhook certificates for
// 127.0.0.1, and a MutatingWebhookConfiguration scoped to launcher pods in
// ns, the way the shipped manifest scopes it to launcher pods cluster-wide.
// The PersistentIPs gate is turned on first (tests that want it off turn it
// off afterwards). It returns once the API server calls the webhook.
func (cp *ControlPlane) StartController(t testing.TB, ns string, tweaks ...func(*manager.Options)) *Controller {
	t.Helper()
	ctx := context.Background()
	if err := cp.setControllerLogger(); err != nil {
		t.Fatal(err)
	}
	if cp.HasKubeVirt() {
		if err := SetPersistentIPsGate(ctx, cp.Client, true); err != nil {
			t.Fatal(err)
		}
	}
	whPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	probePort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	fs := newFlagSet()
	var o manager.Options
	o.AddFlags(fs)
	o.Namespace = ns
	o.LeaderElectID = "ipkeeper-controller"
	o.MetricsAddr = "0"
	o.ProbeAddr = fmt.Sprintf("127.0.0.1:%d", probePort)
	o.WebhookHost = "127.0.0.1"
	o.WebhookPort = whPort
	o.WebhookConfig = "ipkeeper-" + ns
	o.ExtraSANs = "127.0.0.1"
	o.GCGracePeriod = time.Second
	o.KubeVirtDiscoveryInterval = time.Second
	o.ClusterAPIDiscoveryInterval = time.Second
	for _, tweak := range tweaks {
		tweak(&o)
	}
	c := &Controller{Options: o, WebhookConfig: o.WebhookConfig, done: make(chan error, 1)}
	if o.EnableWebhook {
		// Provided certificates come with their CA injected by whoever
		// issued them (cert-manager's CA injector); here the test does it.
		var caBundle []byte
		if o.CertMode == manager.CertsProvided {
			if caBundle, err = os.ReadFile(filepath.Join(o.CertDir, "ca.crt")); err != nil {
				t.Fatalf("provided certificates: %v", err)
			}
		}
		if err := cp.RegisterPodWebhook(ctx, o.WebhookConfig, ns, fmt.Sprintf("https://127.0.0.1:%d%s", whPort, webhook.Path), caBundle); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cp.Client.Delete(context.Background(), &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: o.WebhookConfig}})
		})
	}
	mgr, err := manager.New(ctx, cp.Config, o)
	if err != nil {
		t.Fatalf("building the controller: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	go func() { c.done <- mgr.Start(runCtx) }()
	t.Cleanup(c.Stop)

	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	if err := Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		select {
		case err := <-c.done:
			return false, fmt.Errorf("controller exited: %w", err)
		default:
		}
		return httpOK(ctx, readyz)
	}); err != nil {
		t.Fatalf("controller not ready: %v", err)
	}
	// Without KubeVirt the webhook's rules are off: nothing calls it.
	if o.EnableWebhook && cp.HasKubeVirt() {
		if err := cp.WaitWebhookCalled(ctx, ns); err != nil {
			t.Fatalf("the API server does not call the webhook: %v", err)
		}
	}
	return c
}

// Stop stops the controller and waits for it to exit.
func (c *Controller) Stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	c.cancel = nil
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
	}
}

// RegisterPodWebhook registers the virt-launcher pod webhooks at url, as
// the shipped MutatingWebhookConfiguration does (webhook.Webhooks: launcher
// pods with a networks annotation only, CREATE and UPDATE of that
// annotation; Ignore, and Fail for updates of launchers that reference a
// claim), limited to namespace ns ("" for all) and the others named.
func (cp *ControlPlane) RegisterPodWebhook(ctx context.Context, name, ns, url string, caBundle []byte, others ...string) error {
	if err := cp.Client.Create(ctx, PodWebhookConfiguration(name, ns, admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle}, others...)); err != nil {
		return fmt.Errorf("registering webhook %s: %w", name, err)
	}
	return nil
}

// PodWebhookConfiguration is the shipped configuration's webhooks
// (webhook.Webhooks) calling client, limited to namespace ns ("" for all)
// and the others named.
func PodWebhookConfiguration(name, ns string, client admissionregistrationv1.WebhookClientConfig, others ...string) *admissionregistrationv1.MutatingWebhookConfiguration {
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(10)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, w := range webhook.Webhooks() {
		policy := w.FailurePolicy
		// As shipped: called again after a later webhook (another IPAMClaims
		// controller's) set references, so that it checks them.
		reinvoke := admissionregistrationv1.IfNeededReinvocationPolicy
		wh := admissionregistrationv1.MutatingWebhook{
			ReinvocationPolicy:      &reinvoke,
			Name:                    w.Name,
			ClientConfig:            client,
			Rules:                   webhook.Rules(),
			MatchConditions:         w.MatchConditions,
			FailurePolicy:           &policy,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue}},
		}
		if ns != "" {
			wh.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: append([]string{ns}, others...)}}}
		}
		cfg.Webhooks = append(cfg.Webhooks, wh)
	}
	return cfg
}

// WaitWebhookCalled dry-runs a launcher pod with a malformed networks
// annotation until the webhook denies it: proof that the API server has the
// configuration, trusts the injected CA and reaches the server.
func (cp *ControlPlane) WaitWebhookCalled(ctx context.Context, ns string) error {
	return Eventually(ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: "ipkeeper-webhook-probe",
				Labels:      map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue},
				Annotations: map[string]string{kubevirtv1.DomainAnnotation: "probe", multus.Annotation: "[{"},
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "probe"}}},
		}
		err := cp.Client.Create(ctx, pod, client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "not a JSON list") {
			return true, nil
		}
		if err == nil {
			err = errors.New("probe pod admitted unchanged")
		}
		return false, err
	})
}

func httpOK(ctx context.Context, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return true, nil
}

func newFlagSet() *flag.FlagSet { return flag.NewFlagSet("ipkeeper-controller", flag.ContinueOnError) }
