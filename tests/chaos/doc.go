// SPDX-License-Identifier: Apache-2.0

// Package chaos is a randomized, seeded checker of ipkeeper's allocation
// invariants on the real control plane, under faults.
//
// What runs: etcd, kube-apiserver and kube-controller-manager (package
// framework), the ipkeeper-controller process (for its reservation garbage
// collector, with a short grace period) and one ipkeeper-agent process per
// node. The agents and the controller reach the API server only through a
// fault-injecting reverse proxy (proxy.go). The harness plays the kubelet
// and the container runtime (runtime.go): it creates real Pod objects
// bound to an agent's node, with a Multus networks annotation naming a
// real NetworkAttachmentDefinition, and sends CNI requests through the
// agent's socket as the ipkeeper shim does. IPAMClaims are made as a tool
// other than ipkeeper-controller would make them (no owner labels), so no
// VM is needed; KubeVirt is not simulated beyond that.
//
// Operations (schedule.go, ops.go, claims.go), concurrently on slots:
// ADD (new pod, new sandbox, repeated ADD), late DEL of an old sandbox
// racing the new one's ADD, DEL, CHECK, CNI GC, pod deletion with or
// without its DEL, claim-backed pods starting on one or two nodes at once,
// live migration, VM restart, claim deletion and re-creation, static-IP
// requests, and two networks drawing from one explicit IPPool (a /28,
// hammered past capacity, with a 2s reuse cooldown) that the pool-resize
// operation grows by a range and shrinks again while addresses there are
// held.
//
// Faults (faults.go): SIGKILL and restart of an agent or of the
// controller, kube-apiserver restart with etcd kept, etcd compaction with
// every watch cut (re-watches from compacted revisions get 410 Gone),
// watch cuts, and bursts of proxy faults; the proxy also injects, at a
// low background rate, responses dropped after the server applied the
// request, delays, 429s, 500s and 410s to watch requests.
//
// Invariants (invariants.go) I1-I5 are checked continuously, from the
// harness's record of attachments (model.go) and live reads, and again at
// quiescence. I1 covers the pool, not the network (two networks of one
// pool never share an address), and no address released in the cooldown
// pool goes to another holder before its cooldown ends; I3 also wants
// every released reservation gone once its cooldown is over.
// A continuous check only judges attachments whose holder no
// operation touched between the snapshot and the re-check, so an
// operation's intermediate state is never taken for a violation.
//
// Reproducibility: the operation schedule, the fault schedule and the
// proxy's decisions come from generators seeded by CHAOS_SEED; the same
// seed replays the same sequence of operations and faults (timing, and so
// the interleaving, differs). A violation prints the seed, the objects
// involved and the recent history (history.go).
//
//	make chaos SEED=7 DURATION=10m   # long run
//	make test-chaos                  # the short fixed-seed run make test does
package chaos
