// Package controller assembles ipkeeper-controller: one controller-runtime
// manager running the claims controllers (package claims), the reservation
// garbage collector (package gc), the self-managed webhook certificates
// (package certs) under leader election, and the virt-launcher pod webhook
// (package webhook) on every replica.
package controller
