// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimowner"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/controller/podrefs"
	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/kubevirt"
	"github.com/ipkeeper/ipkeeper/internal/multus"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// network is where a claim's addresses come from: its network's ipkeeper
// configuration, as the NAD it was read from gives it.
type network struct {
	cfg *ipamconfig.Config
	nad types.NamespacedName
}

// failure is an IPsAllocated=False condition: one of OVN-Kubernetes'
// reasons and a message for the claim's namespace.
type failure struct {
	reason, message string
	// waiting: the failure passes by itself, without anyone acting (an
	// inline network's pool ipkeeper-controller has not made yet): its
	// Events are Normal, not Warning.
	waiting bool
}

// configError is a problem a change of configuration fixes (or that
// passes, with retry): recorded on the claim as a condition, not
// returned as a reconcile error.
type configError struct {
	failure failure
	retry   bool
	// poolMissing: the network's IPPool does not exist (yet).
	poolMissing bool
}

func (e *configError) Error() string { return e.failure.message }

// refuse is a configError: IPsAllocated=False with the reason of the
// mistake (claimstatus.ReasonNADInvalid, ...).
func refuse(reason string, retry bool, format string, args ...any) *configError {
	return &configError{failure: failure{reason: reason, message: fmt.Sprintf(format, args...)}, retry: retry}
}

func asConfigError(err error) *configError {
	var ce *configError
	if errors.As(err, &ce) {
		return ce
	}
	return nil
}

// networkOf returns the network a claim's addresses come from, or nil
// (without error) for a network ipkeeper does not serve (or whose NAD does
// not exist yet). Only what the claim's owner uses decides it, never a NAD
// of an unrelated namespace that happens to name the same network:
//
//  1. a claim ipkeeper-controller made names its NAD (claimstatus.NADAnnotation);
//  2. a claim a VM or VMI owns (ipam-extensions' claims record no NAD): the
//     NAD of its owner's network of the claim's spec.network, as
//     multus.networkName names it (in the owner's namespace unless it names
//     one): the VM's template first, then its VMI's;
//  3. else the NAD of the claim's element in the networks annotation of the
//     pods that reference it (of an owned claim, only its owner's launchers);
//  4. a claim no VM or VMI owns that no pod references yet (made by hand or
//     by another tool): among the NADs of its spec.network whose IPAM is
//     ipkeeper, those of the claim's namespace first.
//
// An owned claim found in neither 2 nor 3 is not served: its NAD
// appearing, or a launcher, looks at it again. NADs of one network naming
// different pools make the claim's pool ambiguous.
func (r *Reconciler) networkOf(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) (*network, error) {
	if ref := claim.Annotations[claimstatus.NADAnnotation]; ref != "" {
		return r.networkOfNAD(ctx, claim, ref)
	}
	if claim.Spec.Network == "" {
		return nil, nil
	}
	owner, owned := claimowner.Of(claim)
	if owned {
		kinds := []string{claimowner.KindVMI}
		if owner.Kind == claimowner.KindVM {
			kinds = []string{claimowner.KindVM, claimowner.KindVMI}
		}
		for _, kind := range kinds {
			spec, what, err := r.ownerSpec(ctx, claim, owner, kind)
			if err != nil {
				return nil, err
			}
			if spec == nil {
				continue
			}
			if net, found, err := r.oneNetwork(ctx, claim, uses(claim, owner, spec), what); found || err != nil {
				return net, err
			}
		}
	}
	used, err := r.launchersUse(ctx, claim, owner, owned)
	if err != nil {
		return nil, err
	}
	if net, found, err := r.oneNetwork(ctx, claim, used, "the pods referencing the claim"); found || err != nil {
		return net, err
	}
	if owned {
		return nil, nil
	}
	return r.networkAmongNADs(ctx, claim)
}

// nadUse is a NAD the claim's owner or a launcher attaches: a candidate
// for the claim's network.
type nadUse struct {
	nad types.NamespacedName
	// byName: the attachment is the claim's by its name (the claim name of
	// the owner's logical network, or the launcher element's reference),
	// not only by its network.
	byName bool
}

