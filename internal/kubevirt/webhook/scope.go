// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"context"
	"fmt"
	"reflect"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
)

// The configuration has two webhooks, both on virt-launcher pods with a
// networks annotation (objectSelector and matchConditions), both calling
// the same handler; they differ in what an outage of every controller
// replica does:
//
//   - LaunchersWebhook (failurePolicy Ignore): pod creation, and changes of
//     the networks of a launcher that references no claim. An outage
//     blocks no VM: for a launcher admitted without it that needs a claim
//     reference, the agent finds the claim by this package's rule (from
//     the VMI) and waits for its addresses (agent/attachment.go), so
//     persistence is never silently lost.
//   - ClaimedLaunchersWebhook (failurePolicy Fail): changes of the networks
//     of a running launcher that references a claim (a NIC hotplug or
//     unplug). Admitted without the webhook, virt-controller's rewrite
//     would drop the launcher's claim references and the claims would be
//     released under the running VM; during an outage such a change waits
//     (virt-controller retries it).
//
// On UPDATE only a change of the networks annotation reaches either
// (KubeVirt's own label and status updates never do), and while the
// KubeVirt CRDs are missing neither has rules: the API server calls
// nothing (the controller writes the rules). While the PersistentIPs gate
// is off, or another controller makes the claims, they keep their rules:
// VMs whose claims exist keep using them (a restart, a migration, a
// hotplug) and the webhook references no claim that does not exist (the
// other controller's webhook, called after this one, references those it
// makes). The configuration's ReferencesAnnotation tells agents which case
// holds, so that they never wait for a claim nobody makes
// (agent/attachment.go).
//
// The manifest (manifests/base/webhook) carries the same webhooks; a test
// keeps them equal to Webhooks.

// ReferencesAnnotation, on the webhook configuration, tells agents which
// claim references the webhook makes: ReferencesAll, ReferencesExisting
// (to claims that exist only: the PersistentIPs gate is off, or another
// controller makes claims and references) or ReferencesNone (not called:
// KubeVirt is not installed).
const ReferencesAnnotation = "ipkeeper.io/claim-references"

// The values of ReferencesAnnotation.
const (
	ReferencesAll      = "all"
	ReferencesExisting = "existing"
	ReferencesNone     = "none"
)

// The webhooks' names.
const (
	LaunchersWebhook        = "virt-launcher.ipkeeper.io"
	ClaimedLaunchersWebhook = "claimed-virt-launcher.ipkeeper.io"
)

// Spec is what Webhooks says of one webhook.
type Spec struct {
	Name            string
	FailurePolicy   admissionregistrationv1.FailurePolicyType
	MatchConditions []admissionregistrationv1.MatchCondition
}

// Webhooks are the configuration's webhooks.
func Webhooks() []Spec {
	return []Spec{
		{Name: LaunchersWebhook, FailurePolicy: admissionregistrationv1.Ignore, MatchConditions: matchConditions(false)},
		{Name: ClaimedLaunchersWebhook, FailurePolicy: admissionregistrationv1.Fail, MatchConditions: matchConditions(true)},
	}
}

// matchConditions are a webhook's CEL conditions (Kubernetes 1.30+):
// claimed selects updates of a launcher whose networks annotation
// references a claim, else everything else.
func matchConditions(claimed bool) []admissionregistrationv1.MatchCondition {
	a := fmt.Sprintf("'%s'", multus.Annotation)
	updateOfClaimed := fmt.Sprintf("request.operation == 'UPDATE' && has(oldObject.metadata.annotations) && %[1]s in oldObject.metadata.annotations && "+
		"oldObject.metadata.annotations[%[1]s].contains('\"%[2]s\"')", a, multus.ClaimRefKey)
	which := admissionregistrationv1.MatchCondition{Name: "not-an-update-of-a-claimed-launcher", Expression: "!(" + updateOfClaimed + ")"}
	if claimed {
		which = admissionregistrationv1.MatchCondition{Name: "update-of-a-claimed-launcher", Expression: updateOfClaimed}
	}
	return []admissionregistrationv1.MatchCondition{
		{
			Name:       "has-networks-annotation",
			Expression: fmt.Sprintf("has(object.metadata.annotations) && %s in object.metadata.annotations", a),
		},
		{
			Name: "networks-annotation-changed",
			Expression: fmt.Sprintf("request.operation != 'UPDATE' || !has(oldObject.metadata.annotations) || !(%[1]s in oldObject.metadata.annotations) || "+
				"oldObject.metadata.annotations[%[1]s] != object.metadata.annotations[%[1]s]", a),
		},
		which,
	}
}

