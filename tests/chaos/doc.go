// SPDX-License-Identifier: Apache-2.0

// Package chaos is a randomized, seeded checker of ipkeeper's allocation
// invariants on the real control plane, under faults.
//
// What runs: etcd, kube-apiserver, kube-controller-manager and KubeVirt's
// virt-controller (package framework), the ipkeeper-controller process
// and one ipkeeper-agent process per node. The controller makes the inline pools, fills every
// IPAMClaim (reserves its addresses, then records them in status.ips) and
// garbage-collects reservations (with a short grace period). The agents
// and the controller reach the API server only through a fault-injecting
// reverse proxy (proxy.go). The harness plays the kubelet and the
// container runtime (runtime.go): it creates real Pod objects bound to an
// agent's node, with a Multus networks annotation naming a real
// NetworkAttachmentDefinition, and sends CNI requests through the agent's
// socket as the ipkeeper shim does. IPAMClaims are made as a tool other
// than ipkeeper-controller would make them (no owner labels), besides the
// VMs' own (below). A launcher pod's ADD only
// reads its claim: it waits (--claim-wait-timeout, 3s here) for
// status.ips and fails with CNI code 11 when the controller has not filled
// the claim by then (it is down, or the claim's request is refused): an
// expected outcome, counted as claim-unfilled, after which the pod is torn
// down as for any failed ADD.
//
// Operations (schedule.go, ops.go, claims.go, poolops.go, nodeops.go,
// capiops.go), concurrently on slots:
//   - pods: ADD (new pod, new sandbox, repeated ADD), late DEL of an old
//     sandbox racing the new one's ADD, DEL, CHECK, pod deletion with or
//     without its DEL, static-IP requests, and pods presenting a MAC on a
//     sticky_mac network (pairs of slots on two nodes share one MAC, one
//     pod at a time; the pool cools released addresses down for 20 s);
//   - CNI GC: half of them with a runtime's list that predates the
//     attachments set up in the last 10 s, which the agent must spare by
//     the age their reservations record; a quarter of those come right
//     after the agent restarted between the list and the call;
//   - networks: an inline network whose NAD the controller turns into a
//     pool, one whose name is not an object name (its pool is named by a
//     hash, its reservations by the network name: the pool's lock key),
//     two networks drawing from one named IPPool (a /28 hammered past
//     capacity, with a 2 s reuse cooldown and a per-namespace quota below
//     its size, which the run's namespace reaches), and a dual-stack network with
//     persistent IPs whose pool also serves pods without a claim;
//   - pool edits of the named pool while its addresses are held: a range
//     added and removed, the gateway moved onto a (often held) address,
//     an exclude added and removed, its namespace grant given and revoked
//     (new ADDs then fail with code 7; what is held stays held);
//   - definitions ipkeeper must refuse: a NAD overlapping another
//     network, one disagreeing with its network's pool, one naming a
//     missing pool; a pod's ADD on each must fail (code 7), and nothing
//     of it may remain (I8);
//   - VMs: claim-backed pods starting on one or two nodes at once, live
//     migration, VM restart, claim deletion and re-creation (a quarter of
//     the new claims ask for free addresses with the
//     ipkeeper.io/requested-addresses annotation, a quarter for an address
//     another holds, which must be refused as Taken until it is free), an
//     administrator's edit of a filled claim's status.ips, and now and
//     then a boot storm: every claim made anew and started at once while
//     the controller is killed and restarted;
//   - VMs driven through KubeVirt's real virt-controller, with ipkeeper's
//     pod webhook in the admission path and the controller making their
//     claims (vmops.go; scheduler, kubelet, Multus and virt-handler
//     simulated by framework.KubeVirt, the kubelet's CNI requests sent to
//     the agents): start, live migration, NIC hotplug and unplug, live NAD
//     swaps to another network whose migration succeeds or fails (the
//     user then swaps back), a hotplug or unplug while a swap's migration
//     is pending (a VM's blue network goes round three NADs: from blue-b
//     to blue-c, two CNI networks naming one IPPool with a reuse
//     cooldown, whose new claim must get other addresses of it while the
//     source's launcher runs on the old claim's, pending, failed or
//     rolled back, then to blue-a, an inline pool of its own, and back;
//     vm:swap-in-shared-pool, vm:swap-hotplug-in-shared-pool and
//     vm:swap-fails-in-shared-pool count them, and the short run waits
//     for one done and one failed; I1 and I2 judge them), a move to a
//     receiver VM of another namespace by KubeVirt's decentralized live
//     migration, which succeeds or fails
//     (vmmoveops.go; the synchronization controller simulated too), stop
//     and deletion (in long runs virt-controller, which
//     exits when it loses its lease during an API server restart, is
//     started again as a kubelet would);
//   - in long runs, who makes the VMs' claims: KubeVirt's real
//     ipam-extensions is installed and removed in turns, and the
//     controller leaves claims and references to it, then takes them over
//     (makerops.go);
//   - Cluster API IPAddressClaims of the named pool, made and deleted;
//   - node deletion: a node's agent killed, its pods deleted without DELs,
//     its Node deleted (its blocks must go with it) and made again;
//   - address blocks given back by the controller once empty for 3 s
//     while agents allocate in them.
//
// Faults (faults.go): SIGKILL and restart of an agent or of the
// controller, kube-apiserver restart with etcd kept, etcd compaction with
// every watch cut (re-watches from compacted revisions get 410 Gone),
// watch cuts, and bursts of proxy faults; the proxy also injects, at a
// low background rate, responses dropped after the server applied the
// request, delays, 429s, 500s and 410s to watch requests. The controller
// filling claims gets them all.
//
// Invariants (invariants.go, claimchecks.go, objects.go, poolchecks.go) I1-I15 are
// listed in invariants.go; I9 and I10 are the long run's. I1-I8 are checked
// continuously, from the harness's record of attachments (model.go) and
// live reads, and again at quiescence. I1 covers the pool, not the
// network (two networks of one pool never share an address), and no
// address released in a cooldown pool (the small networks', the VMs'
// red and blue's shared one) goes to another holder before its cooldown ends, but to a claim
// made anew under the releasing claim's name (reservation.KeptFor); I3 also wants every released reservation gone once its
// cooldown is over. I4 (a claim's status.ips are its reservations'
// addresses and its pods get exactly those; a launcher's ADD refused for a
// recorded address that is not the claim's, code 11 when nobody holds it
// or 7 when someone else does, only for a claim the harness edited) lists, without counting them
// as violations, the controller's transient states: reservations of a
// claim that records none yet, reservations beyond what it records (a
// create whose answer was lost), and after an edit the old addresses held
// until the new ones are reserved (or while someone else holds one). I6:
// the controller is the one writer of claims' addresses (a claim's
// recorded addresses never change except by the harness's edit; a
// request, once filled, is what the claim records; at quiescence every
// claim is filled unless its request is refused for an address someone
// else holds) and no agent writes a claim, a claim's reservation or a
// block of IPAMClaims. A continuous check only judges attachments and
// claims no operation of the harness touched between the snapshot and the
// re-check, so an operation's intermediate state is never taken for a
// violation. I7: every reservation is named from its pool's lock key and
// its address, whoever wrote it. I8, at quiescence: no object nobody
// caused (a pool only of the harness or of an accepted NAD, a block only
// of an existing pool and node, claims and IPAddresses only of the
// harness's claims).
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
