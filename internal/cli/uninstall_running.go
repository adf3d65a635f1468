// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/naming"
)

// refuseWhileRunning returns an error while ipkeeper-controller in ns
// looks alive: it would put back the finalizers uninstall removes.
func refuseWhileRunning(ctx context.Context, c client.Client, ns string, now time.Time) error {
	why, err := deploymentReady(ctx, c, ns)
	if err == nil && why == "" {
		why, err = leaseHeld(ctx, c, ns, now)
	}
	if err != nil {
		return err
	}
	if why == "" {
		return nil
	}
	return &runningError{why: why}
}

// runningError is the refusal: ipkeeper-controller looks alive.
type runningError struct{ why string }

func (e *runningError) Error() string {
	return "ipkeeper-controller is still running (" + e.why + ") and would put the finalizers back: " +
		"uninstall the chart or the manifests first (helm uninstall, kubectl delete -f) and let its pods stop, or pass --force"
}

// deploymentReady says why the controller's Deployment counts as running
// ("" when it is absent or has no ready replica).
func deploymentReady(ctx context.Context, c client.Client, ns string) (string, error) {
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: naming.ControllerName}, &d); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading Deployment %s/%s: %w", ns, naming.ControllerName, err)
	}
	if d.Status.ReadyReplicas == 0 {
		return "", nil
	}
	return fmt.Sprintf("Deployment %s/%s has %d ready replica(s)", ns, naming.ControllerName, d.Status.ReadyReplicas), nil
}

// leaseHeld says why the controller's leader Lease counts as held: a
// holder that renewed it within its duration ("" otherwise). It catches a
// controller run outside its Deployment.
func leaseHeld(ctx context.Context, c client.Client, ns string, now time.Time) (string, error) {
	var l coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: naming.ControllerName}, &l); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading Lease %s/%s: %w", ns, naming.ControllerName, err)
	}
	s := l.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return "", nil
	}
	expires := s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)
	if !now.Before(expires) {
		return "", nil
	}
	return fmt.Sprintf("Lease %s/%s is held by %s until %s", ns, naming.ControllerName, *s.HolderIdentity, expires.UTC().Format(time.RFC3339)), nil
}