// Rules are the webhook's rules while it is wanted: pod CREATE and UPDATE.
func Rules() []admissionregistrationv1.RuleWithOperations {
	scope := admissionregistrationv1.NamespacedScope
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &scope},
	}}
}

// SetScope turns the webhooks of configuration name on (Rules) or off (no
// rules: the API server never calls them), sets each one's match
// conditions (Webhooks) and records refs (ReferencesAnnotation). It
// writes only when something differs. A missing configuration is not an
// error (nothing calls the webhook then).
func SetScope(ctx context.Context, reader client.Reader, writer client.Writer, name string, on bool, refs string) error {
	var whc admissionregistrationv1.MutatingWebhookConfiguration
	if err := reader.Get(ctx, types.NamespacedName{Name: name}, &whc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading mutating webhook configuration %s: %w", name, err)
	}
	rules := []admissionregistrationv1.RuleWithOperations{}
	if on {
		rules = Rules()
	}
	conds := map[string][]admissionregistrationv1.MatchCondition{}
	for _, w := range Webhooks() {
		conds[w.Name] = w.MatchConditions
	}
	changed := false
	if !on {
		refs = ReferencesNone
	}
	if whc.Annotations[ReferencesAnnotation] != refs {
		if whc.Annotations == nil {
			whc.Annotations = map[string]string{}
		}
		whc.Annotations[ReferencesAnnotation], changed = refs, true
	}
	for i := range whc.Webhooks {
		w := &whc.Webhooks[i]
		if !sameRules(w.Rules, rules) {
			w.Rules, changed = rules, true
		}
		if c, ok := conds[w.Name]; ok && !reflect.DeepEqual(w.MatchConditions, c) {
			w.MatchConditions, changed = c, true
		}
	}
	if !changed {
		return nil
	}
	// Update: the resourceVersion read is the precondition, so the CA
	// injection (the certificate rotator) is never clobbered.
	if err := writer.Update(ctx, &whc); err != nil {
		return fmt.Errorf("setting the scope of mutating webhook configuration %s: %w", name, err)
	}
	log.FromContext(ctx).Info("webhook scope changed", "webhookConfiguration", name, "called", on, "claimReferences", refs)
	return nil
}

func sameRules(a, b []admissionregistrationv1.RuleWithOperations) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// ScopeReconciler keeps the webhook called while KubeVirt is installed and
// records on its configuration which references it makes. It runs (on the
// leader) only while the KubeVirt CRDs are installed; whoever stops it
// turns the scope off.
type ScopeReconciler struct {
	// Reader reads the configuration live (it is not cached); Writer updates it.
	Reader client.Reader
	Writer client.Writer
	Gate   kubevirt.Gate
	// Maker tells whether another controller makes claims (nil: ipkeeper).
	Maker interface{ External() bool }
	// ConfigName is the MutatingWebhookConfiguration.
	ConfigName string
}

// Reconcile turns the scope on and records which references the webhook
// makes; every request means the same.
func (r *ScopeReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	gate, err := r.Gate.Enabled(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	refs := ReferencesAll
	if !gate || (r.Maker != nil && r.Maker.External()) {
		refs = ReferencesExisting
	}
	return reconcile.Result{}, SetScope(ctx, r.Reader, r.Writer, r.ConfigName, true, refs)
}
