// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// vmRecvNamespace holds the receivers of the VMs' moves: KubeVirt's
// decentralized live migration of a running VM to a receiver VM
// (runStrategy WaitAsReceiver) of another namespace, driven by the real
// virt-controller with KubeVirt's synchronization controller and
// virt-handler simulated (framework.KubeVirt.DecentralizedSimulated).
const vmRecvNamespace = "chaos-vms-recv"

// move moves the running VM to a receiver in vmRecvNamespace and judges
// the handover (I10): while both launchers run, each address of the
// source's claims is lent to the receiver's claim of that network, which
// records it (and the receiver's launcher got it: I1 and I2 judge the two
// launchers as one holder); a third of the moves then fail, before or
// after the migration started, and the source's claims keep their
// addresses, lent to nobody;
// the others succeed, and the receiver's claims own them. Both VMs are
// deleted afterwards (a moved VM lives on as the receiver; the actor
// starts a new one). Claims ipam-extensions made (long runs) have no part
// in a handover and are not judged.
func (a *vmActor) move(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (err error) {
	claims, err := a.vmClaims(ctx, a.vm)
	if err != nil {
		return err
	}
	networks := []framework.VMNetwork{{Name: blue, NAD: a.nad}}
	if a.red {
		networks = append(networks, framework.VMNetwork{Name: red, NAD: "red"})
	}
	// The handover is of the networks the receiver has, through the NADs
	// it has: the claim of a network just unplugged, or of the NAD a swap
	// replaced (its release waits for the controller), has none (seed
	// 4128 judged a swapped-out claim of blue against the receiver's).
	var src []ipamclaimsv1alpha1.IPAMClaim
	for _, c := range claims {
		logical := c.Annotations[claimstatus.LogicalNetworkAnnotation]
		if logical == "" || slices.ContainsFunc(networks, func(n framework.VMNetwork) bool { return n.Name == logical && claimThrough(c, n.NAD) }) {
			src = append(src, c)
		}
	}
	holders := make([]string, 0, len(src))
	for _, c := range src {
		holders = append(holders, "claim/"+string(c.UID))
	}
	// The receiver's launcher is one holder with the source's (lent).
	done := a.r.model.touch(holders...)
	defer done()
	a.copies++
	name := fmt.Sprintf("%s-m%d", a.vm.Name, a.copies)
	a.r.vmNames.Store(name, true)
	recvVM, _, err := a.kv.CreateReceiverVM(ctx, vmRecvNamespace, name, networks...)
	if recvVM != nil {
		defer a.deleteQuietly(ctx, recvVM, "move-receiver")
	}
	if err != nil {
		return err
	}
	m, err := a.kv.StartDecentralizedMigration(ctx, vmi, recvVM, a.otherNode(vmi), "chaos-"+name)
	if m != nil {
		// A migration left in progress (a fault stopped the operation)
		// would keep the VM from migrating again: deleting it cancels it.
		defer func() {
			if err != nil {
				a.cancelMigrations(ctx, m)
			}
		}()
	}
	if err != nil {
		return err
	}
	judged := a.judgeMove(ctx, name, src, "lent")
	// A third fail: before the migration started (the target launcher
	// dies) or after (libvirt fails on the source), in turns.
	fail := a.rng.IntN(3) == 0
	switch {
	case fail && a.copies%2 == 0:
		err = m.Fail(ctx)
	case fail:
		err = m.FailAfterStart(ctx)
	default:
		err = m.Complete(ctx)
	}
	if err != nil {
		return err
	}
	if judged {
		if fail {
			a.judgeMove(ctx, name, src, "taken-back")
		} else {
			a.judgeMove(ctx, name, src, "passed")
		}
	}
	if fail {
		return nil
	}
	// KubeVirt halted the source VM: it lives on as the receiver.
	gone := a.vm
	a.vm = nil
	a.deleteQuietly(ctx, gone, "move-source")
	return nil
}

// claimThrough says whether claim c is of network attachment definition
// nad (a name in the VM's namespace), as its claimstatus.NADAnnotation
// records; a claim without one is taken as of any.
func claimThrough(c ipamclaimsv1alpha1.IPAMClaim, nad string) bool {
	recorded := c.Annotations[claimstatus.NADAnnotation]
	return recorded == "" || recorded == c.Namespace+"/"+nad
}

// cancelMigrations deletes a move's two migrations, best effort.
func (a *vmActor) cancelMigrations(ctx context.Context, m *framework.DecentralizedMigration) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, mig := range []*kubevirtv1.VirtualMachineInstanceMigration{m.SendMigration, m.ReceiveMigration} {
		if mig != nil {
			_ = a.kv.C.Delete(dctx, mig)
		}
	}
}

