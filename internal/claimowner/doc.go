// SPDX-License-Identifier: Apache-2.0

// Package claimowner is the one home of "who owns an IPAMClaim and who may
// use it": the labels and annotation ipkeeper-controller records on claims
// it manages, the owner they name, and whether a virt-launcher pod (through
// its VMI and that VMI's VM) belongs to that owner. The claims controller,
// the pod webhook and the agent all decide with these functions, so they
// cannot disagree. It depends only on API types, so the agent can use it
// without the controller's packages.
package claimowner
