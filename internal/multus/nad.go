// SPDX-License-Identifier: Apache-2.0

package multus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// persistentIPsKey is the CNI config key by which a network opts in to
// persistent IPs; only the top level of spec.config counts.
const persistentIPsKey = "allowPersistentIPs"

// Network is what a NAD says about its network.
type Network struct {
	// Name is the CNI config "name": the network identity shared by every
	// NAD that uses it.
	Name string
	// AllowPersistentIPs is the top-level "allowPersistentIPs" flag: of the
	// plugin config, or of the conflist (not of its plugins). This is the
	// one rule the controller, the webhook and the agent apply.
	AllowPersistentIPs bool
	// IgnoredFlags lists, comma-separated, the other places of spec.config
	// that set "allowPersistentIPs" (a conflist's plugin, an ipam
	// section), where it has no effect; "" when there are none.
	IgnoredFlags string
}

// FlagProblem explains, when the network does not allow persistent IPs
// but sets the flag where it is ignored, where it was found and where it
// belongs; "" otherwise.
func (n Network) FlagProblem() string {
	if n.AllowPersistentIPs || n.IgnoredFlags == "" {
		return ""
	}
	return fmt.Sprintf("%q is set at %s, where it is ignored; set it at the top level of spec.config", persistentIPsKey, n.IgnoredFlags)
}

// NADError names the NAD, the field and the value that made it unusable.
type NADError struct {
	NAD     types.NamespacedName
	Field   string
	Value   string
	Problem string // what is wrong, for people (not a machine-readable reason)
}

func (e *NADError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("NetworkAttachmentDefinition %s: %s: %s", e.NAD, e.Field, e.Problem)
	}
	return fmt.Sprintf("NetworkAttachmentDefinition %s: %s %s: %s", e.NAD, e.Field, e.Value, e.Problem)
}

// ParseNAD reads the network name and the persistent-IPs flag from a NAD:
// the one place that decides whether a network allows persistent IPs.
// A NAD with an empty spec.config (Multus then reads a file on the node)
// is a network ipkeeper knows nothing about: it is returned as not allowing
// persistent IPs, without error.
func ParseNAD(n *nadv1.NetworkAttachmentDefinition) (Network, error) {
	key := types.NamespacedName{Namespace: n.Namespace, Name: n.Name}
	config := bytes.TrimSpace([]byte(n.Spec.Config))
	if len(config) == 0 {
		return Network{}, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(config, &raw); err != nil {
		return Network{}, &NADError{NAD: key, Field: "spec.config", Problem: "not a JSON object: " + err.Error()}
	}
	var out Network
	nameRaw, ok := raw["name"]
	if !ok {
		return Network{}, &NADError{NAD: key, Field: "spec.config.name", Problem: "missing; every CNI config needs a network name"}
	}
	if err := json.Unmarshal(nameRaw, &out.Name); err != nil {
		return Network{}, &NADError{NAD: key, Field: "spec.config.name", Value: string(nameRaw), Problem: "must be a string"}
	}
	if strings.TrimSpace(out.Name) == "" {
		return Network{}, &NADError{NAD: key, Field: "spec.config.name", Value: fmt.Sprintf("%q", out.Name), Problem: "must not be empty"}
	}
	if flag, ok := raw[persistentIPsKey]; ok {
		if err := json.Unmarshal(flag, &out.AllowPersistentIPs); err != nil {
			return Network{}, &NADError{NAD: key, Field: "spec.config." + persistentIPsKey, Value: string(flag), Problem: "must be true or false"}
		}
	}
	out.IgnoredFlags = strings.Join(ignoredFlags(raw), ", ")
	return out, nil
}

// ignoredFlags lists where below the top level a config sets
// allowPersistentIPs: in its ipam section, or in a conflist's plugins (and
// their ipam sections). Malformed parts are skipped: they are the CNI
// plugins' to report.
func ignoredFlags(top map[string]json.RawMessage) []string {
	var out []string
	inIPAM := func(obj map[string]json.RawMessage, path string) {
		var ipam map[string]json.RawMessage
		if json.Unmarshal(obj["ipam"], &ipam) == nil {
			if _, ok := ipam[persistentIPsKey]; ok {
				out = append(out, path+".ipam."+persistentIPsKey)
			}
		}
	}
	inIPAM(top, "spec.config")
	var plugins []map[string]json.RawMessage
	if json.Unmarshal(top["plugins"], &plugins) != nil {
		return out
	}
	for i, p := range plugins {
		path := fmt.Sprintf("spec.config.plugins[%d]", i)
		if _, ok := p[persistentIPsKey]; ok {
			out = append(out, path+"."+persistentIPsKey)
		}
		inIPAM(p, path)
	}
	return out
}

// ReadNAD reads a NetworkAttachmentDefinition through r and parses it.
// found is false, without error, when it does not exist.
func ReadNAD(ctx context.Context, r client.Reader, key types.NamespacedName) (_ Network, found bool, _ error) {
	var n nadv1.NetworkAttachmentDefinition
	if err := r.Get(ctx, key, &n); err != nil {
		if apierrors.IsNotFound(err) {
			return Network{}, false, nil
		}
		return Network{}, false, fmt.Errorf("reading NetworkAttachmentDefinition %s: %w", key, err)
	}
	network, err := ParseNAD(&n)
	return network, true, err
}

// NADRef resolves a NAD reference as KubeVirt's multus.networkName and
// Multus write it: "name" (in defaultNamespace) or "namespace/name".
func NADRef(ref, defaultNamespace string) (types.NamespacedName, error) {
	ns, name := defaultNamespace, ref
	if i := strings.IndexByte(ref, '/'); i >= 0 {
		ns, name = ref[:i], ref[i+1:]
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("network attachment reference %q: namespace %q: %s", ref, ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("network attachment reference %q: name %q: %s", ref, name, strings.Join(errs, "; "))
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// PluginConfig returns the configuration the IPAM plugin of type ipamType
// reads on stdin for a NAD's network: spec.config itself when its
// ipam.type is ipamType, or, for a conflist, the first plugin whose
// ipam.type is ipamType, with the list's name and cniVersion set as libcni
// passes them. found is false when no plugin of spec.config uses that IPAM.
func PluginConfig(n *nadv1.NetworkAttachmentDefinition, ipamType string) (_ []byte, found bool, _ error) {
	key := types.NamespacedName{Namespace: n.Namespace, Name: n.Name}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(n.Spec.Config), &top); err != nil {
		return nil, false, &NADError{NAD: key, Field: "spec.config", Problem: "not a JSON object: " + err.Error()}
	}
	usesIPAM := func(obj map[string]json.RawMessage) bool {
		var ipam struct {
			Type string `json:"type"`
		}
		return json.Unmarshal(obj["ipam"], &ipam) == nil && ipam.Type == ipamType
	}
	if usesIPAM(top) {
		return []byte(n.Spec.Config), true, nil
	}
	var plugins []map[string]json.RawMessage
	if json.Unmarshal(top["plugins"], &plugins) != nil {
		return nil, false, nil
	}
	for _, p := range plugins {
		if !usesIPAM(p) {
			continue
		}
		for _, k := range []string{"name", "cniVersion"} {
			if v, ok := top[k]; ok {
				p[k] = v
			}
		}
		out, err := json.Marshal(p)
		if err != nil {
			return nil, false, fmt.Errorf("NetworkAttachmentDefinition %s: re-encoding the plugin using IPAM %q: %w", key, ipamType, err)
		}
		return out, true, nil
	}
	return nil, false, nil
}
