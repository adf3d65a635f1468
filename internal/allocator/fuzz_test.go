// SPDX-License-Identifier: Apache-2.0

package allocator

import (
	"encoding/json"
	"errors"
	"hash/fnv"
	"math/big"
	"net/netip"
	"strings"
	"testing"
)

// FuzzCandidate checks Candidate against a brute-force model on parsed
// ranges with a pseudo-random taken set.
func FuzzCandidate(f *testing.F) {
	f.Add("10.0.0.0/29", "", "", "10.0.0.2/31", "10.0.0.1", "seed", uint8(0))
	f.Add("10.0.0.0/24", "10.0.0.10", "10.0.0.20", "10.0.0.12,10.0.0.16/30", "", "x", uint8(1))
	f.Add("10.0.0.0/31", "", "", "", "", "", uint8(3))
	f.Add("fd00::/120", "", "", "fd00::80/121", "fd00::1", "pod/net1", uint8(2))
	f.Add("fd00::/64", "", "", "fd00::/65", "", "pod/net2", uint8(5))
	f.Add("::/0", "", "", "::/1", "", "s", uint8(7))
	f.Fuzz(func(t *testing.T, subnet, start, end, exclude, gw, seed string, mode uint8) {
		ipam := map[string]any{"range": subnet}
		for k, v := range map[string]string{"range_start": start, "range_end": end, "gateway": gw} {
			if v != "" {
				ipam[k] = v
			}
		}
		if exclude != "" {
			ipam["exclude"] = strings.Split(exclude, ",")
		}
		conf, err := json.Marshal(map[string]any{"name": "fuzz", "ipam": ipam})
		if err != nil {
			t.Skip()
		}
		r, ok := tryParse(conf)
		if !ok {
			t.Skip()
		}

		// Everything is taken only in small ranges, or the scan would run
		// for as long as the range is large.
		small := new(big.Int).Sub(addrInt(r.End()), addrInt(r.Start())).Cmp(big.NewInt(4096)) < 0
		k := uint32(mode%4) + 1 // about one in k addresses is free
		if small && mode >= 128 {
			k = 0 // all taken
		}
		taken := func(a netip.Addr) bool {
			if k == 0 {
				return true
			}
			h := fnv.New32a()
			h.Write(a.AsSlice())
			h.Write([]byte{mode})
			return h.Sum32()%k != 0
		}

		seen := map[netip.Addr]bool{}
		counting := func(a netip.Addr) bool {
			if seen[a] {
				t.Fatalf("taken called twice on %v", a)
			}
			seen[a] = true
			if err := r.Usable(a); err != nil {
				t.Fatalf("taken called on unusable address: %v", err)
			}
			return taken(a)
		}

		ip, err := Candidate(r, counting, seed)
		if err == nil {
			if err := r.Usable(ip); err != nil || taken(ip) {
				t.Fatalf("Candidate = %v (usable: %v, taken: %v)", ip, err, taken(ip))
			}
			again, _ := Candidate(r, taken, seed)
			if again != ip {
				t.Fatalf("not deterministic: %v then %v", ip, again)
			}
			return
		}
		if !errors.Is(err, ErrExhausted) || !small {
			t.Fatalf("Candidate on %v: %v", r, err)
		}
		for a := r.Start(); ; a = a.Next() {
			if r.Usable(a) == nil && !taken(a) {
				t.Fatalf("exhausted, but %v is free", a)
			}
			if a == r.End() {
				break
			}
		}
	})
}
