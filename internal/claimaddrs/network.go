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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimalloc"
	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/inlinepool"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
	"github.com/ipkeeper/ipkeeper/internal/multus"
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
// (without error) for a network ipkeeper does not serve. A claim
// ipkeeper-controller made for a VM names its NAD (claimstatus.NADAnnotation);
// any other claim's network is found among the NADs of its spec.network
// whose IPAM is ipkeeper, those of the claim's namespace first. NADs of one
// network naming different pools make the claim's pool ambiguous.
func (r *Reconciler) networkOf(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim) (*network, error) {
	if ref := claim.Annotations[claimstatus.NADAnnotation]; ref != "" {
		return r.networkOfNAD(ctx, claim, ref)
	}
	if claim.Spec.Network == "" {
		return nil, nil
	}
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
		var parts []string
		for p, by := range pools {
			parts = append(parts, fmt.Sprintf("IPPool %q (%s)", p, strings.Join(by, ", ")))
		}
		slices.Sort(parts)
		return nil, refuse(claimstatus.ReasonNADInvalid, false, "network %q is served by more than one pool: %s; make its NADs name one pool, or record the claim's NAD in the annotation %s",
			claim.Spec.Network, strings.Join(parts, "; "), claimstatus.NADAnnotation)
	}
	return chosen, nil
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
func (r *Reconciler) poolOf(ctx context.Context, claim *ipamclaimsv1alpha1.IPAMClaim, net *network) (*claimalloc.Pool, error) {
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
	pool, err := claimalloc.PoolOf(&obj)
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
