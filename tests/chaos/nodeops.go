// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// nodeBlocksTimeout bounds the wait for kube-controller-manager's garbage
// collector to delete a deleted node's blocks (their owner is the Node).
const nodeBlocksTimeout = 20 * time.Second

// deleteNode plays a node that dies and comes back under the same name:
// its agent is killed, its pods are deleted without a DEL (as the pod
// garbage collector does for a node that is gone), its Node object is
// deleted, and once its blocks are gone with it (or after
// nodeBlocksTimeout, counted) the Node is made again and the agent
// started. The
// controller releases what the node's pods held (I3); the claims of VMs
// that ran there keep their addresses (I4).
func (r *runner) deleteNode(ctx context.Context, st step) {
	n := r.c.nodes[st.node]
	// Every slot of the node, then every claim (a claim's pods may run
	// anywhere): no operation runs on them meanwhile. Operations hold one
	// slot or one claim at a time, so taking them all in a fixed order
	// cannot deadlock.
	var slots []*slot
	for _, pool := range []string{poolPods, poolStatic, poolOdd, poolSmall, poolVMPods, poolSticky} {
		for _, s := range r.slots[pool] {
			if s.node == n {
				s.mu.Lock()
				slots = append(slots, s)
			}
		}
	}
	for _, cs := range r.claims {
		cs.mu.Lock()
	}
	defer func() {
		for _, cs := range r.claims {
			cs.mu.Unlock()
		}
		for _, s := range slots {
			s.mu.Unlock()
		}
	}()
	n.life.Lock()
	defer n.life.Unlock()
	seq := r.hist.begin(st.seq, "NODE", "delete "+n.name)
	err := r.c.restartAgentDoing(ctx, n, func() error { return r.nodeGone(ctx, st.seq, n, slots) })
	r.hist.end(seq, errString(err))
	if err != nil {
		r.harnessError(fmt.Errorf("deleting node %s and starting its agent again: %w", n.name, err))
		return
	}
	r.counts.inc("nodes-deleted")
}

// nodeGone deletes the dead node's pods and its Node object, waits for its
// blocks to go, and makes the Node again.
func (r *runner) nodeGone(ctx context.Context, op int, n *node, slots []*slot) error {
	var doomed []*attachment
	for _, s := range slots {
		if s.pod == nil {
			continue
		}
		doomed = append(doomed, s.pending...)
		if s.cur != nil {
			doomed = append(doomed, s.cur)
		}
		if err := r.deletePod(ctx, op, s.pod); err != nil {
			return err
		}
		s.pod, s.cur, s.pending = nil, nil, nil
		r.stickyPodGone(s, false)
		s.oldMu.Lock()
		s.old = nil
		s.oldMu.Unlock()
	}
	for _, cs := range r.claims {
		for _, p := range slices.Clone(cs.pods) {
			if p.node != n {
				continue
			}
			doomed = append(doomed, p.att)
			if err := r.deletePod(ctx, op, p.pod); err != nil {
				return err
			}
			cs.pods = slices.DeleteFunc(cs.pods, func(q *claimPod) bool { return q == p })
		}
		cs.pending = slices.DeleteFunc(cs.pending, func(a *attachment) bool {
			if a.node == n.name {
				doomed = append(doomed, a)
				return true
			}
			return false
		})
	}
	for _, a := range doomed {
		if r.model.stateOf(a) == attLive {
			r.model.setState(a, attReleasing)
		}
		r.model.setState(a, attDead)
	}
	if err := r.api(ctx, op, "delete-node", n.name, func(ctx context.Context) error {
		return client.IgnoreNotFound(r.c.cp.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}))
	}); err != nil {
		return err
	}
	var left []string
	err := framework.Eventually(ctx, nodeBlocksTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		var blocks ipkv1alpha1.IPBlockList
		if err := r.c.cp.Client.List(ctx, &blocks); err != nil {
			return false, nil // the API server may be restarting
		}
		left = left[:0]
		for _, b := range blocks.Items {
			if b.Spec.Holder != ipkv1alpha1.HolderIPAMClaims && b.Spec.Node == n.name {
				left = append(left, b.Name+" "+b.Spec.CIDR)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		// Not a violation: kube-controller-manager's garbage collector
		// deletes a node's blocks (their owner), and the controller gives
		// back any block left empty, so the run goes on; I8 checks at
		// quiescence that no block of a missing node is left.
		r.counts.inc("node-blocks-outlived-node")
		r.nodeBlocksLeft.Store(n.name, fmt.Sprintf("%v after %s", left, nodeBlocksTimeout))
	}
	return r.api(ctx, op, "create-node", n.name, func(ctx context.Context) error {
		err := framework.EnsureNode(ctx, r.c.cp.Client, n.name)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// claimStorm plays a boot storm of VMs with the controller dying in it:
// every claim is deleted and made anew (its pods stopped first), then,
// at once, every claim's first pod starts while ipkeeper-controller is
// killed and started again. Launchers whose claim the controller has not
// filled within the agent's wait fail with code 11 (claim-unfilled) and
// start later; none gets another's addresses (I1) or addresses its claim
// does not record (I4, I6).
//
// The run's first storm makes its claims while the controller is down
// and starts the controller again only once a launcher's ADD was refused
// for an unfilled claim (or every launcher's ADD returned): so every run,
// however short, sees that refusal. Later storms kill the controller
// while the claims are made and their pods start, as it happens.
func (r *runner) claimStorm(ctx context.Context, st step) {
	held := !r.heldStormDone.Load()
	var wg sync.WaitGroup
	for i, cs := range r.claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// pick 0: the new claim asks for no given address.
			r.claimOp(ctx, step{seq: st.seq, kind: opClaimDelete, pool: poolVM, slot: i, drop: held}, cs)
		}()
	}
	wg.Wait()
	r.c.ctrl.mu.Lock()
	up := r.c.ctrl.up
	r.c.ctrl.mu.Unlock()
	held = held && up && r.heldStormDone.CompareAndSwap(false, true)
	launched := make(chan struct{})
	down := make(chan struct{})
	var gate func(context.Context)
	refusedBefore := r.counts.get("claim-unfilled")
	if held {
		gate = func(ctx context.Context) {
			close(down)
			_ = framework.Eventually(ctx, time.Minute, 50*time.Millisecond, func(context.Context) (bool, error) {
				select {
				case <-launched:
					return true, nil
				default:
					return r.counts.get("claim-unfilled") > refusedBefore, nil
				}
			})
		}
	}
	ctrlDone := make(chan struct{})
	go func() {
		defer close(ctrlDone)
		if !up {
			return // a fault is restarting it already
		}
		r.counts.inc("storm-controller-kills")
		if err := r.c.restartControllerAfter(context.WithoutCancel(ctx), gate); err != nil {
			r.harnessError(fmt.Errorf("restarting the controller in a claim storm: %w", err))
		}
	}()
	if held {
		<-down
	}
	for i, cs := range r.claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.claimOp(ctx, step{seq: st.seq, kind: opClaimStart, pool: poolVM, slot: i, node: (st.node + i) % numNodes, flag: i%3 == 0, pick: st.pick >> i}, cs)
		}()
	}
	wg.Wait()
	close(launched)
	<-ctrlDone
	if held {
		r.counts.add("held-storm-unfilled", r.counts.get("claim-unfilled")-refusedBefore)
	}
}
