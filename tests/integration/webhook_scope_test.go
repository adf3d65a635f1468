// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/webhook"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/node/agent"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// shippedWebhook reads manifests/base/webhook's configuration and checks its
// webhooks are internal/kubevirt/webhook's (the controller writes their scope back).
func shippedWebhook(t *testing.T) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, "manifests", "base", "webhook", "mutatingwebhookconfiguration.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var whc admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(data, &whc); err != nil {
		t.Fatal(err)
	}
	want := webhook.Webhooks()
	if len(whc.Webhooks) != len(want) {
		t.Fatalf("%d webhooks in the manifest, want %d", len(whc.Webhooks), len(want))
	}
	for i, w := range want {
		got := &whc.Webhooks[i]
		if got.Name != w.Name || got.FailurePolicy == nil || *got.FailurePolicy != w.FailurePolicy {
			t.Fatalf("manifest webhook %d is %s (failurePolicy %v), want %s (%s)", i, got.Name, got.FailurePolicy, w.Name, w.FailurePolicy)
		}
		if !reflect.DeepEqual(got.MatchConditions, w.MatchConditions) {
			t.Fatalf("manifest webhook %s matchConditions %+v differ from internal/kubevirt/webhook's %+v", w.Name, got.MatchConditions, w.MatchConditions)
		}
		if !reflect.DeepEqual(got.Rules, webhook.Rules()) {
			t.Fatalf("manifest webhook %s rules %+v differ from internal/kubevirt/webhook's %+v", w.Name, got.Rules, webhook.Rules())
		}
	}
	return &whc
}

