// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt/claims"
	ipkv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// A VM's copies, made by KubeVirt's own clone, snapshot and restore
// controllers (in the real virt-controller) while the faults of the run
// go on. The VM is stopped first: virt-handler, which would freeze a
// running guest, is simulated.
//   - clone: the VM asks (on its template) for the address its blue claim
//     holds, as an imported VM does, and is cloned; the clone inherits the
//     request while the source holds the address, so its claim gets other
//     addresses (TakenOtherAddressesGiven), and the clone runs on a node
//     (its launcher's ADDs judged like every other) and is deleted;
//   - restore: a snapshot restored over the VM itself;
//   - delete-restore: a snapshot of the VM, the VM deleted (its claims
//     released), the snapshot restored as a VM of the same name, which
//     the actor goes on with.
// I10 judges each: a restore over the same VM keeps its claims (the same
// objects, the same addresses), a clone never shares a claim or an
// address with its source, a VM restored after its deletion never a
// claim. red's pool and blue's shared one retain addresses (vmops.go): a
// red claim made anew (plugged back, or restored) takes back its name's
// address, counted.

// copyWait bounds an operation's wait for a VM or a claim it makes.
const copyWait = 30 * time.Second

func (a *vmActor) clone(ctx context.Context) error {
	if err := a.kv.Stop(ctx, a.vm); err != nil {
		return err
	}
	src, err := a.vmClaims(ctx, a.vm)
	if err != nil {
		return err
	}
	// The source's blue address, asked for on its template for the time
	// of the clone (left there, a NAD swap of blue to another network
	// would ask the other pool for it).
	var asked string
	if c := claimOf(src, blue); c != nil && len(c.Status.IPs) > 0 {
		asked = c.Status.IPs[0]
		if err := a.setRequest(ctx, fmt.Sprintf(`{%q:[%q]}`, blue, asked)); err != nil {
			return err
		}
	}
	a.copies++
	target := fmt.Sprintf("%s-c%d", a.vm.Name, a.copies)
	a.r.vmNames.Store(target, true)
	clone, err := a.kv.Clone(ctx, a.vm, target, target)
	if asked != "" {
		if uerr := a.setRequest(ctx, ""); uerr != nil && err == nil {
			err = uerr
		}
	}
	if err != nil {
		return err
	}
	defer func() {
		// Deleting the target deletes the (succeeded) clone too.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), vmCleanupTimeout)
		defer cancel()
		if err := a.kv.DeleteVM(dctx, clone, metav1.DeletePropagationForeground); err != nil && !apierrors.IsNotFound(err) {
			a.r.counts.inc("vm-failed:clone-cleanup")
		}
	}()
	node := a.r.c.nodes[a.rng.IntN(numNodes)].name
	if _, _, err := a.kv.Start(ctx, clone, node); err != nil {
		return err
	}
	copied, err := a.vmClaims(ctx, clone)
	if err != nil {
		return err
	}
	a.judgeCopy(a.vm.Name, clone.Name, src, copied, true)
	if c := claimOf(copied, blue); asked != "" && c != nil {
		if cond := meta.FindStatusCondition(c.Status.Conditions, claimstatus.ConditionRequested); cond != nil && cond.Reason == claimstatus.ReasonRequestedTakenOthersGiven {
			a.r.counts.inc("vm:clone-got-other-addresses")
		}
	}
	return nil
}

