// SPDX-License-Identifier: Apache-2.0

// Package capi is ipkeeper's Cluster API IPAM provider: it serves
// IPAddressClaims (ipam.cluster.x-k8s.io) whose spec.poolRef names an
// ipkeeper IPPool, from the same pools, through the same IPReservation
// create (the name of (pool, address) is the lock), as pods and VMs.
//
// It follows the IPAM provider contract of the pinned cluster-api module
// (docs/book/src/developer/providers/contracts/ipam.md): claims of other
// providers are left alone; a paused Cluster (spec.paused or the
// cluster.x-k8s.io/paused annotation, also honoured on the claim itself)
// or a Cluster not found stops reconciliation; a finalizer of ours holds
// the claim until its address is released; the IPAddress has the claim's
// name, is owned by the claim (controller) and the pool, and carries the
// contract's protect-address finalizer; Ready reports the outcome with the
// contract's reasons (PoolNotReady, PoolExhausted, AllocationFailed).
//
// A claim goes through the one lifecycle of claims (package claimlife):
// this package gives the IPAddressClaim kind's steps.
//
// The controllers run in a manager of their own, started only while the
// API server serves Cluster API's IPAM kinds (package manager).
package capi
