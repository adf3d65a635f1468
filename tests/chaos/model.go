// SPDX-License-Identifier: Apache-2.0

package chaos

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The harness's own record of what the runtime did and what the agents
// answered: which attachments succeeded and are not deleted yet. The
// invariants compare it with the API server.

// attState is where an attachment is in its life.
type attState int

const (
	attAdding    attState = iota // ADD sent, no answer yet
	attLive                      // ADD succeeded; no DEL sent, pod not deleted
	attFailed                    // ADD failed; the runtime tears it down
	attReleasing                 // DEL sent or pod deleted: the address may go to someone else
	attDead                      // DEL succeeded, or superseded by a new sandbox of the pod
)

func (s attState) String() string {
	return [...]string{"adding", "live", "failed", "releasing", "dead"}[s]
}

// attachment is one sandbox's interface on one network.
type attachment struct {
	network     string
	pool        string
	key         string // the pool's lock key: reservations are named from it
	node        string
	podNS       string
	podName     string
	podUID      types.UID
	ifName      string
	containerID string
	capi        bool      // a Cluster API claim's address (podName, podUID: the claim's)
	claimName   string    // "" for an ephemeral attachment
	claimUID    types.UID // the claim at ADD time
	// lentFrom is the claim whose addresses were lent to the attachment's
	// (a decentralized live migration's receiver, vmmoveops.go): the
	// source's launcher and this one are one holder.
	lentFrom types.UID
	// lentFromName is that claim's name: an address it got back under its
	// name (reservation.KeptFor) and lent on is no reuse (I1).
	lentFromName string
	// lentTo is the claim the attachment's claim's addresses were lent
	// to (the receiver's, when a launcher of it got them): after a
	// successful handover they are that claim's, and this launcher of the
	// source, until its DEL, is still one holder with the receiver's.
	lentTo types.UID
	// remadeClaim: ipkeeper-controller makes (and deletes) the claim, a
	// VM's: one being deleted when the ADD read it is made again while
	// the ADD waits, and the ADD gets the new claim's addresses.
	remadeClaim bool
	// mac is the networks annotation element's mac (a VM launcher's: the
	// webhook's, from the claim), which the runtime passes as CNI_ARGS
	// MAC, as Multus does; "" for none.
	mac string
	// lateDel: its DEL races its pod's next sandbox's ADD (I13 does not
	// count it as a release).
	lateDel bool
	ips     []netip.Addr
	state   attState
	since   time.Time
	// first is when an ADD of the attachment first succeeded: a runtime's
	// list of valid attachments built before then lacks it.
	first time.Time
}

// holder is who owns the attachment's addresses: the claim for a
// claim-backed attachment (all pods of a claim share them), else the pod's
// interface. Two attachments of one holder may share an address.
func (a *attachment) holder() string {
	if a.lentFrom != "" {
		return "claim/" + string(a.lentFrom)
	}
	if a.claimName != "" {
		return "claim/" + string(a.claimUID)
	}
	if a.capi {
		return "capi/" + string(a.podUID)
	}
	return "pod/" + string(a.podUID) + "/" + a.ifName
}

func (a *attachment) String() string {
	claim := ""
	if a.claimName != "" {
		claim = fmt.Sprintf(" claim %s (uid %s)", a.claimName, a.claimUID)
	}
	return fmt.Sprintf("%s/%s (uid %s) on %s %s sandbox %s network %s%s ips %v [%s since %s]",
		a.podNS, a.podName, a.podUID, a.node, a.ifName, a.containerID, a.network, claim, a.ips, a.state, a.since.Format("15:04:05.000"))
}

// model is the record, with per-holder activity so continuous checks
// only judge attachments no operation is changing.
type model struct {
	mu   sync.Mutex
	atts []*attachment // every attachment not known dead (dead ones are dropped now and then)
	adds int
	// busy counts operations in flight that may legitimately change a
	// holder's reservations; gen changes whenever one starts or ends.
	busy map[string]int
	gen  map[string]uint64
	// released says when a holder let an address of a pool with a reuse
	// cooldown go (its DEL sent or pod deleted), so that no other holder
	// gets it within the cooldown (I1).
	released map[string]release
	// claims are the harness's facts about each IPAMClaim, by UID.
	claims map[types.UID]*claimFacts
}

// claimFacts is what the harness knows of one IPAMClaim: what it asked
// for when the harness made it, what it records (as first seen, or as the
// harness's own edit set it), and the harness's last edit of it.
type claimFacts struct {
	requested []netip.Addr
	// fallback: the request asks for other addresses when one it asks
	// for is held (claimstatus.FallbackOtherAddresses).
	fallback bool
	recorded []netip.Addr
	edit     *claimEdit
}