// ownerSpec reads, live, a VMI spec of the claim's owner and says whose it
// is: of kind VM, the VM's template; of kind VMI, the VMI of the owner's
// name (a VM's running one, which a live NAD swap leaves on the old
// network, or a standalone VMI). nil when that object is gone, is not the
// owner's, or KubeVirt's API is not served.
func (r *Reconciler) ownerSpec(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, owner claimowner.Owner, kind string) (*kubevirtv1.VirtualMachineInstanceSpec, string, error) {
	key := client.ObjectKey{Namespace: claim.Namespace, Name: owner.Name}
	if kind == claimowner.KindVM {
		var vm kubevirtv1.VirtualMachine
		err := r.APIReader.Get(ctx, key, &vm)
		switch {
		case gone(err):
			return nil, "", nil
		case err != nil:
			return nil, "", fmt.Errorf("reading VirtualMachine %s, the owner of IPAMClaim %s/%s: %w", key, claim.Namespace, claim.Name, err)
		case vm.UID != owner.UID || vm.Spec.Template == nil:
			return nil, "", nil
		}
		return &vm.Spec.Template.Spec, "VirtualMachine " + key.String(), nil
	}
	var vmi kubevirtv1.VirtualMachineInstance
	err := r.APIReader.Get(ctx, key, &vmi)
	switch {
	case gone(err):
		return nil, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("reading VirtualMachineInstance %s of the owner of IPAMClaim %s/%s: %w", key, claim.Namespace, claim.Name, err)
	case !owner.HasVMI(&vmi):
		return nil, "", nil
	}
	return &vmi.Spec, "VirtualMachineInstance " + key.String(), nil
}

// gone: the object is not there, or its API is not served (no KubeVirt).
func gone(err error) bool { return apierrors.IsNotFound(err) || meta.IsNoMatchError(err) }

// uses lists the NADs of an owner's secondary networks, each marked when
// the claim is that logical network's by name (any name ipkeeper or
// ipam-extensions gives it).
func uses(claim *ipamclaimsv1alpha1.IPAMClaim, owner claimowner.Owner, spec *kubevirtv1.VirtualMachineInstanceSpec) []nadUse {
	var out []nadUse
	for _, n := range kubevirt.SecondaryNetworks(spec) {
		key, err := multus.NADRef(n.NetworkName, claim.Namespace)
		if err != nil {
			continue // KubeVirt's admission refuses such a name
		}
		byName := slices.Contains(naming.ClaimNames(owner.Name, n.Name, claim.Spec.Network), claim.Name) ||
			naming.ExtensionsClaim(owner.Name, n.Name) == claim.Name
		out = append(out, nadUse{nad: key, byName: byName})
	}
	return out
}

// launchersUse lists the NADs of the elements referencing the claim in the
// networks annotations of the pods of its namespace; of an owned claim,
// only those of pods that say they launch its owner (what only KubeVirt's
// controller may write on a pod).
func (r *Reconciler) launchersUse(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, owner claimowner.Owner, owned bool) ([]nadUse, error) {
	pods, err := podrefs.Referencing(ctx, r.Client, claim.Namespace, claim.Name)
	if err != nil {
		return nil, err
	}
	var out []nadUse
	for i := range pods {
		if owned && !owner.RunsPod(&pods[i]) {
			continue
		}
		elems, err := multus.ParseElements(pods[i].Annotations[multus.Annotation], pods[i].Namespace)
		if err != nil {
			continue
		}
		for _, e := range elems {
			if e.ClaimRef == claim.Name {
				out = append(out, nadUse{nad: e.NAD(), byName: true})
			}
		}
	}
	return out, nil
}

