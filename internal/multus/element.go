// SPDX-License-Identifier: Apache-2.0

package multus

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrUndecidable is returned when the annotation has several elements that
// could be an attachment and nothing tells which one it is.
var ErrUndecidable = errors.New("cannot tell which network selection element the attachment is")

// Attachment describes one attachment Multus made, for finding its
// element in the pod's networks annotation.
type Attachment struct {
	// IfName is the interface name Multus gave the delegate (CNI_IFNAME).
	IfName string
	// Network is the attachment's CNI network name (the config's "name").
	Network string
	// NetworkOf returns the CNI network name of an element's
	// NetworkAttachmentDefinition, "" when it has none. Nil skips matching
	// by network.
	NetworkOf func(Element) (string, error)
	// DefaultNetworks is how many Multus default networks come before the
	// annotation's elements for this pod; negative when unknown.
	DefaultNetworks int
}

// ElementFor returns the index of the element of the attachment, or -1 when
// no element is it (a Multus default network, or an annotation read before
// the element was added). The rule, exact to Multus (multus-cni v4
// pkg/multus getIfname):
//
//  1. the element whose "interface" is IfName: Multus uses the requested name;
//  2. else, among the elements without "interface" (Multus names those
//     net<N>), the only one whose NAD is the attachment's network;
//  3. else by position: Multus numbers delegates over [cluster default
//     network, default networks..., annotation elements...], so element i
//     (from 0) is net<1+DefaultNetworks+i>.
//
// Where 3 is needed and DefaultNetworks is unknown, or the elements of the
// attachment's network do not fit the position rule, it returns
// ErrUndecidable rather than guess.
func ElementFor(elems []Element, at Attachment) (int, error) {
	for i, e := range elems {
		if e.Interface != "" && e.Interface == at.IfName {
			return i, nil
		}
	}
	var candidates []int
	for i, e := range elems {
		if e.Interface == "" {
			candidates = append(candidates, i)
		}
	}
	if len(candidates) == 0 {
		return -1, nil
	}
	if at.NetworkOf != nil {
		var same []int
		for _, i := range candidates {
			n, err := at.NetworkOf(elems[i])
			if err != nil {
				return -1, err
			}
			if n == at.Network {
				same = append(same, i)
			}
		}
		switch len(same) {
		case 0:
			return -1, nil
		case 1:
			return same[0], nil
		}
		candidates = same
	}
	if at.DefaultNetworks < 0 {
		return -1, fmt.Errorf("%w: interface %s of network %q could be any of elements %s of annotation %s (none sets \"interface\"), and how many Multus default networks precede them is unknown",
			ErrUndecidable, at.IfName, at.Network, indexes(candidates), Annotation)
	}
	for _, i := range candidates {
		if DelegateIfName(1+at.DefaultNetworks+i) == at.IfName {
			return i, nil
		}
	}
	if at.NetworkOf == nil {
		return -1, nil
	}
	return -1, fmt.Errorf("%w: interface %s of network %q is none of elements %s of annotation %s by position, with %d Multus default networks before them (element i is net<%d+i>)",
		ErrUndecidable, at.IfName, at.Network, indexes(candidates), Annotation, at.DefaultNetworks, 1+at.DefaultNetworks)
}

// FindElement is ElementFor for a CNI request: which element the
// attachment is matters only if one of the elements references a claim, so
// only then are NADs read (at.NetworkOf, a live read each). Otherwise only
// whether the attachment is listed at all matters: it returns the element
// whose "interface" is IfName, else the first element without "interface"
// (the attachment may be it by position), else -1.
func FindElement(elems []Element, at Attachment) (int, error) {
	if !slices.ContainsFunc(elems, func(e Element) bool { return e.ClaimRef != "" }) {
		if i := slices.IndexFunc(elems, func(e Element) bool { return e.Interface == at.IfName }); i >= 0 {
			return i, nil
		}
		return slices.IndexFunc(elems, func(e Element) bool { return e.Interface == "" }), nil
	}
	return ElementFor(elems, at)
}

// DelegateIfName is the interface name Multus gives delegate n (counted
// from 0, the cluster default network) when its element requests none:
// net<n>.
func DelegateIfName(n int) string { return fmt.Sprintf("net%d", n) }

// DefaultSystemNamespaces is Multus' default systemNamespaces.
var DefaultSystemNamespaces = []string{"kube-system"}

// DefaultNetworks is how many Multus default networks precede the
// annotation's elements for pods of namespace: none in Multus'
// systemNamespaces (nil means DefaultSystemNamespaces), else configured,
// the number of defaultNetworks in Multus' configuration (negative:
// unknown). This is Attachment.DefaultNetworks.
func DefaultNetworks(namespace string, configured int, systemNamespaces []string) int {
	if systemNamespaces == nil {
		systemNamespaces = DefaultSystemNamespaces
	}
	if slices.Contains(systemNamespaces, namespace) {
		return 0
	}
	return configured
}

func indexes(is []int) string {
	s := make([]string, len(is))
	for k, i := range is {
		s[k] = fmt.Sprint(i)
	}
	return strings.Join(s, ", ")
}
