// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
)

// anyPod is a pod reader that finds every pod, bound to node-a, with the
// UID "uid-<name>".
type anyPod struct{}

func (anyPod) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	*obj.(*corev1.Pod) = corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: k8stypes.UID("uid-" + key.Name)},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
	}
	return nil
}

func (anyPod) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// BenchmarkAdd is the agent's own work for one ADD of a new pod on an
// inline network (parse, pod, pool, candidate, index), with the API
// server replaced by in-memory stores: what a profile of the ADD path
// shows once the one create is taken out.
func BenchmarkAdd(b *testing.B) {
	a := newTestAgent(b, newFakeStore(), newFakeClaims())
	a.pods = &podLookup{cached: anyPod{}, live: anyPod{}, node: "node-a", metrics: a.metrics}
	conf := []byte(`{"cniVersion":"1.1.0","name":"bench","type":"bridge","ipam":{"type":"ipkeeper","range":"10.128.0.0/12","gateway":"10.128.0.1"}}`)
	// The network's pool, as ipkeeper-controller makes it from the NAD.
	cfg, err := ipamconfig.Parse(conf)
	if err != nil {
		b.Fatal(err)
	}
	a.poolStore.(*fakePoolStore).makeInline(b, cfg, testNAD(cfg))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("pod-%d", i)
		req := &cniproto.Request{
			Command: cniproto.CmdAdd, ContainerID: "sandbox-" + name, Netns: "/var/run/netns/" + name, IfName: "net1",
			Args:   "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=" + name + ";K8S_POD_UID=uid-" + name + ";K8S_POD_INFRA_CONTAINER_ID=sandbox-" + name,
			Config: conf,
		}
		if _, err := a.Add(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
