// SPDX-License-Identifier: Apache-2.0

package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// InlinePool creates the IPPool of the inline network conf describes,
// exactly as ipkeeper-controller makes it from a NAD with that config in
// namespace ns (inlinepool.Build), for tests that run agents without the
// controller: without a controller, nothing makes an inline network's pool
// and the agent's ADD waits for it. It does nothing when the pool exists,
// and deletes the pool it made when the test ends.
func (cp *ControlPlane) InlinePool(t testing.TB, ns string, conf json.RawMessage) *ipkeeperv1alpha1.IPPool {
	t.Helper()
	cfg, err := ipamconfig.Parse(conf)
	if err != nil {
		t.Fatalf("InlinePool: %v", err)
	}
	if cfg.Pool != "" {
		t.Fatalf("InlinePool: the config names IPPool %q: it has no inline ranges", cfg.Pool)
	}
	pool := inlinepool.Build(cfg, types.NamespacedName{Namespace: ns, Name: cfg.Name})
	ctx := context.Background()
	err = cp.Client.Create(ctx, pool)
	switch {
	case apierrors.IsAlreadyExists(err):
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			t.Fatal(err)
		}
		return pool
	case err != nil:
		t.Fatalf("creating the inline pool of network %q: %v", cfg.Name, err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), pool) })
	return pool
}

// CreateNAD creates NetworkAttachmentDefinition ns/name with config and
// deletes it when the test ends.
func (cp *ControlPlane) CreateNAD(t testing.TB, ns, name string, config json.RawMessage) *nadv1.NetworkAttachmentDefinition {
	t.Helper()
	n := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: string(config)},
	}
	if err := cp.Client.Create(context.Background(), n); err != nil {
		t.Fatalf("creating NAD %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), n) })
	return n
}

// WaitPool waits until IPPool name exists (ipkeeper-controller makes an
// inline network's from its NAD) and returns it.
func (cp *ControlPlane) WaitPool(ctx context.Context, name string) (*ipkeeperv1alpha1.IPPool, error) {
	var p ipkeeperv1alpha1.IPPool
	if err := Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &p)
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		return nil, fmt.Errorf("IPPool %s: %w", name, err)
	}
	return &p, nil
}
