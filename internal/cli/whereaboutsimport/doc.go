// SPDX-License-Identifier: Apache-2.0

// Package whereaboutsimport reads whereabouts' allocations (its IPPool and
// OverlappingRangeIPReservation objects, in the format of whereabouts
// v0.9.4) and matches them to the ipkeeper networks their
// NetworkAttachmentDefinitions will use: the pure part of
// `kubectl ipkeeper import whereabouts`. It does no I/O.
package whereaboutsimport
