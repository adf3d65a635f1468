// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// TestControllerWithoutKubeVirt runs ipkeeper-controller (in-process, its
// webhook registered) on a control plane of its own that has no KubeVirt
// CRDs, as on a cluster used only for plain pods: the controller must run,
// collect leaked reservations and keep its webhook out of the admission
// path. KubeVirt is then installed while it runs (its CRDs, then the real
// virt-controller; framework.KubeVirt simulates the node side): claims and
// the webhook start without a restart. Removing the CRDs stops them again, garbage
// collection going on.
func TestControllerWithoutKubeVirt(t *testing.T) {
	ctx := context.Background()
	bare, err := framework.Start(ctx, framework.Options{WithoutKubeVirtCRDs: true, WithoutControllerManager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bare.Stop() })
	bare.DumpLogsOnFailure(t)
	ns := bare.NewNamespace(t, "bare")
	ctrl := bare.StartController(t, ns, func(o *manager.Options) { o.KubeVirtDiscoveryInterval = 200 * time.Millisecond })

	support := func() float64 { return framework.Gauge(metrics.Registry, "ipkeeper_controller_kubevirt_support") }
	waitSupport := func(want float64) {
		t.Helper()
		if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(context.Context) (bool, error) {
			return support() == want, ctrl.Exited()
		}); err != nil {
			t.Fatalf("ipkeeper_controller_kubevirt_support = %v, want %v: %v", support(), want, err)
		}
	}
	waitScope := func(called bool) {
		t.Helper()
		if err := bare.WaitWebhookScope(ctx, ctrl.WebhookConfig, called); err != nil {
			t.Fatal(err)
		}
		if err := ctrl.Exited(); err != nil {
			t.Fatal(err)
		}
	}
	collects := func(ip string) {
		t.Helper()
		res := newReservation("bare-net", ip)
		res.Spec.Owner.Namespace, res.Spec.Owner.UID = ns, types.UID("00000000-0000-4000-8000-0000000000"+ip[len(ip)-2:])
		if err := bare.Client.Create(ctx, res); err != nil {
			t.Fatal(err)
		}
		if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			err := bare.Client.Get(ctx, client.ObjectKeyFromObject(res), &ipkeeperv1alpha1.IPReservation{})
			return apierrors.IsNotFound(err), ctrl.Exited()
		}); err != nil {
			t.Fatalf("reservation %s of a pod that never existed was not collected: %v", res.Name, err)
		}
	}

	// No KubeVirt: running, collecting, the webhook out of the way.
	waitSupport(0)
	collects("10.99.0.11")
	waitScope(false)

	// KubeVirt installed later: claims and the webhook without a restart.
	if err := bare.InstallKubeVirtCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := bare.StartVirtController(ctx); err != nil {
		t.Fatal(err)
	}
	kv := &framework.KubeVirt{C: bare.Client}
	t.Log(kv.Simulated())
	if err := kv.SetFeatureGate(ctx, true); err != nil {
		t.Fatal(err)
	}
	waitSupport(1)
	waitScope(true)
	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "blue"},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: bridgeNAD("bare-blue", true)},
	}
	if err := bare.Client.Create(ctx, nad); err != nil {
		t.Fatal(err)
	}
	vm, err := kv.CreateVM(ctx, ns, "vm1", framework.VMNetwork{Name: "blue", NAD: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	claim := naming.Claim(vm.Name, "blue")
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := bare.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim}, &ipamclaimsv1alpha1.IPAMClaim{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		t.Fatalf("no claim %s after KubeVirt was installed: %v", claim, err)
	}
	_, pod, err := kv.Start(ctx, vm, "")
	if err != nil {
		t.Fatal(err)
	}
	elems, err := multus.ParseElements(pod.Annotations[multus.Annotation], ns)
	if err != nil {
		t.Fatal(err)
	}
	if got := elems[0].ClaimRef; len(elems) != 1 || elems[0].Interface != kubevirt.PodInterfaceName("blue") || got != claim {
		t.Fatalf("launcher pod references %q, want %q: the webhook did not start with KubeVirt", got, claim)
	}

	// KubeVirt removed: support stops cleanly, collection goes on.
	if err := bare.UninstallKubeVirtCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	waitSupport(0)
	waitScope(false)
	collects("10.99.0.12")
	if err := ctrl.Exited(); err != nil {
		t.Fatal(err)
	}
}
