// SPDX-License-Identifier: Apache-2.0

// Package v1alpha1 holds the ipkeeper.io/v1alpha1 API: IPReservation, one
// cluster-scoped object per reserved (network, IP).
//
// The object's name is derived from (network, IP) alone (see ReservationName),
// so creating it is the allocation lock: the API server refuses a second
// reservation of the same address with AlreadyExists. There is no leader
// election and no shared hot object.
//
// +kubebuilder:object:generate=true
// +groupName=ipkeeper.io
package v1alpha1