// TestWebhookOutageBlocksOnlyWhatNeedsIt registers the shipped webhook
// configuration (scoped to a test namespace) pointing at an address where
// no controller replica listens: every replica is down. The API server must
// still admit every launcher pod (a VM none of whose networks needs a
// claim starts as usual), updates of running launchers that leave their
// networks annotation alone (KubeVirt's label updates), and network
// changes of launchers that reference no claim; it must refuse, saying
// which webhook failed, a network change (hotplug) of a launcher that
// references a claim, whose rewrite would drop the reference. A launcher
// of a persistent-IP network admitted without its reference is refused by
// the agent at ADD with code 11, never given an ephemeral address. The
// launcher pods are written by the test, with what ipkeeper keys on (no
// VMI owns them, so virt-controller leaves them alone).
func TestWebhookOutageBlocksOnlyWhatNeedsIt(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "outage")
	whc := shippedWebhook(t)
	whc.Name = "ipkeeper-outage-" + ns
	persistent := json.RawMessage(bridgeNAD("outage-blue-"+ns[len(ns)-5:], true))
	plain := json.RawMessage(bridgeNAD("outage-red-"+ns[len(ns)-5:], false))
	for name, conf := range map[string]json.RawMessage{"blue": persistent, "red": plain} {
		cp.CreateNAD(t, ns, name, conf)
		cp.InlinePool(t, ns, conf) // no controller runs: the pool it would make
	}
	a := cp.StartAgent(t, "node-outage", func(o *agent.Options) { o.WebhookConfigurationName = whc.Name })

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://%s%s", l.Addr(), webhook.Path)
	_ = l.Close() // nothing listens there any more: all replicas down

	launcher := func(name string, networks string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: name,
				Labels:      map[string]string{kubevirtv1.AppLabel: kubevirt.LauncherLabelValue},
				Annotations: map[string]string{kubevirtv1.DomainAnnotation: name},
			},
			Spec: corev1.PodSpec{NodeName: a.Node, Containers: []corev1.Container{{Name: "compute", Image: "virt-launcher"}}},
		}
		if networks != "" {
			p.Annotations[multus.Annotation] = networks
		}
		return p
	}
	element := func(nad, claim string) map[string]string {
		e := map[string]string{"name": nad, "namespace": ns, "interface": kubevirt.PodInterfaceName(nad)}
		if claim != "" {
			e[multus.ClaimRefKey] = claim
		}
		return e
	}
	annotation := func(elems ...map[string]string) string {
		b, _ := json.Marshal(elems)
		return string(b)
	}

	// Launchers that were running before the outage: one with its claim
	// reference (added then), one of a VM without persistent networks.
	claimed := launcher("virt-launcher-claimed", annotation(element("blue", "vm0.blue")))
	unclaimed := launcher("virt-launcher-plain-net", annotation(element("red", "")))
	for _, p := range []*corev1.Pod{claimed, unclaimed} {
		if err := cp.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	w := &whc.Webhooks
	for i := range *w {
		(*w)[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
		(*w)[i].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	}
	if err := cp.Client.Create(ctx, whc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), whc) })

	refusedBecause := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), `failed calling webhook "`+webhook.ClaimedLaunchersWebhook+`"`)
	}
	hotplug := func(p *corev1.Pod, opts ...client.PatchOption) error {
		patch := client.MergeFrom(p.DeepCopy())
		p.Annotations[multus.Annotation] = annotation(element("blue", ""), element("red", ""))
		return cp.Client.Patch(ctx, p, patch, opts...)
	}
	// The configuration takes effect asynchronously: wait for the refusal
	// of a claimed launcher's hotplug (as virt-controller writes it, without
	// references).
	var refusal error
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		refusal = hotplug(claimed.DeepCopy(), client.DryRunAll)
		return refusedBecause(refusal), nil
	}); err != nil {
		t.Fatalf("a network change of a launcher that references a claim went through with no webhook replica running (last answer: %v)", refusal)
	}
	t.Logf("refused as it must be: %v", refusal)

	patch := client.MergeFrom(claimed.DeepCopy())
	claimed.Labels["kubevirt.io/nodeName"] = a.Node
	if err := cp.Client.Patch(ctx, claimed, patch); err != nil {
		t.Errorf("a label-only update of a running launcher pod was refused during the outage: %v", err)
	}
	if err := hotplug(unclaimed); err != nil {
		t.Errorf("a network change of a launcher that references no claim was refused during the outage: %v", err)
	}
	if err := cp.Client.Create(ctx, launcher("virt-launcher-no-networks", "")); err != nil {
		t.Errorf("a launcher pod without secondary networks was refused during the outage: %v", err)
	}
	plainVM := launcher("virt-launcher-plain-vm", annotation(element("red", "")))
	if err := cp.Client.Create(ctx, plainVM); err != nil {
		t.Fatalf("a launcher pod of a VM without persistent networks was refused during the outage: %v", err)
	}
	if _, err := a.Add(ctx, plainVM, kubevirt.PodInterfaceName("red"), plain); err != nil {
		t.Errorf("ADD of a VM without persistent networks during the outage: %v", err)
	}

	// A VM with a persistent network: its launcher is admitted without its
	// claim reference; the agent refuses its ADD, saying why.
	vm1 := launcher("virt-launcher-vm1", annotation(element("blue", "")))
	if err := cp.Client.Create(ctx, vm1); err != nil {
		t.Fatalf("a launcher pod with a persistent-IP network was refused during the outage: %v", err)
	}
	_, err = a.Add(ctx, vm1, kubevirt.PodInterfaceName("blue"), persistent)
	if cniCode(err) != 11 {
		t.Fatalf("ADD of a persistent-IP interface without a claim reference = %v (code %d), want code 11", err, cniCode(err))
	}
	// (No VMI owns the test's launcher: the agent cannot derive the claim
	// the webhook would have referenced, as it does for a real VM's.)
	mustContain(t, err, "references no IPAMClaim", "ipkeeper's webhook did not see the pod", "VirtualMachineInstance virt-launcher-vm1 does not exist", "delete the pod")
	if n := len(reservationsOf(t, "outage-blue-"+ns[len(ns)-5:])); n != 0 {
		t.Errorf("the refused ADD left %d reservations", n)
	}
}
