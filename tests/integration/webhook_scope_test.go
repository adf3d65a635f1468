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
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/webhook"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// shippedWebhook reads manifests/base/webhook's configuration and checks its
// scope is internal/webhook's (the controller writes that one back).
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
	if len(whc.Webhooks) != 1 {
		t.Fatalf("%d webhooks in the manifest, want 1", len(whc.Webhooks))
	}
	w := &whc.Webhooks[0]
	if !reflect.DeepEqual(w.MatchConditions, webhook.MatchConditions()) {
		t.Fatalf("manifest matchConditions %+v differ from internal/webhook's %+v", w.MatchConditions, webhook.MatchConditions())
	}
	if !reflect.DeepEqual(w.Rules, webhook.Rules()) {
		t.Fatalf("manifest rules %+v differ from internal/webhook's %+v", w.Rules, webhook.Rules())
	}
	return &whc
}

// TestWebhookOutageBlocksOnlyWhatNeedsIt registers the shipped webhook
// configuration (scoped to a test namespace) pointing at an address where
// no controller replica listens: every replica is down. The API server must
// still admit launcher pods without secondary networks and updates of
// running launchers that leave their networks annotation alone (KubeVirt's
// label updates), and refuse, saying which webhook failed, a launcher pod
// with a persistent-IP network, which would otherwise start without its
// claim reference. The launcher pods are written by the test, with what
// ipkeeper keys on (no VMI owns them, so virt-controller leaves them alone).
func TestWebhookOutageBlocksOnlyWhatNeedsIt(t *testing.T) {
	ctx := context.Background()
	ns := cp.NewNamespace(t, "outage")
	whc := shippedWebhook(t)

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
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute", Image: "virt-launcher"}}},
		}
		if networks != "" {
			p.Annotations[multus.Annotation] = networks
		}
		return p
	}
	blue, _ := json.Marshal([]map[string]string{{"name": "blue", "namespace": ns, "interface": kubevirt.PodInterfaceName("blue")}})
	red, _ := json.Marshal([]map[string]string{{"name": "red", "namespace": ns, "interface": kubevirt.PodInterfaceName("red")}})

	// A launcher that was running before the outage (its reference added then).
	running := launcher("virt-launcher-running", string(blue))
	if err := cp.Client.Create(ctx, running); err != nil {
		t.Fatal(err)
	}

	whc.Name = "ipkeeper-outage-" + ns
	w := &whc.Webhooks[0]
	w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
	w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	if err := cp.Client.Create(ctx, whc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), whc) })

	refusedBecause := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), `failed calling webhook "virt-launcher.ipkeeper.io"`)
	}
	// The configuration takes effect asynchronously: wait for the refusal.
	var refusal error
	if err := framework.Eventually(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		refusal = cp.Client.Create(ctx, launcher("virt-launcher-probe", string(blue)), client.DryRunAll)
		return refusedBecause(refusal), nil
	}); err != nil {
		t.Fatalf("a launcher pod with a persistent-IP network was admitted with no webhook replica running (last answer: %v)", refusal)
	}
	t.Logf("refused as it must be: %v", refusal)

	if err := cp.Client.Create(ctx, launcher("virt-launcher-plain", "")); err != nil {
		t.Errorf("a launcher pod without secondary networks was refused during the outage: %v", err)
	}

	patch := client.MergeFrom(running.DeepCopy())
	running.Labels["kubevirt.io/nodeName"] = "node-1"
	if err := cp.Client.Patch(ctx, running, patch); err != nil {
		t.Errorf("a label-only update of a running launcher pod was refused during the outage: %v", err)
	}

	patch = client.MergeFrom(running.DeepCopy())
	running.Annotations[multus.Annotation] = string(red)
	if err := cp.Client.Patch(ctx, running, patch, client.DryRunAll); !refusedBecause(err) {
		t.Errorf("a change of a launcher's networks (hotplug) went through without the webhook: %v", err)
	}

	err = cp.Client.Create(ctx, launcher("virt-launcher-vm1", string(blue)))
	if !refusedBecause(err) {
		t.Fatalf("a launcher pod with a persistent-IP network: %v, want a refusal naming the webhook", err)
	}
}
