// SPDX-License-Identifier: Apache-2.0

// Package manager assembles ipkeeper-controller: a controller-runtime
// manager running the reservation garbage collector (package reservationgc) and the
// self-managed webhook certificates (package certs) under leader election,
// and the virt-launcher pod webhook (package webhook) on every replica
// (manager.go, webhook.go); and, while KubeVirt's CRDs are installed, a
// second manager with the claims controllers (package claims), the webhook
// scope and the webhook's caches (kubevirt.go); and, while Cluster API's
// IPAM CRDs are installed, one with the IPAddressClaim controller (package
// capi; clusterapi.go). Both follow discovery the same way (optional.go).
// controller.go says why.
package manager
