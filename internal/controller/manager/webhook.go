// SPDX-License-Identifier: Apache-2.0

package manager

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/ipkeeper/ipkeeper/internal/controller/certs"
	podwebhook "github.com/ipkeeper/ipkeeper/internal/kubevirt/webhook"
)

// addWebhook registers the pod webhook on every replica, and the
// self-managed certificate rotation (leader). It returns the handler's
// switch, which KubeVirt support turns on while it runs; nil without the
// webhook.
func addWebhook(mgr ctrl.Manager, o Options, certServer *certs.Server) (*podwebhook.Switch, error) {
	if !o.EnableWebhook {
		return nil, nil
	}
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
	sw := &podwebhook.Switch{}
	hook := &webhook.Admission{Handler: sw}
	mgr.GetWebhookServer().Register(podwebhook.Path, podwebhook.Bounded(hook))
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, fmt.Errorf("adding readyz: %w", err)
	}
	return sw, nil
}
