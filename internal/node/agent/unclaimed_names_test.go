// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt/webhook"
)

// The agent reads the webhook configuration's annotation by its own copy of
// the name (it does not link the controller's packages): the two agree.
func TestWebhookReferencesAnnotationMatchesTheController(t *testing.T) {
	if webhookReferencesAnnotation != webhook.ReferencesAnnotation || webhook.ReferencesAll != "all" {
		t.Fatalf("agent reads %q for %q, the controller writes %q with %q", webhookReferencesAnnotation, "all", webhook.ReferencesAnnotation, webhook.ReferencesAll)
	}
}
