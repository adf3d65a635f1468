// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/retry"
)

// ReasonGateOff is the Warning on the KubeVirt CR while it does not list
// the PersistentIPs feature gate.
const ReasonGateOff EventReason = "PersistentIPsGateOff"

// GateNotice says, once each time a KubeVirt CR is seen without the
// PersistentIPs feature gate (at the controller's start too), what that
// means and what to do: a log line of the controller and a Warning Event
// on the CR. A first install on a cluster whose KubeVirt CR does not list
// the gate otherwise sees VMs get no claim with no word from ipkeeper
// before a VM is made (each VM is told too: ReasonPersistentIPsDisabled).
type GateNotice struct {
	Client   client.Reader
	Recorder record.EventRecorder

	mu   sync.Mutex
	told map[types.UID]bool // CRs told since they last listed the gate
}

// GateOffMessage is what the notice says.
const GateOffMessage = "the KubeVirt CR does not list the " + kubevirt.PersistentIPsGate + " feature gate " +
	"(spec.configuration.developerConfiguration.featureGates), so ipkeeper-controller makes no IPAMClaims: " +
	"VMs on networks that allow persistent IPs get addresses that change on restart and live migration. " +
	"List the gate there, or run ipkeeper-controller with --require-kubevirt-feature-gate=false " +
	"(where HCO manages KubeVirt it reverts direct edits: use that flag or the HyperConverged CR's " +
	"kubevirt.kubevirt.io/jsonpatch annotation, docs/kubevirt.md); kubectl ipkeeper why vm <name> tells it per VM"

// Reconcile tells about one KubeVirt CR.
func (g *GateNotice) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var kv kubevirtv1.KubeVirt
	if err := g.Client.Get(ctx, req.NamespacedName, &kv); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading KubeVirt CR %s: %w", req, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.told == nil {
		g.told = map[types.UID]bool{}
	}
	if kubevirt.GateListed(&kv) {
		delete(g.told, kv.UID) // told again if the gate goes
		return reconcile.Result{}, nil
	}
	if g.told[kv.UID] {
		return reconcile.Result{}, nil
	}
	g.told[kv.UID] = true
	log.FromContext(ctx).Info("PersistentIPs feature gate is off: " + GateOffMessage)
	g.Recorder.Event(&kv, corev1.EventTypeWarning, string(ReasonGateOff), GateOffMessage)
	return reconcile.Result{}, nil
}

// SetupWithManager registers the notice on the KubeVirt CRs: created, and
// updated when the gate is added or removed.
func (g *GateNotice) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("kubevirt-gate-notice").
		WithOptions(retry.Options()).
		For(&kubevirtv1.KubeVirt{}, builder.WithPredicates(kubevirt.GateChanged())).
		Complete(g)
}
