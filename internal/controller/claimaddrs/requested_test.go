// SPDX-License-Identifier: Apache-2.0

package claimaddrs

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// Moved from the claims package (parseRequested), where the VM's request
// was read before the controller filled claims: the claim annotation is
// now read here, as JSON.
func TestParseRequest(t *testing.T) {
	tests := []struct {
		value   string
		want    string
		errPart string
	}{
		{value: `["10.0.0.5"]`, want: "[10.0.0.5]"},
		{value: `["10.0.0.5/24","fd00::5/64"]`, want: "[10.0.0.5 fd00::5]"},
		{value: `["fd00::5","10.0.0.5"]`, want: "[fd00::5 10.0.0.5]"},
		{value: `[]`, errPart: "0 addresses requested"},
		{value: `null`, errPart: "0 addresses requested"},
		{value: `["10.0.0.5","fd00::5","10.0.0.6"]`, errPart: "3 addresses requested"},
		{value: `["10.0.0.5","10.0.0.6"]`, errPart: "10.0.0.5 and 10.0.0.6 are of the same IP family"},
		{value: `["ten"]`, errPart: `"ten" is not an IP address`},
		{value: `["fe80::1%eth0"]`, errPart: "without a zone"},
		{value: `["::ffff:10.0.0.5"]`, errPart: "IPv4 address as IPv4"},
		// What the claims controller records for a VM annotation it could
		// not read: the VM's Events say why.
		{value: "invalid", errPart: "network.kubevirt.io/addresses annotation could not be read"},
		{value: `"10.0.0.5"`, errPart: claimstatus.RequestedAnnotation + ` "\"10.0.0.5\"" is not a JSON list of addresses`},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			got, err := parseRequest(tt.value)
			if tt.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errPart) {
					t.Fatalf("error = %v, want %q", err, tt.errPart)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != tt.want {
				t.Fatalf("parseRequest = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

// Moved from the claims package (placeRequested): whether the network's
// pool hands a requested address out (Pool.RangeFor), and the prefix it
// is recorded with (prefixOf).
func TestPlaceRequested(t *testing.T) {
	v4 := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1"),
		End: netip.MustParseAddr("10.0.0.200"), Exclude: []netip.Prefix{netip.MustParsePrefix("10.0.0.16/28")}})
	v4b := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.0.1.0/25")})
	v6 := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("fd00::/64")})
	younger := iprange.MustNew(iprange.Spec{Subnet: netip.MustParsePrefix("10.0.0.0/24"), Start: netip.MustParseAddr("10.0.0.150"), End: netip.MustParseAddr("10.0.0.160")})
	tests := []struct {
		name    string
		ranges  []iprange.Range
		blocked []iprange.Range
		ips     []string
		want    string // placed prefixes
		errPart string
	}{
		{name: "inside", ranges: []iprange.Range{v4}, ips: []string{"10.0.0.5"}, want: "[10.0.0.5/24]"},
		{name: "second range of the family", ranges: []iprange.Range{v4, v4b}, ips: []string{"10.0.1.7"}, want: "[10.0.1.7/25]"},
		{name: "dual-stack, both requested", ranges: []iprange.Range{v4, v6}, ips: []string{"10.0.0.5", "fd00::5"}, want: "[10.0.0.5/24 fd00::5/64]"},
		{name: "dual-stack, one requested", ranges: []iprange.Range{v4, v6}, ips: []string{"fd00::5"}, want: "[fd00::5/64]"},
		{name: "outside every range", ranges: []iprange.Range{v4}, ips: []string{"192.168.0.5"}, errPart: `192.168.0.5 is outside every range of IPPool "p"`},
		{name: "family the network lacks", ranges: []iprange.Range{v4}, ips: []string{"fd00::5"}, errPart: "fd00::5 is outside every range"},
		{name: "gateway", ranges: []iprange.Range{v4}, ips: []string{"10.0.0.1"}, errPart: "10.0.0.1 is the gateway"},
		{name: "excluded", ranges: []iprange.Range{v4}, ips: []string{"10.0.0.20"}, errPart: "excluded by 10.0.0.16/28"},
		{name: "past range_end", ranges: []iprange.Range{v4}, ips: []string{"10.0.0.250"}, errPart: "is outside 10.0.0.1-10.0.0.200"},
		{name: "broadcast", ranges: []iprange.Range{v4b}, ips: []string{"10.0.1.127"}, errPart: "broadcast address"},
		// A younger overlapping inline network's addresses are its own.
		{name: "a younger network's", ranges: []iprange.Range{v4}, blocked: []iprange.Range{younger}, ips: []string{"10.0.0.155"},
			errPart: `10.0.0.155 is in the range of a younger inline network that overlaps IPPool "p"`},
		{name: "next to a younger network's", ranges: []iprange.Range{v4}, blocked: []iprange.Range{younger}, ips: []string{"10.0.0.161"}, want: "[10.0.0.161/24]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &ipam.Pool{Name: "p", Key: "p", Ranges: tt.ranges, Overlapped: tt.blocked}
			var got []netip.Prefix
			for _, s := range tt.ips {
				ip := netip.MustParseAddr(s)
				r, err := pool.RangeFor(ip)
				if err != nil {
					if tt.errPart == "" || !strings.Contains(err.Error(), tt.errPart) {
						t.Fatalf("RangeFor(%s) error = %v, want %q", ip, err, tt.errPart)
					}
					return
				}
				if !r.Contains(ip) || r.Usable(ip) != nil {
					t.Fatalf("RangeFor(%s) = %s, which does not hand it out", ip, r)
				}
				got = append(got, prefixOf(pool, ip, []iprange.Range{r}))
			}
			if tt.errPart != "" || fmt.Sprint(got) != tt.want {
				t.Fatalf("placed %v, want %s (error %q)", got, tt.want, tt.errPart)
			}
		})
	}
}

