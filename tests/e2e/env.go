// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// Env is what every e2e test shares: the control plane, the agent and the
// CNI plugin search path.
type Env struct {
	CP    *framework.ControlPlane
	Agent *framework.AgentProcess
	// CNIPath is searched for plugins, like a runtime's CNI bin dirs: the
	// agent's --cni-bin-dir (holding the ipkeeper shim it installed) first,
	// then the reference plugins (bridge, macvlan, loopback).
	CNIPath []string
	// CNICacheDir is libcni's result cache, instead of /var/lib/cni.
	CNICacheDir string

	bins *framework.Binaries
	dir  string
}

// Pod identifies a Pod object, as the runtime passes it in CNI_ARGS.
type Pod struct {
	Namespace, Name string
	UID             types.UID
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// CreatePod creates a Pod bound to the agent's node, as the scheduler would
// have. No kubelet runs, so it stays Pending; the tests play the runtime.
// The pod is deleted at once (grace period 0) when t ends.
func (e *Env) CreatePod(t testing.TB, namespace, name string) Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   e.Agent.NodeName,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if err := e.CP.Client.Create(context.Background(), pod); err != nil {
		t.Fatalf("creating pod %s/%s: %v", namespace, name, err)
	}
	t.Cleanup(func() {
		// Without a kubelet a bound pod is only removed by a zero grace period.
		_ = e.CP.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0))
	})
	return Pod{Namespace: namespace, Name: name, UID: pod.UID}
}
