// SPDX-License-Identifier: Apache-2.0

// Package scheme assembles the runtime.Scheme every ipkeeper component uses:
// the Kubernetes built-ins plus IPReservation, IPAMClaim,
// NetworkAttachmentDefinition and KubeVirt's core types.
package scheme

import (
	"fmt"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// New returns a scheme with the built-in types and the network APIs ipkeeper reads and writes.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for name, add := range map[string]func(*runtime.Scheme) error{
		"kubernetes built-ins":              clientgoscheme.AddToScheme,
		"ipkeeper.io/v1alpha1":              ipkeeperv1alpha1.AddToScheme,
		"k8s.cni.cncf.io/v1alpha1 (claims)": ipamclaimsv1alpha1.AddToScheme,
		"k8s.cni.cncf.io/v1 (NADs)":         nadv1.AddToScheme,
		"kubevirt.io/v1":                    kubevirtv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("registering %s: %w", name, err)
		}
	}
	return s, nil
}
