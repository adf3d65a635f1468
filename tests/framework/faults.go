// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Fault is an API write refused by the API server itself, for tests that
// need a step of a controller to fail at a known point: a
// ValidatingAdmissionPolicy (and its binding) denying the matching requests
// in one namespace with a recognisable message. Nothing in the controller
// knows about it.
type Fault struct {
	Name string
	// Message is in the error the writer gets.
	Message string
	cp      *ControlPlane
}

// FaultSpec says which requests a Fault refuses.
type FaultSpec struct {
	Group, Resource string
	Operations      []admissionregistrationv1.OperationType
	// Namespace limits the fault to one namespace.
	Namespace string
	// Refuse is a CEL expression (object, oldObject, request) that is true
	// for the requests to refuse; "true" refuses every matching request.
	Refuse string
}

// InjectFault installs the policy and returns once a dry-run probe built by
// probe is refused (policies take effect asynchronously). probe performs a
// dry-run request that the fault must refuse; it returns that request's error.
// The fault is removed when the test ends unless Remove was called.
func (cp *ControlPlane) InjectFault(t testing.TB, name string, spec FaultSpec, probe func(context.Context) error) *Fault {
	t.Helper()
	ctx := context.Background()
	f := &Fault{Name: name, Message: "injected fault " + name, cp: cp}
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: spec.Operations,
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{spec.Group}, APIVersions: []string{"*"}, Resources: []string{spec.Resource}},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "!(" + spec.Refuse + ")", Message: f.Message}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: spec.Namespace}},
			},
		},
	}
	if err := cp.Client.Create(ctx, policy); err != nil {
		t.Fatalf("fault %s: creating the policy: %v", name, err)
	}
	if err := cp.Client.Create(ctx, binding); err != nil {
		t.Fatalf("fault %s: creating the binding: %v", name, err)
	}
	t.Cleanup(func() { _ = f.remove(context.Background()) })
	if err := Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := probe(ctx)
		if err == nil {
			return false, nil
		}
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return true, nil
		}
		return false, err
	}); err != nil {
		t.Fatalf("fault %s never took effect: %v", name, err)
	}
	return f
}

// Remove deletes the policy and returns once probe (a dry-run request the
// fault refused) is allowed again.
func (f *Fault) Remove(t testing.TB, probe func(context.Context) error) {
	t.Helper()
	ctx := context.Background()
	if err := f.remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		return probe(ctx) == nil, nil
	}); err != nil {
		t.Fatalf("fault %s still in effect after removal: %v", f.Name, err)
	}
}

func (f *Fault) remove(ctx context.Context) error {
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: f.Name}}
	if err := f.cp.Client.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("fault %s: deleting the binding: %w", f.Name, err)
	}
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: f.Name}}
	if err := f.cp.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("fault %s: deleting the policy: %w", f.Name, err)
	}
	return nil
}
