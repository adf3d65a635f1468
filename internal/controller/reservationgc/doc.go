// SPDX-License-Identifier: Apache-2.0

// Package gc is the reservation garbage collector: it releases
// IPReservations whose owner is gone, so nothing leaks after a node crash,
// a lost CNI DEL, a deleted IPAMClaim or a Cluster API IPAddressClaim
// deleted past its finalizer, and no cron job is needed.
//
// It never releases on cache evidence alone (the way other IPAMs have lost
// live addresses): an owner missing from the cache is confirmed missing by a
// live read, and a pod-owned reservation is released only after a grace
// period during which the pod stayed missing, confirmed again at the end.
// Deletes carry the reservation's UID and resourceVersion as preconditions,
// so a reservation an agent just took over is never deleted by mistake.
package reservationgc
