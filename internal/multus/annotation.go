// SPDX-License-Identifier: Apache-2.0

package multus

import (
	"encoding/json"
	"fmt"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	"k8s.io/apimachinery/pkg/types"
)

// Annotation is the pod annotation that lists a pod's secondary networks
// (k8s.v1.cni.cncf.io/networks).
const Annotation = nadv1.NetworkAttachmentAnnot

// ClaimRefKey is the element field naming the IPAMClaim of an attachment
// (multi-network spec v1.3).
const ClaimRefKey = "ipam-claim-reference"

// MACKey is the element field asking for the interface's MAC.
const MACKey = "mac"

// Element is one network selection element.
type Element struct {
	Name      string
	Namespace string
	Interface string
	ClaimRef  string
	// MAC is the element's "mac": the MAC Multus gives the interface
	// (CNI_ARGS MAC, and runtimeConfig "mac" to plugins declaring the
	// capability).
	MAC string
	// fields holds every field as written, for a lossless rewrite.
	fields map[string]json.RawMessage
}

// ParseElements reads the annotation in either form Multus accepts: a JSON
// list of elements, or the short "ns/name@iface, name2" form. Namespace
// defaults to podNamespace.
func ParseElements(annotation, podNamespace string) ([]Element, error) {
	s := strings.TrimSpace(annotation)
	if s == "" {
		return nil, nil
	}
	var raw []map[string]json.RawMessage
	if strings.HasPrefix(s, "[") {
		if err := json.Unmarshal([]byte(s), &raw); err != nil {
			return nil, fmt.Errorf("annotation %s: not a JSON list of network selection elements: %w", Annotation, err)
		}
	} else {
		short, err := nadutils.ParseNetworkAnnotation(s, podNamespace)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", Annotation, err)
		}
		for _, e := range short {
			m := map[string]json.RawMessage{"name": quote(e.Name), "namespace": quote(e.Namespace)}
			if e.InterfaceRequest != "" {
				m["interface"] = quote(e.InterfaceRequest)
			}
			raw = append(raw, m)
		}
	}
	out := make([]Element, 0, len(raw))
	for i, m := range raw {
		e := Element{fields: m}
		for key, dst := range map[string]*string{"name": &e.Name, "namespace": &e.Namespace, "interface": &e.Interface, ClaimRefKey: &e.ClaimRef, MACKey: &e.MAC} {
			v, ok := m[key]
			if !ok {
				continue
			}
			if err := json.Unmarshal(v, dst); err != nil {
				return nil, fmt.Errorf("annotation %s: element %d: field %q: want a string, got %s", Annotation, i, key, v)
			}
		}
		if e.Name == "" {
			return nil, fmt.Errorf("annotation %s: element %d: field \"name\" is missing or empty", Annotation, i)
		}
		if e.Namespace == "" {
			e.Namespace = podNamespace
		}
		out = append(out, e)
	}
	return out, nil
}

// NewElement is an element attaching NAD namespace/name, with interface
// iface ("" for none), as virt-controller writes it.
func NewElement(namespace, name, iface string) Element {
	e := Element{Name: name, Namespace: namespace, Interface: iface,
		fields: map[string]json.RawMessage{"name": quote(name), "namespace": quote(namespace)}}
	if iface != "" {
		e.fields["interface"] = quote(iface)
	}
	return e
}

// NAD is the NetworkAttachmentDefinition the element attaches.
func (e *Element) NAD() types.NamespacedName {
	return types.NamespacedName{Namespace: e.Namespace, Name: e.Name}
}

// SetClaimRef sets the element's ipam-claim-reference.
func (e *Element) SetClaimRef(claim string) {
	e.ClaimRef = claim
	e.set(ClaimRefKey, claim)
}

// SetMAC sets the element's mac.
func (e *Element) SetMAC(mac string) {
	e.MAC = mac
	e.set(MACKey, mac)
}

func (e *Element) set(key, v string) {
	if e.fields == nil {
		e.fields = map[string]json.RawMessage{"name": quote(e.Name), "namespace": quote(e.Namespace)}
	}
	e.fields[key] = quote(v)
}

// MarshalElements writes elements back as a JSON list, keeping every
// original field.
func MarshalElements(elems []Element) (string, error) {
	list := make([]map[string]json.RawMessage, len(elems))
	for i, e := range elems {
		list[i] = e.fields
	}
	b, err := json.Marshal(list)
	if err != nil {
		return "", fmt.Errorf("encoding annotation %s: %w", Annotation, err)
	}
	return string(b), nil
}

// ClaimRefs lists the claim names an annotation references; a malformed
// annotation references none.
func ClaimRefs(annotation, podNamespace string) []string {
	elems, err := ParseElements(annotation, podNamespace)
	if err != nil {
		return nil
	}
	var refs []string
	for _, e := range elems {
		if e.ClaimRef != "" {
			refs = append(refs, e.ClaimRef)
		}
	}
	return refs
}

func quote(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}
