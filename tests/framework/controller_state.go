// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt/webhook"
)

// Exited reports whether the in-process controller has stopped on its own,
// and with which error.
func (c *Controller) Exited() error {
	select {
	case err := <-c.done:
		c.done <- err // Stop waits for it too
		if err == nil {
			return errors.New("controller exited")
		}
		return fmt.Errorf("controller exited: %w", err)
	default:
		return nil
	}
}

// WaitWebhookReferences waits until the controller has turned the webhook
// configuration's rules on and recorded refs (webhook.ReferencesAnnotation:
// which claim references the webhook makes).
func (cp *ControlPlane) WaitWebhookReferences(ctx context.Context, name, refs string) error {
	if err := cp.WaitWebhookScope(ctx, name, true); err != nil {
		return err
	}
	var whc admissionregistrationv1.MutatingWebhookConfiguration
	err := Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &whc); err != nil {
			return false, err
		}
		return whc.Annotations[webhook.ReferencesAnnotation] == refs, nil
	})
	if err != nil {
		return fmt.Errorf("webhook configuration %s: want %s=%s, have %q: %w", name, webhook.ReferencesAnnotation, refs, whc.Annotations[webhook.ReferencesAnnotation], err)
	}
	return nil
}

// WaitWebhookScope waits until the controller has turned the webhook
// configuration's rules on (called) or off.
func (cp *ControlPlane) WaitWebhookScope(ctx context.Context, name string, called bool) error {
	var whc admissionregistrationv1.MutatingWebhookConfiguration
	err := Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &whc); err != nil {
			return false, err
		}
		for _, w := range whc.Webhooks {
			if (len(w.Rules) > 0) != called {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("webhook configuration %s: want called=%v: %w", name, called, err)
	}
	return nil
}
