// Package allocator chooses IP addresses from an ipamconfig.Range. It is
// pure: it holds no state and does no I/O; the caller supplies what is
// taken (from the cluster's allocation records) and commits the result.
//
// # Strategy
//
// Candidate hashes the seed with SHA-256, takes 128 bits, and reduces them
// modulo the number of usable addresses of the range; that offset picks the
// first address tried. It then scans upward, wrapping around once. The node
// agent passes pod UID + interface name as the seed, so agents racing on
// the same network start at different addresses instead of all contending
// for the lowest free one, while a retried ADD for the same pod tends to
// land on the same candidate. Deterministic for a given seed.
//
// # Cost
//
// Arithmetic is exact 128-bit (no int64 offsets), so IPv6 /64 and wider
// ranges work. The range is first reduced to its free spans (Start..End
// minus gateway and excludes), at most len(Exclude)+2 of them, so an
// excluded prefix of any size is skipped in one step. The scan calls taken
// once per visited address and visits each usable address at most once; it
// returns as soon as a free address is found, so a huge range with few
// taken addresses answers almost immediately.
//
// # Static requests
//
// Usable checks a requested address against the same rules and says why it
// is refused (outside the range, network or broadcast address, gateway,
// excluded).
package allocator