// oneNetwork picks the claim's network among the NADs its owner or its
// launchers use: those of the claim's spec.network whose IPAM is
// ipkeeper, the ones that are the claim's by name first. found is false
// when none is. where says whose NADs they are, for the message of an
// ambiguity: they are the owner's own choice, so they are named.
func (r *Reconciler) oneNetwork(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, used []nadUse, where string) (*network, bool, error) {
	type match struct {
		net    network
		byName bool
	}
	var matches []match
	seen := map[types.NamespacedName]bool{}
	for _, u := range used {
		if seen[u.nad] {
			continue
		}
		seen[u.nad] = true
		var nad nadv1.NetworkAttachmentDefinition
		err := r.Client.Get(ctx, u.nad, &nad)
		if apierrors.IsNotFound(err) {
			err = r.APIReader.Get(ctx, u.nad, &nad)
		}
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, false, fmt.Errorf("reading NetworkAttachmentDefinition %s: %w", u.nad, err)
		}
		cfg, found, err := inlinepool.Network(&nad)
		switch {
		case err != nil && u.byName:
			return nil, false, refuse(claimstatus.ReasonNADInvalid, false, "NetworkAttachmentDefinition %s (used by %s): %v", u.nad, where, err)
		case err != nil || !found || cfg.Name != claim.Spec.Network:
			continue
		}
		matches = append(matches, match{net: network{cfg: cfg, nad: u.nad}, byName: u.byName})
	}
	if slices.ContainsFunc(matches, func(m match) bool { return m.byName }) {
		matches = slices.DeleteFunc(matches, func(m match) bool { return !m.byName })
	}
	if len(matches) == 0 {
		return nil, false, nil
	}
	slices.SortFunc(matches, func(a, b match) int { return strings.Compare(a.net.nad.String(), b.net.nad.String()) })
	pools := map[string][]string{}
	for _, m := range matches {
		pools[m.net.cfg.PoolName()] = append(pools[m.net.cfg.PoolName()], "NetworkAttachmentDefinition "+m.net.nad.String())
	}
	if len(pools) > 1 {
		return nil, false, refuse(claimstatus.ReasonNADInvalid, false, "network %q is served by more than one pool in %s: %s; make its NADs name one pool",
			claim.Spec.Network, where, poolList(pools))
	}
	net := matches[0].net
	return &net, true, nil
}

