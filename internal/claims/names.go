// SPDX-License-Identifier: Apache-2.0

package claims

const (
	// Finalizer keeps a claim (and so the VM's addresses) until no VMI or
	// launcher pod uses it; the name is the one existing tools use.
	Finalizer = "kubevirt.io/persistent-ipam"

	// NetworkAnnotation records the KubeVirt logical network name, which a
	// hashed claim name no longer shows.
	NetworkAnnotation = "ipkeeper.io/logical-network"
)