func TestLogicalNetwork(t *testing.T) {
	for _, tt := range []struct {
		annotations map[string]string
		want        string
	}{
		{annotations: map[string]string{claimstatus.LogicalNetworkAnnotation: "podnet-a"}, want: "podnet-a"},
		{annotations: map[string]string{claimstatus.LogicalNetworkAnnotation: ""}, want: "blue"},
		{want: "blue"},
	} {
		claim := &ipamclaimsv1alpha1.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Annotations: tt.annotations}, Spec: ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue"}}
		if got := logicalNetwork(claim); got != tt.want {
			t.Errorf("logicalNetwork(%v) = %q, want %q", tt.annotations, got, tt.want)
		}
	}
}

// A request applies only before the first allocation: afterwards it is
// honoured when the claim holds every requested address, and reported as
// too late otherwise.
func TestJudgeRecorded(t *testing.T) {
	for _, tt := range []struct {
		name      string
		request   string
		recorded  []string
		status    metav1.ConditionStatus
		reason    string
		msgHas    string
		logicalNW string
	}{
		{name: "every requested address held", request: `["10.0.0.5"]`, recorded: []string{"10.0.0.5/24", "fd00::9/64"},
			status: metav1.ConditionTrue, reason: claimstatus.ReasonRequestedReserved, msgHas: `requested 10.0.0.5 reserved for network "blue"; claim addresses 10.0.0.5/24, fd00::9/64`},
		{name: "request written with a prefix", request: `["10.0.0.5/16"]`, recorded: []string{"10.0.0.5/24"}, status: metav1.ConditionTrue, reason: claimstatus.ReasonRequestedReserved},
		{name: "messages name the logical network", request: `["10.0.0.5"]`, recorded: []string{"10.0.0.5/24"}, logicalNW: "podnet",
			status: metav1.ConditionTrue, reason: claimstatus.ReasonRequestedReserved, msgHas: `network "podnet"`},
		{name: "another address held", request: `["10.0.0.6"]`, recorded: []string{"10.0.0.5/24"},
			status: metav1.ConditionFalse, reason: claimstatus.ReasonRequestedAlreadyAllocated, msgHas: "the claim already holds 10.0.0.5/24"},
		{name: "one of two held", request: `["10.0.0.5","fd00::5"]`, recorded: []string{"10.0.0.5/24", "fd00::9/64"},
			status: metav1.ConditionFalse, reason: claimstatus.ReasonRequestedAlreadyAllocated},
		{name: "an unreadable request", request: "invalid", recorded: []string{"10.0.0.5/24"},
			status: metav1.ConditionFalse, reason: claimstatus.ReasonRequestedAlreadyAllocated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			claim := &ipamclaimsv1alpha1.IPAMClaim{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{claimstatus.RequestedAnnotation: tt.request}},
				Spec:       ipamclaimsv1alpha1.IPAMClaimSpec{Network: "blue"},
				Status:     ipamclaimsv1alpha1.IPAMClaimStatus{IPs: tt.recorded},
			}
			if tt.logicalNW != "" {
				claim.Annotations[claimstatus.LogicalNetworkAnnotation] = tt.logicalNW
			}
			c := judgeRecorded(claim)
			if c.Type != claimstatus.ConditionRequested || c.Status != tt.status || c.Reason != tt.reason || !strings.Contains(c.Message, tt.msgHas) {
				t.Errorf("judgeRecorded = %+v, want %s %s with a message holding %q", c, tt.status, tt.reason, tt.msgHas)
			}
		})
	}
}

// A refused request maps its reason to the nearest of OVN-Kubernetes'
// IPsAllocated reasons.
func TestRequestRefused(t *testing.T) {
	for _, tt := range []struct {
		reason, ipsReason string
	}{
		{claimstatus.ReasonRequestedTaken, claimstatus.ReasonConflict},
		{claimstatus.ReasonRequestedExhausted, claimstatus.ReasonExhausted},
		{claimstatus.ReasonRequestedInvalid, claimstatus.ReasonInvalid},
		{claimstatus.ReasonRequestedOutsidePool, claimstatus.ReasonOutsidePool},
		{claimstatus.ReasonRequestedPoolNotFound, claimstatus.ReasonPoolNotFound},
	} {
		for _, retry := range []bool{false, true} {
			out := requestRefused(tt.reason, retry, "%s on network %q", "10.0.0.5", "blue")
			const msg = `10.0.0.5 on network "blue"`
			if out.failure == nil || out.failure.reason != tt.ipsReason || out.failure.message != "the requested addresses are not the claim's: "+msg {
				t.Errorf("%s: failure = %+v, want %s with the message", tt.reason, out.failure, tt.ipsReason)
			}
			if r := out.requested; r == nil || r.Type != claimstatus.ConditionRequested || r.Status != metav1.ConditionFalse || r.Reason != tt.reason || r.Message != msg {
				t.Errorf("%s: requested = %+v, want False %s %q", tt.reason, r, tt.reason, msg)
			}
			if out.retry != retry || len(out.ips) != 0 {
				t.Errorf("%s: retry %v, ips %v; want retry %v and no addresses", tt.reason, out.retry, out.ips, retry)
			}
		}
	}
}