// claimEdit is an administrator's edit of status.ips: from, to.
type claimEdit struct {
	from, to []netip.Addr
}

// release is the earliest moment an address can have been released, and by whom.
type release struct {
	at     time.Time
	holder string
	// claimName is the releasing attachment's claim, if any: a claim made
	// anew under that name may get the address back within the cooldown
	// (reservation.KeptFor).
	claimName string
	// mac is the releasing attachment's MAC on the sticky network: an
	// attachment of its namespace presenting it may get the address back
	// within the cooldown (reservation.KeptForMAC).
	mac string
}

func newModel() *model {
	return &model{busy: map[string]int{}, gen: map[string]uint64{}, released: map[string]release{}, claims: map[types.UID]*claimFacts{}}
}

// touch marks holders busy until the returned function is called.
func (m *model) touch(holders ...string) func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range holders {
		m.busy[h]++
		m.gen[h]++
	}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, h := range holders {
			m.busy[h]--
			m.gen[h]++
		}
	}
}

// add records a new attachment in state adding.
func (m *model) add(a *attachment) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a.state, a.since = attAdding, time.Now()
	m.atts = append(m.atts, a)
	if m.adds++; m.adds%1000 == 0 {
		m.atts = slices.DeleteFunc(m.atts, func(a *attachment) bool { return a.state == attDead })
	}
}

// setState moves a to state.
func (m *model) setState(a *attachment, s attState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// The earliest a live attachment's addresses can be released is when
	// its DEL is first sent (or its pod deleted); a retried DEL, or the
	// late DEL of a superseded sandbox, releases nothing new.
	if s == attReleasing && a.state == attLive && cooldownOf(a.pool) > 0 {
		for _, ip := range a.ips {
			rel := release{at: time.Now(), holder: a.holder(), claimName: a.claimName}
			if isSticky(a) {
				rel.mac = a.mac
			}
			m.released[a.pool+"/"+ip.String()] = rel
		}
	}
	a.state, a.since = s, time.Now()
}

// stateOf returns a's state.
func (m *model) stateOf(a *attachment) attState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return a.state
}

// ipsOf returns a's addresses.
func (m *model) ipsOf(a *attachment) []netip.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(a.ips)
}

// succeeded records a successful ADD and returns the live attachments of
// other holders that hold one of its addresses, and those of its
// addresses another holder released less than the pool's cooldown ago (I1).
func (m *model) succeeded(a *attachment, ips []netip.Addr) (clash, macClash []*attachment, early []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a.ips, a.state, a.since = ips, attLive, time.Now()
	if a.first.IsZero() {
		a.first = a.since
	}
	if cd := cooldownOf(a.pool); cd > 0 {
		for _, ip := range ips {
			rel, ok := m.released[a.pool+"/"+ip.String()]
			if ok && rel.holder != a.holder() && a.since.Before(rel.at.Add(cd)) &&
				(rel.claimName == "" || (!sameVMNetwork(rel.claimName, a.claimName) && !sameVMNetwork(rel.claimName, a.lentFromName))) &&
				(rel.mac == "" || rel.mac != a.mac) {
				early = append(early, fmt.Sprintf("%s released by %s at %s, handed out again %s later (cooldown %s)",
					ip, rel.holder, rel.at.Format("15:04:05.000"), a.since.Sub(rel.at).Round(time.Millisecond), cd))
			}
		}
	}
	for _, o := range m.atts {
		if o == a || o.state != attLive || o.holder() == a.holder() {
			continue
		}
		if o.pool == a.pool && slices.ContainsFunc(ips, func(ip netip.Addr) bool { return slices.Contains(o.ips, ip) }) {
			clash = append(clash, o)
			continue
		}
		// One MAC on two interfaces of one network (I11); two VMs
		// setting one MAC themselves is their own doing.
		if a.mac != "" && o.mac == a.mac && o.network == a.network && !strings.HasPrefix(a.mac, ownMACPrefix) {
			macClash = append(macClash, o)
		}
	}
	return clash, macClash, early
}

