// SPDX-License-Identifier: Apache-2.0

package kubevirt

import (
	"context"
	"fmt"
	"slices"

	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// PersistentIPsGate is the KubeVirt feature gate that turns on IPAMClaims for VMs.
const PersistentIPsGate = "PersistentIPs"

// Gate tells whether persistent IPs are enabled cluster-wide.
type Gate interface {
	Enabled(ctx context.Context) (bool, error)
}

// AlwaysOn is the gate when the operator disabled the KubeVirt CR check.
type AlwaysOn struct{}

// Enabled always reports true.
func (AlwaysOn) Enabled(context.Context) (bool, error) { return true, nil }

// CRGate reads the gate from the KubeVirt CR, in whatever namespace it is
// installed: spec.configuration.developerConfiguration.featureGates.
type CRGate struct {
	Reader client.Reader
}

// Enabled reports whether any KubeVirt CR lists PersistentIPs.
func (g CRGate) Enabled(ctx context.Context) (bool, error) {
	var list kubevirtv1.KubeVirtList
	if err := g.Reader.List(ctx, &list); err != nil {
		return false, fmt.Errorf("reading the KubeVirt CR for the %s feature gate: %w", PersistentIPsGate, err)
	}
	for i := range list.Items {
		if GateListed(&list.Items[i]) {
			return true, nil
		}
	}
	return false, nil
}

// GateListed reports whether a KubeVirt CR lists the PersistentIPs gate.
func GateListed(kv *kubevirtv1.KubeVirt) bool {
	dev := kv.Spec.Configuration.DeveloperConfiguration
	return dev != nil && slices.Contains(dev.FeatureGates, PersistentIPsGate)
}

// GateChanged passes the KubeVirt CR events that can change the gate:
// creation, deletion, and updates that add or remove it (KubeVirt updates
// its CR's status often; those must not re-queue every VM).
func GateChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*kubevirtv1.KubeVirt)
		n, ok2 := e.ObjectNew.(*kubevirtv1.KubeVirt)
		return !ok1 || !ok2 || GateListed(o) != GateListed(n)
	}}
}
