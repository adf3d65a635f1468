// SPDX-License-Identifier: Apache-2.0

// Package ipamconfig parses and validates the "ipam" section of a CNI
// network configuration for ipkeeper. It is pure (no I/O, no clients); its
// only Kubernetes import is the IPReservation API package, for the limits
// the API server applies to what a configuration turns into.
//
// # Input
//
// Parse takes the full network configuration, as a plugin reads it on
// stdin. The keys are whereabouts', so a whereabouts network switches to
// ipkeeper by changing only ipam.type:
//
//	name                  network identity; required
//	cniVersion            passed through
//	allowPersistentIPs    top-level bool, passed through
//	runtimeConfig.ips     static IPs ("ips" capability), "a" or "a/n"
//	args.cni.ips          static IPs, same form
//	args.cni.ipam-claim-reference  IPAMClaim name (string), passed through
//	ipam.type             passed through (normally "ipkeeper")
//	ipam.range            "10.1.0.0/24" or "10.1.0.10-10.1.0.50/24"
//	ipam.range_start      first address to hand out
//	ipam.range_end        last address to hand out
//	ipam.exclude          CIDRs (or bare IPs) never handed out
//	ipam.gateway          gateway; never handed out
//	ipam.ipRanges         list of {range, range_start, range_end, exclude, gateway}
//	ipam.routes           list of {dst, gw, mtu, advmss, priority, table, scope}
//	ipam.dns              {nameservers, domain, search, options}
//
// whereabouts' own keys (etcd_host, kubernetes, log_file, ...) are ignored
// and listed (Config.IgnoredKeys). Any other key is unknown: ignored and
// listed with the known key it is closest to (Config.UnknownKeys, "did
// you mean"), unless that key is gateway, exclude, range_start or
// range_end: a misspelling of one of those, ignored, would hand out what
// it keeps back, so Parse refuses it.
// ipam.range with its top-level range_start/range_end/exclude becomes the
// first range, followed by ipam.ipRanges. A top-level exclude without
// ipam.range applies to every range it overlaps (whereabouts would drop
// it). ipam.gateway belongs to the range of its family; a per-entry
// ipRanges[i].gateway is an ipkeeper extension for dual-stack gateways.
//
// # Rules
//
// At most one range per IP family: the result carries one IP per family.
// A range's host bits are ignored ("10.0.0.5/24" is 10.0.0.0/24).
// "A-B/prefix" means range_start A and range_end B in the subnet of
// B/prefix; explicit range_start/range_end must then agree with it.
//
// Start and End never include the network address (for IPv6, the
// subnet-router anycast address) nor the IPv4 broadcast address. An
// explicit range_start or range_end on one of those is clamped inward, not
// rejected. Point-to-point and host prefixes are the exception: in an IPv4
// /31 both addresses are usable (RFC 3021), likewise an IPv6 /127
// (RFC 6164), and a /32 or /128 yields its one address. Start..End is not
// narrowed for the gateway or excludes; the range leaves them out of what
// it hands out, and Parse rejects a range where they leave nothing.
//
// Ranges are iprange.Range values (iprange owns the range arithmetic):
// Parse checks each part against its JSON field first, so iprange.New
// only confirms what was already checked, and names the exclude or
// gateway that leaves nothing to hand out.
//
// Excludes must be the range's family and overlap its subnet; a gateway
// must lie in its subnet. Static IPs must lie in a configured range's
// subnet (with that prefix length, when one is written), at most one per
// family; iprange.Range.Usable decides whether the address may be handed out.
// IP literals are strict (net/netip): no leading-zero octets, and no zones
// except in dns.nameservers.
//
// Nothing that the API server would refuse in an IPReservation gets
// through, so such input fails here, as a configuration error, instead of
// on every ADD: the name follows the CNI specification (a letter or digit,
// then letters, digits, '_', '.', '-') and is at most
// v1alpha1.NetworkMaxLength characters; IPv4-mapped IPv6 literals
// (::ffff:10.0.0.0/120) are refused in ranges, bounds, gateways, routes
// and static IPs with a hint to write them as IPv4; and an IPv6 range may
// not reach into the IPv4-mapped block ::ffff:0:0/96 unless an exclude
// covers it.
//
// # Errors
//
// Every error is a *FieldError naming the JSON path and the offending
// value, for example:
//
//	ipam.range: invalid CIDR "10.0.0.0/33"
//	ipam.ipRanges[1].range_start "10.0.1.5" is outside range "10.0.0.0/24"
//	ipam.exclude[0] "fd00::/64" leaves no usable address in range "fd00::/64"
package ipamconfig
