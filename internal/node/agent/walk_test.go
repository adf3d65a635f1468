// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"slices"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/calltrace"
	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// The walk of a pod's ADD (docs/development.md, "Two walks"), counted at
// the reservation's create: from Agent.Add it goes down into the engine
// once, and the engine reaches the datastore only through the agent's own
// create, never through another holder's code.
func TestAddWalksDownThroughTheEngine(t *testing.T) {
	store := newFakeStore()
	a := newTestAgent(t, store, newFakeClaims())
	a.pods = &podLookup{cached: anyPod{}, live: anyPod{}, node: "node-a", metrics: a.metrics}
	withBlocks(a, newFakeBlocks())
	conf := []byte(`{"cniVersion":"1.1.0","name":"walk","type":"bridge","ipam":{"type":"ipkeeper","range":"10.128.0.0/16"}}`)
	cfg, err := ipamconfig.Parse(conf)
	if err != nil {
		t.Fatal(err)
	}
	a.poolStore.(*fakePoolStore).makeInline(t, cfg, testNAD(cfg))
	var walk calltrace.Walk
	store.beforeCreate = func(*ipkeeperv1alpha1.IPReservation) error {
		walk = calltrace.Here("github.com/ipkeeper/ipkeeper/")
		return nil
	}
	req := &cniproto.Request{
		Command: cniproto.CmdAdd, ContainerID: "sandbox-p", Netns: "/var/run/netns/p", IfName: "net1",
		Args:   "IgnoreUnknown=1;K8S_POD_NAMESPACE=walk;K8S_POD_NAME=p;K8S_POD_UID=uid-p;K8S_POD_INFRA_CONTAINER_ID=sandbox-p",
		Config: conf,
	}
	if _, err := a.Add(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	walk = walk.From("(*Agent).Add")
	if walk == nil {
		t.Fatal("the create was not made under Agent.Add")
	}
	t.Logf("a pod's ADD, at its reservation's create:\n%s", walk)
	const (
		agentPkg = "internal/node/agent"
		engine   = "internal/ipam"
	)
	pkgs := walk.Packages()
	if !slices.Contains(pkgs, engine) {
		t.Fatalf("the ADD's create does not go through the engine: %v", pkgs)
	}
	allowed := []string{agentPkg, engine, "internal/reservation", "internal/blocks"}
	for _, p := range pkgs {
		if !slices.Contains(allowed, p) {
			t.Errorf("the ADD's walk goes through %s; want only %v", p, allowed)
		}
	}
	if i := slices.Index(pkgs, engine); slices.Contains(pkgs[:i], "internal/reservation") {
		t.Errorf("the ADD writes through reservation before it enters the engine: %v", pkgs)
	}
}