// deleteQuietly deletes a VM the operation made or left, counting a
// failure (the run's faults) rather than failing the operation.
func (a *vmActor) deleteQuietly(ctx context.Context, vm *kubevirtv1.VirtualMachine, what string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), vmTimeout)
	defer cancel()
	if err := a.kv.DeleteVM(dctx, vm, metav1.DeletePropagationForeground); err != nil && !apierrors.IsNotFound(err) {
		a.r.counts.inc("vm-failed:" + what + "-cleanup")
	}
}

// judgeMove checks one step of a move's handover, waiting for it to be
// reached (the controller may be down a while): "lent", "passed" or
// "taken-back". It reports whether the move is judged at all: only when
// ipkeeper-controller made both sides' claims.
func (a *vmActor) judgeMove(ctx context.Context, recvName string, src []ipamclaimsv1alpha1.IPAMClaim, step string) bool {
	c := a.kv.C
	for _, s := range src {
		if s.Annotations[claimstatus.LogicalNetworkAnnotation] == "" {
			a.r.counts.inc("vm:move-not-judged-ipam-extensions")
			return false
		}
	}
	var last string
	// unread: the last look could not read everything (the API server
	// down, a fault of the run): nothing was seen wrong.
	unread, notJudged := false, false
	a.r.counts.inc("check:I10")
	err := framework.Eventually(ctx, copyWait, 100*time.Millisecond, func(ctx context.Context) (ok bool, err error) {
		defer func() { unread = err != nil }()
		for _, s := range src {
			logical := s.Annotations[claimstatus.LogicalNetworkAnnotation]
			var r ipamclaimsv1alpha1.IPAMClaim
			if err := c.Get(ctx, client.ObjectKey{Namespace: vmRecvNamespace, Name: naming.Claim(recvName, logical)}, &r); err != nil {
				last = fmt.Sprintf("receiver's claim of %s: %v", logical, err)
				return false, client.IgnoreNotFound(err)
			}
			if step == "lent" && r.Annotations[claimstatus.ReceiverAnnotation] == "" {
				notJudged = true
				return true, nil
			}
			want := s.Status.IPs
			if step != "taken-back" && !slices.Equal(r.Status.IPs, want) {
				last = fmt.Sprintf("receiver's claim %s records %v, want the source's %v", r.Name, r.Status.IPs, want)
				return false, nil
			}
			for _, ip := range want {
				var res ipkv1alpha1.IPReservation
				key := client.ObjectKey{Name: reservationNameOf(s, ip)}
				if err := c.Get(ctx, key, &res); err != nil {
					last = fmt.Sprintf("reservation of %s: %v", ip, err)
					return false, client.IgnoreNotFound(err)
				}
				owner, lent := res.Spec.Owner.UID, res.Spec.LentTo
				ok := false
				switch step {
				case "lent":
					ok = owner == s.UID && lent != nil && lent.UID == r.UID
				case "passed":
					ok = owner == r.UID && lent == nil
				case "taken-back":
					ok = owner == s.UID && lent == nil
				}
				if !ok || res.Spec.Released() {
					last = fmt.Sprintf("%s: owner %s/%s lentTo %+v released %v", res.Name, res.Spec.Owner.Namespace, res.Spec.Owner.Name, lent, res.Spec.Released())
					return false, nil
				}
			}
		}
		return true, nil
	})
	switch {
	case notJudged:
		a.r.counts.inc("vm:move-not-judged-ipam-extensions")
		return false
	case err != nil && unread:
		a.r.counts.inc("vm:move-not-judged-api-down")
		return false
	case err != nil:
		a.r.violate("I10", "move-not-"+step, fmt.Sprintf("VM %s moved to %s/%s: the handover never reached %q: %s (%v)", a.vm.Name, vmRecvNamespace, recvName, step, last, err), recvName)
		return true
	}
	a.r.counts.inc("vm:move-" + step)
	return true
}

// reservationNameOf is the reservation of one of a claim's recorded
// addresses ("10.64.0.5/26"), in the pool of its network.
func reservationNameOf(c ipamclaimsv1alpha1.IPAMClaim, recorded string) string {
	ip, _ := claimstatus.ParseIP(strings.TrimSpace(recorded))
	for _, n := range vmNetworks {
		if n.name == c.Spec.Network {
			return naming.Reservation(n.key, ip)
		}
	}
	return ""
}
