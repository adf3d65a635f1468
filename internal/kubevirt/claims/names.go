// SPDX-License-Identifier: Apache-2.0

package claims

import (
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
)

// Maker tells whether another controller makes VMs' claims
// (claimmaker.Maker); nil means ipkeeper-controller does.
type Maker interface {
	External() bool
	Name() string
	// Listen wakes a controller each time the answer changes.
	Listen() <-chan event.GenericEvent
}

const (
	// Finalizer keeps a claim (and so the VM's addresses) until no VMI or
	// launcher pod uses it; the name is the one existing tools use.
	Finalizer = "kubevirt.io/persistent-ipam"

	// RetentionFinalizer keeps a claim that records a retention
	// (claimstatus.RetentionAnnotation) until its reservations are retired
	// for it. Finalizer alone cannot: other controllers remove it too
	// (ipam-extensions, on every claim labelled with a VM it saw deleted),
	// and a claim without it goes at once, its addresses freed with their
	// pool's cooldown alone.
	RetentionFinalizer = "ipkeeper.io/retain-addresses"

	// NetworkAnnotation records the KubeVirt logical network name, which a
	// hashed claim name no longer shows.
	NetworkAnnotation = claimstatus.LogicalNetworkAnnotation
)

// RequestedAddressesAnnotation asks for given addresses on a VM's networks:
// on the VM's spec.template.metadata.annotations (a standalone VMI's
// metadata.annotations), a JSON object from the KubeVirt network name to
// its addresses, '{"blue": ["10.0.0.5", "fd00::5"]}'. The name and shape
// are those of KubeVirt's ipam-extensions (which turns it into the
// IPAMClaim's spec.ipRequests) and of the migration toolkit that sets it
// on imported VMs.
const RequestedAddressesAnnotation = "network.kubevirt.io/addresses"
