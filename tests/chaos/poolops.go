// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// poolShape is what the pool-edit operation has done to the shared pool.
type poolShape struct {
	grown      bool // a /29 added to the /28
	gatewayOff bool // the /28's gateway moved from .1 to .14 (often a held address)
	excluded   bool // .8/30 of the /28 excluded (often held addresses)
	revoked    bool // its namespace selector admits no namespace of the run
	granted    bool // its namespace selector names the run's namespace
}

// The aspects a pool edit flips, chosen by step.pick.
var poolAspects = []string{"resize", "gateway", "exclude", "namespace-grant"}

// smallSpec is the shared pool's spec in a shape: a /28 (13 addresses
// besides the gateway) with a 2 s reuse cooldown and a per-namespace
// quota of smallQuota, which the run's one namespace reaches before the
// pool is full unless an exclude shrank it (I15); grown by a /29 the
// pool-edit operation adds and removes while addresses there are held;
// its gateway and an exclude moved onto addresses that may be held; and
// the namespaces it admits narrowed to the run's, or to none.
func smallSpec(s poolShape) ipkv1alpha1.IPPoolSpec {
	first := ipkv1alpha1.PoolRange{Range: "10.61.0.0/28", Gateway: "10.61.0.1"}
	if s.gatewayOff {
		first.Gateway = "10.61.0.14"
	}
	if s.excluded {
		first.Exclude = []string{"10.61.0.8/30"}
	}
	spec := ipkv1alpha1.IPPoolSpec{Ranges: []ipkv1alpha1.PoolRange{first}, ReuseCooldown: &ipkv1alpha1.Duration{Duration: smallCooldown},
		MaxAddressesPerNamespace: ptr.To[int32](smallQuota)}
	if s.grown {
		spec.Ranges = append(spec.Ranges, ipkv1alpha1.PoolRange{Range: "10.61.1.0/29", Gateway: "10.61.1.1"})
	}
	switch {
	case s.revoked:
		spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"ipkeeper.io/chaos": "nobody"}}
	case s.granted:
		spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}}
	}
	return spec
}

// editPool changes one aspect of the shared pool while addresses there
// may be held: what is held stays held (I2), nothing is handed out twice
// (I1) or reserved under another name (I7). While the run's namespace is
// not admitted, ADDs of the small networks fail with code 7 and claims of
// the pool (Cluster API) stay unfilled.
func (r *runner) editPool(ctx context.Context, st step) {
	aspect := poolAspects[st.pick%uint64(len(poolAspects))]
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	shape := r.pool
	switch aspect {
	case "resize":
		shape.grown = !shape.grown
	case "gateway":
		shape.gatewayOff = !shape.gatewayOff
	case "exclude":
		shape.excluded = !shape.excluded
	case "namespace-grant":
		// A pool without a selector, then one naming the namespace, then
		// one admitting none, then naming it again.
		shape.revoked, shape.granted = !shape.revoked && shape.granted, true
	}
	seq := r.hist.begin(st.seq, "POOL", fmt.Sprintf("%s %s -> %+v", smallPool, aspect, shape))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := framework.Eventually(ctx, 10*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		var p ipkv1alpha1.IPPool
		if err := r.c.cp.Client.Get(ctx, client.ObjectKey{Name: smallPool}, &p); err != nil {
			return false, nil // the API server may be down: a fault of the run
		}
		p.Spec = smallSpec(shape)
		return r.c.cp.Client.Update(ctx, &p) == nil, nil
	})
	r.hist.end(seq, errString(err))
	if err != nil {
		r.counts.inc("pool-edit-failed")
		return
	}
	r.pool = shape
	r.counts.inc("pool-edit:" + aspect)
}

// The definitions ipkeeper must refuse, tried in turn.
var badDefinitions = []string{"overlapping", "disagreeing", "missing-pool"}

// badNAD makes a NAD ipkeeper must refuse, tries a pod's ADD on it, and
// deletes both: the ADD fails (code 7, or 11 while the API server
// misbehaves), and the refused definition leaves nothing behind that
// changes another network (I8 at quiescence: no pool of it; I1, I2 and I7
// all along for the networks it collides with).
func (r *runner) badNAD(ctx context.Context, st step) {
	// In turn, so that a short run tries each.
	kind := badDefinitions[int(r.badSeq.Add(1))%len(badDefinitions)]
	name := fmt.Sprintf("bad-%d", st.seq)
	netName := "chaos-" + name
	ipam := map[string]any{"type": "ipkeeper"}
	switch kind {
	case "overlapping": // another network, in the ordinary pods' range
		ipam["range"] = "10.60.0.128/25"
		r.refusedMu.Lock()
		r.refused[netName] = name
		r.refusedMu.Unlock()
	case "disagreeing": // the ordinary pods' network, with other ranges
		netName = networks[poolPods].name
		ipam["range"] = "10.60.9.0/24"
	case "missing-pool":
		ipam["pool"] = "chaos-missing"
	}
	net := &network{nad: name, name: netName, pool: netName, key: netName, config: map[string]any{
		"cniVersion": "1.0.0", "name": netName, "type": "bridge", "ipam": ipam,
	}}
	raw, err := json.Marshal(net.config)
	if err != nil {
		r.harnessError(err)
		return
	}
	nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: string(raw)}}
	if r.api(ctx, st.seq, "create-nad", name+" ("+kind+")", func(ctx context.Context) error {
		err := r.c.cp.Client.Create(ctx, nad.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}) != nil {
		return
	}
	defer func() {
		_ = r.api(ctx, st.seq, "delete-nad", name, func(ctx context.Context) error {
			return client.IgnoreNotFound(r.c.cp.Client.Delete(ctx, nad.DeepCopy()))
		})
	}()
	n := r.c.nodes[st.node]
	pod, err := r.createPod(ctx, st.seq, name, n.name, map[string]any{"name": name, "namespace": namespace, "interface": ifName})
	if err != nil {
		return
	}
	a := r.newAttachment(pod, n, net)
	_, err = r.cni(ctx, st.seq, n, cniproto.CmdAdd, a, net.netConf(""))
	code, isCNI := cniCode(err)
	switch {
	case err == nil:
		r.violate("I8", "refused-definition-served", fmt.Sprintf("ADD on NAD %s (%s definition of network %q) succeeded; ipkeeper must refuse it", name, kind, netName),
			pod.Name, a.containerID)
	case isCNI && code == 7:
		r.counts.inc("bad-nad-refused:" + kind)
	default: // code 11 while the API server misbehaves, or the agent down
		r.counts.inc("bad-nad-other")
	}
	// The runtime tears a failed sandbox down; its DEL may fail while the
	// agent is down, which costs nothing here: the pod goes next.
	_, _ = r.cni(ctx, st.seq, n, cniproto.CmdDel, a, net.netConf(""))
	_ = r.deletePod(ctx, st.seq, pod)
}