// sameVMNetwork reports whether two claim names are of the same VM's
// network: equal, or its plain and swapped names (naming.ClaimNames),
// which begin with the same two labels for the checker's VMs, whose names
// are short DNS labels. A claim made anew under either takes back what
// the other left retained (reservation.KeptFor).
func sameVMNetwork(a, b string) bool {
	if a == b {
		return true
	}
	la, lb := strings.SplitN(a, ".", 3), strings.SplitN(b, ".", 3)
	return len(la) >= 2 && len(lb) >= 2 && la[0] == lb[0] && la[1] == lb[1]
}

// lentFrom records that a's ADD got addresses of claim from, lent to its
// claim uid (made again while the ADD waited, perhaps).
func (m *model) lentFrom(a *attachment, from types.UID, fromName string, uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a.lentFrom, a.lentFromName, a.claimUID = from, fromName, uid
	for _, b := range m.atts {
		if b.claimName != "" && b.claimUID == from {
			b.lentTo = uid
		}
	}
}

// adoptClaim records that a's ADD got the addresses of claim uid, of the
// same name as the one it read before (made again while the ADD waited).
func (m *model) adoptClaim(a *attachment, uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a.claimUID = uid
}

// quietLive is a live attachment whose holder no operation is changing,
// with the holder's generation at the time.
type quietLive struct {
	att *attachment
	gen uint64
}

func (m *model) quietLive() []quietLive {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []quietLive
	for _, a := range m.atts {
		if a.state == attLive && m.busy[a.holder()] == 0 {
			out = append(out, quietLive{att: a, gen: m.gen[a.holder()]})
		}
	}
	return out
}

// stillQuiet reports whether q's attachment is live and its holder has
// not been touched since q was taken: only then is a mismatch seen in
// between a violation rather than an operation's intermediate state.
func (m *model) stillQuiet(q quietLive) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := q.att.holder()
	return q.att.state == attLive && m.busy[h] == 0 && m.gen[h] == q.gen
}

// generations snapshots every holder's generation; the returned function
// gives a holder's generation and whether it was idle at the snapshot.
func (m *model) generations() func(h string) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	gen := make(map[string]uint64, len(m.gen))
	busy := map[string]bool{}
	for h, g := range m.gen {
		gen[h] = g
		busy[h] = m.busy[h] > 0
	}
	return func(h string) (uint64, bool) { return gen[h], !busy[h] }
}

// holderQuiet returns a holder's generation and whether it is idle.
func (m *model) holderQuiet(h string) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen[h], m.busy[h] == 0
}

// live returns the live attachments (a copy of the list).
func (m *model) live() []*attachment {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*attachment
	for _, a := range m.atts {
		if a.state == attLive {
			out = append(out, a)
		}
	}
	return out
}

// snapshot renders a under the model's lock.
func (m *model) describe(a *attachment) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return a.String()
}

// liveOfHolder returns the live attachments of holder h.
func (m *model) liveOfHolder(h string) []*attachment {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*attachment
	for _, a := range m.atts {
		if a.state == attLive && a.holder() == h {
			out = append(out, a)
		}
	}
	return out
}

// claimCreated records a claim the harness made, and what it asked for.
func (m *model) claimCreated(uid types.UID, requested []netip.Addr, fallback bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.claims[uid] = &claimFacts{requested: slices.Clone(requested), fallback: fallback}
}

// claimEdited records the harness's edit of a claim's status.ips: from
// now on the claim records to.
func (m *model) claimEdited(uid types.UID, from, to []netip.Addr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.claimFactsLocked(uid)
	f.recorded, f.edit = slices.Clone(to), &claimEdit{from: slices.Clone(from), to: slices.Clone(to)}
}

// claimFacts returns a copy of what the harness knows of a claim.
func (m *model) claimFacts(uid types.UID) claimFacts {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := *m.claimFactsLocked(uid)
	if f.edit != nil {
		e := *f.edit
		f.edit = &e
	}
	return f
}

func (m *model) claimFactsLocked(uid types.UID) *claimFacts {
	f := m.claims[uid]
	if f == nil {
		f = &claimFacts{}
		m.claims[uid] = f
	}
	return f
}

// recordedOf returns the addresses the claim of holder h is known to
// record. The first time it is seen with addresses (status, read while
// h's generation was gen), those are what it records from then on, if no
// operation of the harness touched h since: a status read in the middle
// of the harness's own edit is never taken for the claim's record.
func (m *model) recordedOf(h string, uid types.UID, gen uint64, status []netip.Addr) []netip.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.claimFactsLocked(uid)
	if f.recorded == nil && len(status) > 0 && m.busy[h] == 0 && m.gen[h] == gen {
		f.recorded = slices.Clone(status)
	}
	return slices.Clone(f.recorded)
}

func formatAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}
