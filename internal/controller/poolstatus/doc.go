// SPDX-License-Identifier: Apache-2.0

// Package poolstatus keeps every IPPool's status (usage per range and per
// IP family, out-of-range and cooling-down counts, the networks using it,
// conditions), its Events and the ipkeeper_controller_pool_addresses metric.
//
// Why it is built this way: a pool can hold tens of thousands of
// reservations and they change in storms (a node drains, a deployment
// scales), so counting must cost neither an API LIST nor a copy of every
// reservation per update. The Index is fed by the reservation informer's
// own add/update/delete events and keeps, per pool, only the distinct held
// addresses (with how many holders, and how many of those are cooling
// down) and the networks seen. A reconcile recounts one pool from that set
// against its current ranges (ranges change live, so counts are not kept
// per range), which is a walk over plain values, made at most once per
// pool per CountInterval (a second), so a storm costs one count per pool
// per second, not one per reservation. Status writes that change only
// the counts wait UsageInterval (10 s) after the last write: every
// node's agent watches every pool, so each write is sent to every node,
// and on a large cluster a pool written every second would cost the API
// server a watch event per node per second. A change of anything else
// (conditions, size, networks) is written with the next count.
//
// The controller runs on the leader only; its informer is started with it
// and its workers wait until the Index has seen every existing
// reservation, so no status is ever written from a partial count.
package poolstatus
