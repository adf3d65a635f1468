// SPDX-License-Identifier: Apache-2.0

package naming

const (
	// ControllerName is ipkeeper-controller's Deployment (in the manifests
	// and the chart) and its default leader election Lease.
	ControllerName = "ipkeeper-controller"
	// DefaultNamespace is the namespace ipkeeper is installed in unless
	// told otherwise.
	DefaultNamespace = "ipkeeper-system"
)
