// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claimmaker"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// In long runs (make chaos DURATION=...), who makes the VMs' claims
// changes during the run: KubeVirt's real
// ipam-extensions (its webhook limited to the VMs' namespace) is installed
// and removed in turns, and ipkeeper-controller (--claims-controller=auto,
// checking every second) leaves claims and launcher references to it, then
// takes them over, while the VMs go on with their operations and the
// run's faults. ipam-extensions has no live NAD swap: a swap while it
// makes the claims fails (counted with the VM failures). In each of its
// turns a probe VM is started once the controller has said it leaves the
// claims (its Event): the probe's claim must be ipam-extensions' alone
// (I9: one maker). Every other invariant holds all along; in particular a
// running VM's address stays reserved for its claim whoever made it (I2).
const (
	// makerFirstAfter lets the VMs do every kind of operation under
	// ipkeeper first; makerMin and makerMax bound each maker's turn.
	makerFirstAfter = 10 * time.Second
	makerMin        = 15 * time.Second
	makerMax        = 30 * time.Second
	// makerSettle bounds how long after a maker change the agents may
	// still act on the old webhook annotation: the controller's check
	// interval (1 s) and the agents' cache of it (10 s), with a margin.
	makerSettle = 13 * time.Second
)

// runMaker installs and removes ipam-extensions in turns until ctx ends,
// and removes it then.
func (r *runner) runMaker(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x3a4e))
	var ext *framework.IPAMExtensions
	defer func() {
		if ext != nil {
			_ = ext.Uninstall(context.Background())
		}
	}()
	wait := makerFirstAfter
	for turn := 0; ; turn++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = makerMin + time.Duration(rng.Int64N(int64(makerMax-makerMin)))
		seq := r.hist.begin(0, "maker", "")
		if ext == nil {
			installed := time.Now()
			var err error
			ext, err = r.c.cp.StartIPAMExtensions(ctx, vmNamespace)
			r.makerChangedAt.Store(time.Now().UnixNano())
			r.hist.end(seq, "ipam-extensions installed "+errString(err))
			if err != nil {
				ext = nil
				r.makerFailed(ctx, err)
				continue
			}
			r.makerExternal.Store(true)
			r.counts.inc("maker:external")
			// A probe fails when a fault of the run hits it (the API server
			// restarting, virt-controller losing its lease): try again.
			for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
				r.virtControllerUp(ctx)
				err := r.probeMaker(ctx, ext.WebhookConfig, installed, fmt.Sprintf("%d-%d", turn, attempt))
				if err == nil {
					break
				}
				r.makerFailed(ctx, err)
			}
			continue
		}
		err := ext.Uninstall(ctx)
		r.makerChangedAt.Store(time.Now().UnixNano())
		r.hist.end(seq, "ipam-extensions removed "+errString(err))
		if err != nil {
			r.makerFailed(ctx, err)
			continue // ext kept: the next turn tries again
		}
		ext = nil
		r.makerExternal.Store(false)
		r.counts.inc("maker:ipkeeper")
	}
}

func (r *runner) makerFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	r.counts.inc("maker:failed")
	r.vmErrs.Store("claims-maker", err.Error())
}

// probeMaker waits for the controller's Event saying it leaves the claims
// to ipam-extensions, then starts a probe VM and checks that its claim is
// ipam-extensions' and not ipkeeper's (I9), then deletes it.
func (r *runner) probeMaker(ctx context.Context, config string, since time.Time, probe string) error {
	c := r.c.cp.Client
	if err := framework.Eventually(ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := c.List(ctx, &events); err != nil {
			return false, nil // the API server may be restarting
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == config && e.Reason == string(claimmaker.ReasonClaimsMaker) &&
				strings.Contains(e.Message, "leaves VMs' IPAMClaims") && !e.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("the controller never said it leaves claims to ipam-extensions: %w", err)
	}
	name := "maker-probe-" + probe
	r.vmNames.Store(name, true)
	vm, err := r.kv.CreateVM(ctx, vmNamespace, name, framework.VMNetwork{Name: blue, NAD: "blue-a"})
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), vmCleanupTimeout)
		defer cancel()
		_ = r.kv.DeleteVM(dctx, vm, metav1.DeletePropagationBackground)
	}()
	node := r.c.nodes[len(name)%numNodes].name
	if _, _, err := r.kv.Start(ctx, vm, node); err != nil {
		return fmt.Errorf("starting probe VM %s: %w", name, err)
	}
	var claim ipamclaimsv1alpha1.IPAMClaim
	if err := c.Get(ctx, client.ObjectKey{Namespace: vmNamespace, Name: name + "." + blue}, &claim); err != nil {
		return fmt.Errorf("probe VM %s's claim: %w", name, err)
	}
	r.counts.inc("check:I9")
	if claimowner.Managed(&claim) || claim.Labels[kubevirtv1.VirtualMachineLabel] != name {
		r.violate("I9", "second-maker", fmt.Sprintf("claim %s/%s of probe VM %s, started while ipam-extensions makes claims, has labels %v: want ipam-extensions' (%s=%s) and not ipkeeper's",
			vmNamespace, claim.Name, name, claim.Labels, kubevirtv1.VirtualMachineLabel, name), claim.Name)
		return nil
	}
	r.counts.inc("maker:probe-ok")
	return nil
}
