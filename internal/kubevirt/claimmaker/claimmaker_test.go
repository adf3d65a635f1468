// SPDX-License-Identifier: Apache-2.0

package claimmaker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := admissionregistrationv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func config(name string, webhooks ...string) *admissionregistrationv1.MutatingWebhookConfiguration {
	c := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, w := range webhooks {
		c.Webhooks = append(c.Webhooks, admissionregistrationv1.MutatingWebhook{Name: w})
	}
	return c
}

func TestParseSetting(t *testing.T) {
	for _, ok := range []string{"auto", "ipkeeper", "external"} {
		if _, err := ParseSetting(ok); err != nil {
			t.Errorf("ParseSetting(%q): %v", ok, err)
		}
	}
	_, err := ParseSetting("ipam-extensions")
	if err == nil || !strings.Contains(err.Error(), `--claims-controller="ipam-extensions"`) {
		t.Errorf("ParseSetting(ipam-extensions) = %v, want an error naming the flag and value", err)
	}
}

// Auto follows the other controller's webhook: present at start, then
// removed, then back; the fixed settings ignore it.
func TestAutoFollowsTheOtherWebhook(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
		config("ipkeeper", "virt-launcher.ipkeeper.io"),
		config("kubevirt-ipam-controller-mutating-webhook-configuration", ExtensionsWebhook),
	).Build()
	rec := record.NewFakeRecorder(10)
	m, err := New(ctx, Auto, c, rec, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !m.External() || !strings.Contains(m.Name(), "kubevirt-ipam-controller-mutating-webhook-configuration") {
		t.Fatalf("with ipam-extensions' webhook: External %v, Name %q", m.External(), m.Name())
	}
	wake := m.Listen()
	go func() { _ = m.Start(ctx) }()

	if err := c.Delete(ctx, config("kubevirt-ipam-controller-mutating-webhook-configuration")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after the other webhook went")
	}
	if m.External() || m.Name() != "ipkeeper-controller" {
		t.Fatalf("without the other webhook: External %v, Name %q", m.External(), m.Name())
	}
	if err := c.Create(ctx, config("cnao-ipam", "other.example.com", ExtensionsWebhook)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after the other webhook came back")
	}
	if !m.External() {
		t.Fatal("the webhook came back under another configuration name, but External is false")
	}

	for setting, want := range map[Setting]bool{Ipkeeper: false, External: true} {
		fixed, err := New(ctx, setting, c, nil, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if fixed.External() != want {
			t.Errorf("%s: External = %v, want %v", setting, fixed.External(), want)
		}
	}
}

// A failed first look stops the start (nothing may act before the answer
// is known); a failed later look keeps the last answer.
func TestAutoListErrors(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("forbidden")
	failing := fake.NewClientBuilder().WithScheme(scheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return boom },
	}).Build()
	if _, err := New(ctx, Auto, failing, nil, time.Second); !errors.Is(err, boom) || !strings.Contains(err.Error(), "--claims-controller") {
		t.Fatalf("New with a failing list = %v, want an error naming the setting", err)
	}
	if _, err := New(ctx, Ipkeeper, failing, nil, time.Second); err != nil {
		t.Fatalf("--claims-controller=ipkeeper needs no list: %v", err)
	}
}