// restore snapshots the stopped VM and restores the snapshot over it, or,
// with deleteFirst, deletes the VM and restores the snapshot as a VM of
// the same name.
func (a *vmActor) restore(ctx context.Context, deleteFirst bool) error {
	if err := a.kv.Stop(ctx, a.vm); err != nil {
		return err
	}
	a.copies++
	snap := fmt.Sprintf("%s-s%d", a.vm.Name, a.copies)
	if err := a.kv.Snapshot(ctx, a.vm, snap); err != nil {
		return err
	}
	defer func() {
		if err := a.kv.DeleteSnapshot(context.WithoutCancel(ctx), vmNamespace, snap); err != nil {
			a.r.counts.inc("vm-failed:snapshot-cleanup")
		}
	}()
	before, err := a.vmClaims(ctx, a.vm)
	if err != nil {
		return err
	}
	name := a.vm.Name
	var retention time.Duration
	if deleteFirst {
		// The VM's retention as it is when it is deleted.
		var live kubevirtv1.VirtualMachine
		if err := a.kv.C.Get(ctx, client.ObjectKeyFromObject(a.vm), &live); err != nil {
			return fmt.Errorf("reading VirtualMachine %s: %w", name, err)
		}
		retention = claimstatus.CappedRetention(live.Annotations, claims.DefaultMaxRetention)
		deletedAt := time.Now()
		if err := a.kv.DeleteVM(ctx, a.vm, metav1.DeletePropagationForeground); err != nil {
			return err
		}
		gone := a.vm
		a.vm = nil // until the restore made it again
		if err := framework.Eventually(ctx, copyWait, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
			err := a.kv.C.Get(ctx, client.ObjectKeyFromObject(gone), &kubevirtv1.VirtualMachine{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}); err != nil {
			return fmt.Errorf("waiting for VirtualMachine %s to go: %w", name, err)
		}
		if retention > 0 {
			if err := a.judgeRetained(ctx, name, before, deletedAt, retention); err != nil {
				return err
			}
		}
	}
	vm, err := a.kv.Restore(ctx, vmNamespace, snap+"-r", snap, name)
	if err != nil {
		return err
	}
	a.vm = vm
	after, err := a.waitClaims(ctx, vm, len(before))
	if err != nil {
		return err
	}
	if deleteFirst {
		// Its addresses were freed (blue-a's pool retains nothing; red's
		// and blue's shared one keep them for the claim name): the
		// restored VM may get them again, but never its deleted claims.
		a.judgeCopy(name+" (deleted)", name+" (restored)", before, after, false)
		if retention > 0 {
			// Retained for the claim names: the restored VM's claims take
			// them back, also under the other name of the same network
			// (a swapped claim's), unless another writer took one in the
			// instant between the take-back's delete and its create
			// (docs/pools.md).
			return a.judgeTakenBack(ctx, name, before, after)
		}
		return nil
	}
	a.r.counts.inc("check:I10")
	for _, b := range before {
		i := slices.IndexFunc(after, func(c ipamclaimsv1alpha1.IPAMClaim) bool { return c.Name == b.Name })
		if i < 0 || after[i].UID != b.UID || !slices.Equal(after[i].Status.IPs, b.Status.IPs) {
			got := "gone"
			if i >= 0 {
				got = fmt.Sprintf("uid %s ips %v", after[i].UID, after[i].Status.IPs)
			}
			a.r.violate("I10", "restore-changed-claim", fmt.Sprintf("VM %s restored over itself: claim %s had uid %s ips %v, now %s",
				name, b.Name, b.UID, b.Status.IPs, got), b.Name)
		}
	}
	return nil
}

// judgeTakenBack checks I10 for a VM with a retention restored after
// its deletion: each address its claims held is held again by its claim
// of the same network (counted kept), or by someone who took it in the
// instant of the take-back (counted not kept); one still retired for the
// deleted claim's name while the restored claim holds other addresses was
// never taken back: a violation.
func (a *vmActor) judgeTakenBack(ctx context.Context, vm string, before, after []ipamclaimsv1alpha1.IPAMClaim) error {
	var list ipkv1alpha1.IPReservationList
	if err := a.kv.C.List(ctx, &list); err != nil {
		return fmt.Errorf("listing reservations: %w", err)
	}
	for _, b := range before {
		if _, ok := b.Annotations[claimstatus.RetentionAnnotation]; !ok {
			continue
		}
		// Of the same CNI network: a claim of the network's old one (a
		// swap pending when the VM was deleted) has nothing to take back.
		i := slices.IndexFunc(after, func(c ipamclaimsv1alpha1.IPAMClaim) bool {
			return sameVMNetwork(c.Name, b.Name) && c.Spec.Network == b.Spec.Network
		})
		if i < 0 {
			a.r.counts.inc("vm:retained-address-network-gone")
			continue
		}
		if slices.Equal(after[i].Status.IPs, b.Status.IPs) {
			a.r.counts.inc("vm:retained-address-kept")
			continue
		}
		a.r.counts.inc("vm:retained-address-not-kept")
		for _, s := range b.Status.IPs {
			ip := strings.SplitN(s, "/", 2)[0]
			for _, r := range list.Items {
				if o := r.Spec.Owner; r.Spec.IP == ip && r.Spec.Released() && o.Kind == ipkv1alpha1.OwnerIPAMClaim && o.Namespace == b.Namespace && o.Name == b.Name && o.UID == b.UID {
					got := fmt.Sprintf("claim %s records %v", after[i].Name, after[i].Status.IPs)
					a.r.violate("I10", "retained-address-not-taken-back", fmt.Sprintf("VM %s restored after its deletion: %s, which its claim %s held, is still retired for that claim (reservation %s, reusable after %s), but %s",
						vm, ip, b.Name, r.Name, r.Spec.ReuseAfter.UTC().Format(time.RFC3339), got), b.Name)
				}
			}
		}
	}
	return nil
}

// judgeRetained checks I10 for a VM with a retention
// (ipkeeper.io/retain-addresses-for) once it is deleted: when no claim of
// its claims' names is left, each address of its claims that record the
// retention is held by a reservation of a claim of that name (the one
// released, or one made anew meanwhile that took it back and was released
// in turn: a foreground deletion lets the VM's claims be made again
// until the VM is marked deleted), retired until at least the deletion
// plus the retention. Claims another controller made (ipam-extensions',
// which releases them) record none and are not judged.
func (a *vmActor) judgeRetained(ctx context.Context, vm string, claimsOf []ipamclaimsv1alpha1.IPAMClaim, deletedAt time.Time, retention time.Duration) error {
	if err := framework.Eventually(ctx, copyWait, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, c := range claimsOf {
			err := a.kv.C.Get(ctx, client.ObjectKeyFromObject(&c), &ipamclaimsv1alpha1.IPAMClaim{})
			if !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("waiting for the claims of deleted VM %s to go: %w", vm, err)
	}
	var list ipkv1alpha1.IPReservationList
	if err := a.kv.C.List(ctx, &list); err != nil {
		return fmt.Errorf("listing reservations: %w", err)
	}
	a.r.counts.inc("check:I10")
	due := deletedAt.Add(retention).Truncate(time.Second)
	for _, c := range claimsOf {
		if _, ok := c.Annotations[claimstatus.RetentionAnnotation]; !ok {
			continue
		}
		for _, s := range c.Status.IPs {
			ip := strings.SplitN(s, "/", 2)[0]
			i := slices.IndexFunc(list.Items, func(r ipkv1alpha1.IPReservation) bool {
				o := r.Spec.Owner
				return r.Spec.IP == ip && o.Kind == ipkv1alpha1.OwnerIPAMClaim && o.Namespace == c.Namespace && o.Name == c.Name
			})
			switch {
			case i < 0:
				a.r.violate("I10", "retention-not-applied", fmt.Sprintf("VM %s (retention %s) deleted: no reservation of a claim named %s holds its address %s any more", vm, retention, c.Name, ip), c.Name)
			case !list.Items[i].Spec.Released() || list.Items[i].Spec.ReuseAfter.Time.Before(due):
				a.r.violate("I10", "retention-not-applied", fmt.Sprintf("VM %s (retention %s) deleted at %s: the reservation %s of its released claim %s has reuseAfter %v",
					vm, retention, deletedAt.Format("15:04:05"), list.Items[i].Name, c.Name, list.Items[i].Spec.ReuseAfter), c.Name)
			}
		}
	}
	return nil
}

// judgeCopy checks I10 for a copy of a VM: no claim of the copy is its
// source's, and, with addresses (the source still holds them), no
// address either.
func (a *vmActor) judgeCopy(src, copied string, of, got []ipamclaimsv1alpha1.IPAMClaim, addresses bool) {
	a.r.counts.inc("check:I10")
	for _, c := range got {
		for _, s := range of {
			if c.UID == s.UID {
				a.r.violate("I10", "copy-shares-claim", fmt.Sprintf("VM %s has claim %s (uid %s) of its source %s", copied, c.Name, c.UID, src), c.Name)
			}
			for _, ip := range c.Status.IPs {
				if addresses && slices.Contains(s.Status.IPs, ip) {
					a.r.violate("I10", "copy-shares-address", fmt.Sprintf("VM %s's claim %s records %s, which its source %s's claim %s records", copied, c.Name, ip, src, s.Name), c.Name, s.Name)
				}
			}
		}
	}
}

// vmClaims lists the claims a VM controls (made by ipkeeper-controller or
// ipam-extensions), by name.
func (a *vmActor) vmClaims(ctx context.Context, vm *kubevirtv1.VirtualMachine) ([]ipamclaimsv1alpha1.IPAMClaim, error) {
	var list ipamclaimsv1alpha1.IPAMClaimList
	if err := a.kv.C.List(ctx, &list, client.InNamespace(vm.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the IPAMClaims of %s: %w", vm.Namespace, err)
	}
	var out []ipamclaimsv1alpha1.IPAMClaim
	for _, c := range list.Items {
		if ref := metav1.GetControllerOf(&c); ref != nil && ref.UID == vm.UID && c.DeletionTimestamp == nil {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(x, y ipamclaimsv1alpha1.IPAMClaim) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// waitClaims waits for a VM to control n filled claims and returns them.
func (a *vmActor) waitClaims(ctx context.Context, vm *kubevirtv1.VirtualMachine, n int) ([]ipamclaimsv1alpha1.IPAMClaim, error) {
	var out []ipamclaimsv1alpha1.IPAMClaim
	err := framework.Eventually(ctx, copyWait, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		var err error
		if out, err = a.vmClaims(ctx, vm); err != nil {
			return false, err
		}
		return len(out) == n && !slices.ContainsFunc(out, func(c ipamclaimsv1alpha1.IPAMClaim) bool { return len(c.Status.IPs) == 0 }), nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for VM %s's %d claims to be filled: %w", vm.Name, n, err)
	}
	return out, nil
}

// claimOf is the claim of a logical network among a VM's claims (one
// ipkeeper-controller made: others do not record the network).
func claimOf(list []ipamclaimsv1alpha1.IPAMClaim, logical string) *ipamclaimsv1alpha1.IPAMClaim {
	for i := range list {
		if list[i].Annotations[claimstatus.LogicalNetworkAnnotation] == logical {
			return &list[i]
		}
	}
	return nil
}

// setRequest sets (or, with "", removes) the VM template's requested
// addresses annotation.
func (a *vmActor) setRequest(ctx context.Context, value string) error {
	var annotations any // JSON null removes the key
	if value != "" {
		annotations = value
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{claims.RequestedAddressesAnnotation: annotations}}}}})
	if err != nil {
		return err
	}
	if err := a.kv.C.Patch(ctx, a.vm, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting VM %s's requested addresses to %q: %w", a.vm.Name, value, err)
	}
	return nil
}

// noteRedAddress counts whether red, plugged back, got the address its
// claim name had (red's pool retains addresses for a minute): the claim
// made anew takes back what the released one held, unless the faults of
// the run delayed its fill past the cooldown.
func (a *vmActor) noteRedAddress(ctx context.Context) {
	var c *ipamclaimsv1alpha1.IPAMClaim
	if err := framework.Eventually(ctx, copyWait, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		list, err := a.vmClaims(ctx, a.vm)
		if err != nil {
			return false, nil // a fault of the run: tried again
		}
		c = claimOf(list, red)
		return c != nil && len(c.Status.IPs) > 0, nil
	}); err != nil {
		return
	}
	switch {
	case a.redIPs == nil:
	case slices.Equal(a.redIPs, c.Status.IPs):
		a.r.counts.inc("vm:replug-kept-address")
	default:
		a.r.counts.inc("vm:replug-new-address")
	}
	a.redIPs = slices.Clone(c.Status.IPs)
}
