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

// The webhook's scope is kept small so that an outage of every replica
// (failurePolicy Fail) blocks only what must not proceed without it:
//
//   - objectSelector: virt-launcher pods only;
//   - matchConditions: only pods with a networks annotation, and on UPDATE
//     only when that annotation changed (KubeVirt's own label and status
//     updates of running launchers never reach the webhook);
//   - rules: none at all while the KubeVirt CRDs are missing or the
//     PersistentIPs feature gate is off (the controller writes them).
//
// The manifest (manifests/base/webhook) carries the same rules and
// conditions; a test keeps them equal to these.

// MatchConditions are the webhook's CEL conditions (Kubernetes 1.30+).
func MatchConditions() []admissionregistrationv1.MatchCondition {
	a := fmt.Sprintf("'%s'", multus.Annotation)
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
// rules: the API server never calls them), and sets MatchConditions. It
// writes only when something differs. A missing configuration is not an
// error (nothing calls the webhook then).
func SetScope(ctx context.Context, reader client.Reader, writer client.Writer, name string, on bool) error {
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
	conds := MatchConditions()
	changed := false
	for i := range whc.Webhooks {
		w := &whc.Webhooks[i]
		if !sameRules(w.Rules, rules) || !reflect.DeepEqual(w.MatchConditions, conds) {
			w.Rules, w.MatchConditions = rules, conds
			changed = true
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
	log.FromContext(ctx).Info("webhook scope changed", "webhookConfiguration", name, "called", on)
	return nil
}

func sameRules(a, b []admissionregistrationv1.RuleWithOperations) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// ScopeReconciler keeps the webhook called exactly while it can matter: the
// PersistentIPs gate is on. It runs (on the leader) only while the KubeVirt
// CRDs are installed; whoever stops it turns the scope off.
type ScopeReconciler struct {
	// Reader reads the configuration live (it is not cached); Writer updates it.
	Reader client.Reader
	Writer client.Writer
	Gate   kubevirt.Gate
	// ConfigName is the MutatingWebhookConfiguration.
	ConfigName string
}

// Reconcile sets the scope from the gate; every request means the same.
func (r *ScopeReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	on, err := r.Gate.Enabled(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, SetScope(ctx, r.Reader, r.Writer, r.ConfigName, on)
}
