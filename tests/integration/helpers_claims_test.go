// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/controller/manager"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// launcherIf is the claim-backed interface of the launcher-like pods these
// tests write: KubeVirt's hashed pod interface name.
const launcherIf = "pod16477688c0e"

// persistentConf is a network that allows persistent IPs.
func persistentConf(network string, ipam map[string]any) json.RawMessage {
	var m map[string]any
	if err := json.Unmarshal(framework.NetConf(network, ipam), &m); err != nil {
		panic(err)
	}
	m["allowPersistentIPs"] = true
	b, _ := json.Marshal(m)
	return b
}

// persistentNAD creates (unless it exists) NAD name in ns for network with
// allowPersistentIPs at the top level: the agent reads the flag from the
// NAD a pod's networks annotation element names. Without conf its config
// has no ipam section, so no IPAM serves the network (the claims of such a
// network are another IPAM's); with conf it is that config.
func persistentNAD(t testing.TB, ns, name, network string, conf ...json.RawMessage) {
	t.Helper()
	config := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","allowPersistentIPs":true}`, network)
	if len(conf) > 0 {
		config = string(conf[0])
	}
	n := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: config},
	}
	if err := cp.Client.Create(context.Background(), n); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating NAD %s/%s: %v", ns, name, err)
	}
}

// claimNetwork starts ipkeeper-controller for the test (it fills claims
// and makes the inline network's pool; no KubeVirt here, so no webhook)
// and creates the NAD blue-nad of the persistent network conf in ns, which
// createLaunchers' pods name.
func claimNetwork(t testing.TB, ns string, conf json.RawMessage) *framework.Controller {
	t.Helper()
	c := startClaimController(t, ns)
	cfg := struct {
		Name string `json:"name"`
	}{}
	if err := json.Unmarshal(conf, &cfg); err != nil {
		t.Fatal(err)
	}
	persistentNAD(t, ns, "blue-nad", cfg.Name, conf)
	return c
}

// startClaimController runs ipkeeper-controller without its pod webhook.
func startClaimController(t testing.TB, ns string) *framework.Controller {
	t.Helper()
	return cp.StartController(t, ns, func(o *manager.Options) { o.EnableWebhook = false })
}

// createClaim creates a claim (owned by nothing, as other tools make them)
// and, unless it exists, the NAD blue-nad of its network (without ipam:
// claimNetwork makes the one ipkeeper serves).
func createClaim(t testing.TB, ns, name, network string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	persistentNAD(t, ns, "blue-nad", network)
	c := &ipamclaimsv1alpha1.IPAMClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: network, Interface: launcherIf},
	}
	if err := cp.Client.Create(context.Background(), c); err != nil {
		t.Fatalf("creating IPAMClaim: %v", err)
	}
	return c
}

// createLaunchers creates virt-launcher pods on node whose networks
// annotation references claim for interface launcherIf, as the pod webhook
// leaves them.
func createLaunchers(t testing.TB, ns, node, prefix, claim string, n int) []*corev1.Pod {
	t.Helper()
	return cp.CreateAnnotatedPods(t, ns, node, prefix, n, map[string]string{multus.Annotation: networksAnnotation(ns, claim)})
}

// waitFilled waits until ipkeeper-controller has recorded the claim's
// addresses and returns it.
func waitFilled(t testing.TB, ns, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	return waitFilledWithin(t, ns, name, 30*time.Second)
}

// waitFilledWithin is waitFilled with its deadline.
func waitFilledWithin(t testing.TB, ns, name string, within time.Duration) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	var c ipamclaimsv1alpha1.IPAMClaim
	if err := framework.Eventually(context.Background(), within, 20*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c)
		return err == nil && len(c.Status.IPs) > 0, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("IPAMClaim %s/%s never got addresses (conditions %+v): %v", ns, name, c.Status.Conditions, err)
	}
	return &c
}

// agentWrites is the number of API writes an agent made.
func agentWrites(a *framework.Agent) float64 { return a.CounterSum("ipkeeper_agent_api_writes_total") }

func agentReads(a *framework.Agent) float64 { return a.CounterSum("ipkeeper_agent_api_reads_total") }

func getClaim(t testing.TB, ns, name string) *ipamclaimsv1alpha1.IPAMClaim {
	t.Helper()
	c := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitOwnerPod waits for the claim's status.ownerPod to name pod.
func waitOwnerPod(t testing.TB, ns, claim, pod string) {
	t.Helper()
	var got *ipamclaimsv1alpha1.OwnerPod
	if err := framework.Eventually(context.Background(), 20*time.Second, 20*time.Millisecond, func(context.Context) (bool, error) {
		got = getClaim(t, ns, claim).Status.OwnerPod
		return got != nil && got.Name == pod, nil
	}); err != nil {
		t.Fatalf("claim %s ownerPod = %+v, want %s: %v", claim, got, pod, err)
	}
}

// createVMRequesting creates a stopped VM on network blue whose template
// requests addresses.
func createVMRequesting(t *testing.T, e *kvEnv, name, request string) *kubevirtv1.VirtualMachine {
	t.Helper()
	vm := framework.NewVM(e.ns, name, framework.VMNetwork{Name: "blue", NAD: "blue"})
	vm.Spec.Template.ObjectMeta.Annotations = map[string]string{claims.RequestedAddressesAnnotation: request}
	if err := cp.Client.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

func networksAnnotation(ns, claim string) string {
	annot, _ := json.Marshal([]map[string]any{{"name": "blue-nad", "namespace": ns, "interface": launcherIf, "ipam-claim-reference": claim}})
	return string(annot)
}