// networkAmongNADs finds the network of a claim nothing tells the NAD of
// (rule 4 of networkOf) among the NADs of its spec.network whose IPAM is
// ipkeeper, those of the claim's namespace first.
func (r *Reconciler) networkAmongNADs(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) (*network, error) {
	var list nadv1.NetworkAttachmentDefinitionList
	if err := r.Client.List(ctx, &list, client.MatchingFields{indexNADNetwork: claim.Spec.Network}); err != nil {
		return nil, fmt.Errorf("listing the NetworkAttachmentDefinitions of network %q: %w", claim.Spec.Network, err)
	}
	nads := list.Items
	if local := slices.DeleteFunc(slices.Clone(nads), func(n nadv1.NetworkAttachmentDefinition) bool { return n.Namespace != claim.Namespace }); len(local) > 0 {
		nads = local
	}
	slices.SortFunc(nads, func(a, b nadv1.NetworkAttachmentDefinition) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	var chosen *network
	pools := map[string][]string{} // pool -> NADs naming it, as the claim's namespace may see them
	for i := range nads {
		cfg, found, err := inlinepool.Network(&nads[i])
		if err != nil || !found {
			continue
		}
		key := types.NamespacedName{Namespace: nads[i].Namespace, Name: nads[i].Name}
		if chosen == nil {
			chosen = &network{cfg: cfg, nad: key}
		}
		who := "a NetworkAttachmentDefinition in another namespace"
		if key.Namespace == claim.Namespace {
			who = "NetworkAttachmentDefinition " + key.String()
		}
		pools[cfg.PoolName()] = append(pools[cfg.PoolName()], who)
	}
	if len(pools) > 1 {
		return nil, refuse(claimstatus.ReasonNADInvalid, false, "network %q is served by more than one pool: %s; make its NADs name one pool, or record the claim's NAD in the annotation %s",
			claim.Spec.Network, poolList(pools), claimstatus.NADAnnotation)
	}
	return chosen, nil
}

// poolList says which NADs name each pool (pool -> who), sorted.
func poolList(pools map[string][]string) string {
	parts := make([]string, 0, len(pools))
	for p, by := range pools {
		parts = append(parts, fmt.Sprintf("IPPool %q (%s)", p, strings.Join(by, ", ")))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// networkOfNAD reads the network of the NAD a claim names.
func (r *Reconciler) networkOfNAD(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, ref string) (*network, error) {
	key, err := multus.NADRef(ref, claim.Namespace)
	if err != nil {
		return nil, refuse(claimstatus.ReasonInvalid, false, "annotation %s: %v", claimstatus.NADAnnotation, err)
	}
	var nad nadv1.NetworkAttachmentDefinition
	err = r.Client.Get(ctx, key, &nad)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, &nad)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, refuse(claimstatus.ReasonNADNotFound, true, "NetworkAttachmentDefinition %s (annotation %s) does not exist", key, claimstatus.NADAnnotation)
	case err != nil:
		return nil, fmt.Errorf("reading NetworkAttachmentDefinition %s: %w", key, err)
	}
	cfg, found, err := inlinepool.Network(&nad)
	switch {
	case err != nil:
		return nil, refuse(claimstatus.ReasonNADInvalid, false, "%v", err)
	case !found:
		return nil, nil // another IPAM's network
	case claim.Spec.Network != "" && cfg.Name != claim.Spec.Network:
		return nil, refuse(claimstatus.ReasonNADInvalid, false, "NetworkAttachmentDefinition %s is network %q, but the claim's spec.network is %q", key, cfg.Name, claim.Spec.Network)
	}
	return &network{cfg: cfg, nad: key}, nil
}

// poolOf returns the network's pool, parsed, with the ranges of younger
// overlapping inline networks blocked.
func (r *Reconciler) poolOf(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network) (*ipam.Pool, error) {
	cfg, name := net.cfg, net.cfg.PoolName()
	var obj ipkeeperv1alpha1.IPPool
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &obj)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, client.ObjectKey{Name: name}, &obj)
	}
	missing := func(waiting bool, format string, args ...any) error {
		ce := refuse(claimstatus.ReasonPoolNotFound, true, format, args...)
		ce.poolMissing, ce.failure.waiting = true, waiting
		return ce
	}
	switch {
	case apierrors.IsNotFound(err) && cfg.Pool != "":
		return nil, missing(false, "network %q uses IPPool %q, which does not exist; create it (see docs/pools.md)", cfg.Name, name)
	case apierrors.IsNotFound(err):
		return nil, missing(true, "the IPPool %q of inline network %q does not exist yet; ipkeeper-controller makes it from the network's NetworkAttachmentDefinitions (their events say why it has not)", name, cfg.Name)
	case err != nil:
		return nil, fmt.Errorf("reading IPPool %s: %w", name, err)
	}
	pool, err := ipam.PoolOf(&obj)
	if err != nil {
		return nil, refuse(claimstatus.ReasonPoolInvalid, false, "IPPool %q of network %q is invalid: %v", name, cfg.Name, err)
	}
	if err := r.poolAdmits(ctx, &obj, claim.Namespace); err != nil {
		return nil, err
	}
	if cfg.Pool == "" {
		// The agent refuses launchers of a NAD that disagrees with its
		// network's one definition (code 7): so does the claim's status.
		if d := inlinepool.CheckDefinition(cfg, &obj, pool.Ranges); d != nil {
			return nil, refuse(claimstatus.ReasonNADInvalid, false, "%s", d.Explain(claim.Namespace, "NetworkAttachmentDefinition "+net.nad.String()))
		}
	}
	if obj.Labels[ipkeeperv1alpha1.InlineLabel] == "true" {
		var pools ipkeeperv1alpha1.IPPoolList
		if err := r.Client.List(ctx, &pools); err != nil {
			return nil, fmt.Errorf("listing IPPools: %w", err)
		}
		overlapped, refused := inlinepool.FindOverlap(cfg.Name, obj.Annotations[ipkeeperv1alpha1.NetworkNameAnnotation], pool.Ranges, &obj, pools.Items,
			func(p *ipkeeperv1alpha1.IPPool) ([]iprange.Range, error) { return ipamconfig.PoolRanges(&p.Spec) })
		if refused != nil {
			return nil, refuse(claimstatus.ReasonNADInvalid, false, "%s", refused.Explain(claim.Namespace, "its NADs"))
		}
		pool.Overlapped = overlapped
	}
	return pool, nil
}

// poolAdmits applies the pool's spec.namespaceSelector
// (ipamconfig.PoolAdmits) to the claim's namespace, read live only for a
// pool that has one. A refusal is a configError: the selector or the
// namespace's labels change to fix it, and the claim is looked at again
// when the pool changes.
func (r *Reconciler) poolAdmits(ctx context.Context, pool *ipkeeperv1alpha1.IPPool, namespace string) error {
	if pool.Spec.NamespaceSelector == nil {
		return nil
	}
	var ns corev1.Namespace
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		return fmt.Errorf("reading namespace %s for IPPool %s's spec.namespaceSelector: %w", namespace, pool.Name, err)
	}
	if err := ipamconfig.PoolAdmits(pool, namespace, ns.Labels); err != nil {
		return refuse(claimstatus.ReasonNotAdmitted, false, "%v", err)
	}
	return nil
}
