// SPDX-License-Identifier: Apache-2.0

package ipamconfig_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// errorCases are invalid configs with the field the error must name and
// the message (exact when exact is set, else a required substring).
var errorCases = []struct {
	name  string
	conf  string
	field string
	msg   string
	exact bool
}{
	// JSON shape
	{"empty input", ``, "config", "invalid JSON", false},
	{"not JSON", `{"name":`, "config", "invalid JSON", false},
	{"top level not an object", `[]`, "config", "expected an object, got JSON array", false},
	{"name missing", `{"ipam":{"range":"10.0.0.0/24"}}`, "name", "name: required", true},
	{"name blank", `{"name":"  ","ipam":{"range":"10.0.0.0/24"}}`, "name", "name: required", true},
	{"name wrong type", `{"name":5,"ipam":{"range":"10.0.0.0/24"}}`, "name", "name: expected a string, got JSON number", true},
	{"ipam missing", `{"name":"n"}`, "ipam", "ipam: required", true},
	{"ipam null", `{"name":"n","ipam":null}`, "ipam", "ipam: required", true},
	{"ipam wrong type", `{"name":"n","ipam":"x"}`, "ipam", "ipam: expected an object, got JSON string", true},
	{"range wrong type", netconf(`{"range":24}`), "ipam.range", "ipam.range: expected a string, got JSON number", true},
	{"exclude not a list", netconf(`{"range":"10.0.0.0/24","exclude":"10.0.0.0/28"}`), "ipam.exclude", "expected an array, got JSON string", false},
	{"allowPersistentIPs wrong type", `{"name":"n","allowPersistentIPs":"yes","ipam":{"range":"10.0.0.0/24"}}`, "allowPersistentIPs", "expected a boolean", false},
	{"runtimeConfig.ips wrong type", `{"name":"n","runtimeConfig":{"ips":"10.0.0.5"},"ipam":{"range":"10.0.0.0/24"}}`, "runtimeConfig.ips", "expected an array", false},

	// range
	{"no range", netconf(`{"type":"ipkeeper"}`), "ipam.range", "ipam.range: required (or ipam.ipRanges)", true},
	{"empty ipRanges", netconf(`{"ipRanges":[]}`), "ipam.range", "ipam.range: required (or ipam.ipRanges)", true},
	{"range_start without range", netconf(`{"range_start":"10.0.0.5","ipRanges":[{"range":"10.0.0.0/24"}]}`), "ipam.range_start", `ipam.range_start "10.0.0.5" requires ipam.range`, true},
	{"range_end without range", netconf(`{"range_end":"10.0.0.5","ipRanges":[{"range":"10.0.0.0/24"}]}`), "ipam.range_end", `ipam.range_end "10.0.0.5" requires ipam.range`, true},
	{"prefix too long", netconf(`{"range":"10.0.0.0/33"}`), "ipam.range", `ipam.range: invalid CIDR "10.0.0.0/33"`, true},
	{"ipv6 prefix too long", netconf(`{"range":"fd00::/129"}`), "ipam.range", `ipam.range: invalid CIDR "fd00::/129"`, true},
	{"range without prefix", netconf(`{"range":"10.0.0.1"}`), "ipam.range", `ipam.range: invalid CIDR "10.0.0.1"`, true},
	{"range garbage", netconf(`{"range":"ten/8"}`), "ipam.range", `ipam.range: invalid CIDR "ten/8"`, true},
	{"range leading zeros", netconf(`{"range":"010.0.0.0/8"}`), "ipam.range", `invalid CIDR "010.0.0.0/8"`, false},
	{"ipRanges entry without range", netconf(`{"ipRanges":[{"range_start":"10.0.0.1"}]}`), "ipam.ipRanges[0].range", "ipam.ipRanges[0].range: required", true},
	{"ipRanges entry invalid", netconf(`{"ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/200"}]}`), "ipam.ipRanges[1].range", `ipam.ipRanges[1].range: invalid CIDR "fd00::/200"`, true},

	// A-B/prefix
	{"A-B bad start", netconf(`{"range":"10.0.0.x-10.0.0.50/24"}`), "ipam.range", `ipam.range: invalid start address "10.0.0.x" in "10.0.0.x-10.0.0.50/24"`, false},
	{"A-B bad end", netconf(`{"range":"10.0.0.5-10.0.0.50"}`), "ipam.range", `ipam.range: invalid CIDR "10.0.0.50" in "10.0.0.5-10.0.0.50"`, false},
	{"A-B start outside", netconf(`{"range":"10.0.1.5-10.0.0.50/24"}`), "ipam.range", `ipam.range "10.0.1.5-10.0.0.50/24": start 10.0.1.5 is outside 10.0.0.0/24`, true},
	{"A-B mixed families", netconf(`{"range":"fd00::1-10.0.0.50/24"}`), "ipam.range", `start fd00::1 is outside 10.0.0.0/24`, false},
	{"A-B start after end", netconf(`{"range":"10.0.0.50-10.0.0.10/24"}`), "ipam.range", `ipam.range "10.0.0.50-10.0.0.10/24": start 10.0.0.50 is after end 10.0.0.10`, true},
	{"A-B conflicting range_start", netconf(`{"range":"10.0.0.10-10.0.0.50/24","range_start":"10.0.0.11"}`), "ipam.range_start", `ipam.range_start "10.0.0.11" conflicts with range "10.0.0.10-10.0.0.50/24"`, true},
	{"A-B conflicting range_end", netconf(`{"range":"10.0.0.10-10.0.0.50/24","range_end":"10.0.0.11"}`), "ipam.range_end", `ipam.range_end "10.0.0.11" conflicts with range "10.0.0.10-10.0.0.50/24"`, true},
	{"A-B leaves nothing", netconf(`{"range":"10.0.0.255-10.0.0.255/24"}`), "ipam.range_start", `ipam.range_start "10.0.0.255" leaves no usable address in range "10.0.0.0/24"`, false},

	// range_start / range_end
	{"range_start invalid", netconf(`{"range":"10.0.0.0/24","range_start":"10.0.0.300"}`), "ipam.range_start", `ipam.range_start: invalid IP "10.0.0.300"`, true},
	{"range_start with zone", netconf(`{"range":"fe80::/64","range_start":"fe80::5%eth0"}`), "ipam.range_start", `ipam.range_start: invalid IP "fe80::5%eth0" (IPv6 zones are not allowed)`, true},
	{"range_end invalid", netconf(`{"range":"10.0.0.0/24","range_end":"x"}`), "ipam.range_end", `ipam.range_end: invalid IP "x"`, true},
	{"range_start outside", netconf(`{"ipRanges":[{"range":"fd00::/64"},{"range":"10.0.0.0/24","range_start":"10.0.1.5"}]}`), "ipam.ipRanges[1].range_start", `ipam.ipRanges[1].range_start "10.0.1.5" is outside range "10.0.0.0/24"`, true},
	{"range_end other family", netconf(`{"range":"10.0.0.0/24","range_end":"fd00::1"}`), "ipam.range_end", `ipam.range_end "fd00::1" is outside range "10.0.0.0/24"`, true},
	{"range_start after range_end", netconf(`{"range":"10.0.0.0/24","range_start":"10.0.0.50","range_end":"10.0.0.10"}`), "ipam.range_start", `ipam.range_start "10.0.0.50" is after range_end "10.0.0.10"`, true},
	{"range_end on network address", netconf(`{"range":"10.0.0.0/24","range_end":"10.0.0.0"}`), "ipam.range_end", `ipam.range_end "10.0.0.0" leaves no usable address in range "10.0.0.0/24" (the network and broadcast addresses are never handed out)`, true},
	{"range_start on broadcast address", netconf(`{"range":"10.0.0.0/24","range_start":"10.0.0.255"}`), "ipam.range_start", `ipam.range_start "10.0.0.255" leaves no usable address in range "10.0.0.0/24"`, false},
	{"ipv6 range_end on anycast address", netconf(`{"range":"fd00::/64","range_end":"fd00::"}`), "ipam.range_end", `ipam.range_end "fd00::" leaves no usable address in range "fd00::/64"`, false},

	// families
	{"two ipv4 ranges", netconf(`{"ipRanges":[{"range":"10.0.0.0/24"},{"range":"10.0.1.0/24"}]}`), "ipam.ipRanges", "ipam.ipRanges: two ranges of family IPv4 (10.0.0.0/24 and 10.0.1.0/24)", false},
	{"range and ipRanges same family", netconf(`{"range":"fd00::/64","ipRanges":[{"range":"fd01::/64"}]}`), "ipam.ipRanges", "ipam.ipRanges: two ranges of family IPv6 (fd00::/64 and fd01::/64)", false},
	{"three ranges", netconf(`{"ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/64"},{"range":"10.0.0.0/24"}]}`), "ipam.ipRanges", "two ranges of family IPv4", false},

	// exclude
	{"exclude invalid", netconf(`{"range":"10.0.0.0/24","exclude":["10.0.0.0/24","nope"]}`), "ipam.exclude[1]", `ipam.exclude[1]: invalid CIDR "nope"`, true},
	{"exclude other family", netconf(`{"range":"10.0.0.0/24","exclude":["fd00::/64"]}`), "ipam.exclude[0]", `ipam.exclude[0] "fd00::/64" is IPv6 but range "10.0.0.0/24" is IPv4`, true},
	{"exclude not overlapping", netconf(`{"range":"10.0.0.0/24","exclude":["10.0.1.0/28"]}`), "ipam.exclude[0]", `ipam.exclude[0] "10.0.1.0/28" does not overlap range "10.0.0.0/24"`, true},
	{"exclude covers the range", netconf(`{"range":"fd00::/64","exclude":["fd00::/64"]}`), "ipam.exclude[0]", `ipam.exclude[0] "fd00::/64" leaves no usable address in range "fd00::/64"`, true},
	{"wider exclude covers the range", netconf(`{"ipRanges":[{"range":"10.0.0.0/24","exclude":["10.0.0.0/16"]}]}`), "ipam.ipRanges[0].exclude[0]", `ipam.ipRanges[0].exclude[0] "10.0.0.0/16" leaves no usable address in range "10.0.0.0/24"`, true},
	{"exclude covers range_start..range_end", netconf(`{"range":"10.0.0.0/24","range_start":"10.0.0.16","range_end":"10.0.0.31","exclude":["10.0.0.16/28"]}`), "ipam.exclude[0]", `ipam.exclude[0] "10.0.0.16/28" leaves no usable address in range "10.0.0.0/24"`, true},
	{"excludes together cover the range", netconf(`{"range":"10.0.0.0/29","exclude":["10.0.0.4/30","10.0.0.0/30"]}`), "ipam.exclude[0]", `ipam.exclude[0] "10.0.0.4/30" leaves no usable address in range "10.0.0.0/29" (together with the other excludes and the gateway)`, true},
	{"excludes and gateway cover the range", netconf(`{"range":"10.0.0.0/30","exclude":["10.0.0.1"],"gateway":"10.0.0.2"}`), "ipam.gateway", `ipam.gateway "10.0.0.2" leaves no usable address in range "10.0.0.0/30"`, false},
	{"gateway is the only address", netconf(`{"range":"10.0.0.1/32","gateway":"10.0.0.1"}`), "ipam.gateway", `ipam.gateway "10.0.0.1" leaves no usable address in range "10.0.0.1/32"`, true},
	{"top-level exclude invalid", netconf(`{"exclude":["x"],"ipRanges":[{"range":"10.0.0.0/24"}]}`), "ipam.exclude[0]", `ipam.exclude[0]: invalid CIDR "x"`, true},
	{"top-level exclude overlaps nothing", netconf(`{"exclude":["10.0.0.0/28","192.168.0.0/24"],"ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/64"}]}`), "ipam.exclude[1]", `ipam.exclude[1] "192.168.0.0/24" does not overlap any range (10.0.0.0/24, fd00::/64)`, true},
	{"top-level exclude covers an ipRange", netconf(`{"exclude":["10.0.0.0/8"],"ipRanges":[{"range":"10.0.0.0/24"}]}`), "ipam.exclude[0]", `ipam.exclude[0] "10.0.0.0/8" leaves no usable address in range "10.0.0.0/24"`, true},

	// gateway
	{"gateway invalid", netconf(`{"range":"10.0.0.0/24","gateway":"10.0.0"}`), "ipam.gateway", `ipam.gateway: invalid IP "10.0.0"`, true},
	{"gateway outside", netconf(`{"range":"10.0.0.0/24","gateway":"10.0.1.1"}`), "ipam.gateway", `ipam.gateway "10.0.1.1" is outside range "10.0.0.0/24"`, true},
	{"gateway family without range", netconf(`{"range":"10.0.0.0/24","gateway":"fd00::1"}`), "ipam.gateway", `ipam.gateway "fd00::1" is IPv6 but no IPv6 range is configured (10.0.0.0/24)`, true},
	{"ipRanges gateway invalid", netconf(`{"ipRanges":[{"range":"10.0.0.0/24","gateway":"g"}]}`), "ipam.ipRanges[0].gateway", `ipam.ipRanges[0].gateway: invalid IP "g"`, true},
	{"gateway conflict", netconf(`{"gateway":"10.0.0.2","ipRanges":[{"range":"10.0.0.0/24","gateway":"10.0.0.1"}]}`), "ipam.gateway", `ipam.gateway "10.0.0.2" conflicts with ipam.ipRanges[0].gateway "10.0.0.1"`, true},

	// routes
	{"route without dst", netconf(`{"range":"10.0.0.0/24","routes":[{"gw":"10.0.0.1"}]}`), "ipam.routes[0].dst", "ipam.routes[0].dst: required", true},
	{"route dst invalid", netconf(`{"range":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0"},{"dst":"default"}]}`), "ipam.routes[1].dst", `ipam.routes[1].dst: invalid CIDR "default"`, true},
	{"route gw invalid", netconf(`{"range":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.999"}]}`), "ipam.routes[0].gw", `ipam.routes[0].gw: invalid IP "10.0.0.999"`, true},
	{"route gw family", netconf(`{"range":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","gw":"fd00::1"}]}`), "ipam.routes[0].gw", `ipam.routes[0].gw "fd00::1" is IPv6 but dst "0.0.0.0/0" is IPv4`, true},
	{"route mtu wrong type", netconf(`{"range":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","mtu":"big"}]}`), "ipam.routes.mtu", "expected a number, got JSON string", false},

	// dns
	{"dns nameserver invalid", netconf(`{"range":"10.0.0.0/24","dns":{"nameservers":["10.0.0.53","dns.example"]}}`), "ipam.dns.nameservers[1]", `ipam.dns.nameservers[1]: invalid IP "dns.example"`, true},
	{"dns wrong type", netconf(`{"range":"10.0.0.0/24","dns":["10.0.0.53"]}`), "ipam.dns", "expected an object, got JSON array", false},

	// static IPs
	{"static invalid", `{"name":"n","runtimeConfig":{"ips":["10.0.0.5/99"]},"ipam":{"range":"10.0.0.0/24"}}`, "runtimeConfig.ips[0]", `runtimeConfig.ips[0]: invalid IP or CIDR "10.0.0.5/99"`, true},
	{"static outside", `{"name":"n","runtimeConfig":{"ips":["10.9.0.5/24"]},"ipam":{"ipRanges":[{"range":"10.0.0.0/24"},{"range":"fd00::/64"}]}}`, "runtimeConfig.ips[0]", `runtimeConfig.ips[0] "10.9.0.5/24" is outside every configured range (10.0.0.0/24, fd00::/64)`, true},
	{"static prefix mismatch", `{"name":"n","runtimeConfig":{"ips":["10.0.0.5/16"]},"ipam":{"range":"10.0.0.0/24"}}`, "runtimeConfig.ips[0]", `runtimeConfig.ips[0] "10.0.0.5/16": prefix length /16 does not match range "10.0.0.0/24"`, true},
	{"two static of one family", `{"name":"n","runtimeConfig":{"ips":["10.0.0.5","10.0.0.6"]},"ipam":{"range":"10.0.0.0/24"}}`, "runtimeConfig.ips[1]", `runtimeConfig.ips[1] "10.0.0.6": a second IPv4 address (10.0.0.5 already requested by runtimeConfig.ips[0]); one static IP per family`, true},
	{"args.cni.ips conflicts with runtimeConfig", `{"name":"n","runtimeConfig":{"ips":["fd00::5"]},"args":{"cni":{"ips":["fd00::6/64"]}},"ipam":{"range":"fd00::/64"}}`, "args.cni.ips[0]", `args.cni.ips[0] "fd00::6/64": a second IPv6 address`, false},
	{"args.cni.ips invalid", `{"name":"n","args":{"cni":{"ips":[""]}},"ipam":{"range":"fd00::/64"}}`, "args.cni.ips[0]", `args.cni.ips[0]: invalid IP or CIDR ""`, true},
	{"args.cni claim reference not a string", `{"name":"n","args":{"cni":{"ipam-claim-reference":{"name":"vm1"}}},"ipam":{"range":"10.0.0.0/24"}}`, "args.cni.ipam-claim-reference", `args.cni.ipam-claim-reference: expected a string, got JSON object`, true},

	// Values the API server refuses in an IPReservation (its CRD schema and
	// CEL rules): refused here as configuration errors, never sent.
	{"IPv4-mapped range", netconf(`{"range":"::ffff:10.0.0.0/120"}`), "ipam.range", `ipam.range "::ffff:10.0.0.0/120" is an IPv4-mapped IPv6 prefix, whose addresses an IPReservation cannot hold; write it as IPv4 "10.0.0.0/24"`, true},
	{"IPv4-mapped ipRanges entry", netconf(`{"ipRanges":[{"range":"10.0.0.0/24"},{"range":"::ffff:10.1.0.0/112"}]}`), "ipam.ipRanges[1].range", `write it as IPv4 "10.1.0.0/16"`, false},
	{"IPv4-mapped A-B range", netconf(`{"range":"::ffff:10.0.0.5-::ffff:10.0.0.50/120"}`), "ipam.range", `ipam.range "::ffff:10.0.0.5-::ffff:10.0.0.50/120" is an IPv4-mapped IPv6 range`, false},
	{"IPv4-mapped range_start", netconf(`{"range":"::/64","range_start":"::ffff:0.0.0.5"}`), "ipam.range_start", `ipam.range_start "::ffff:0.0.0.5" is in the IPv4-mapped block ::ffff:0:0/96, whose addresses an IPReservation cannot hold`, false},
	{"IPv6 range over the IPv4-mapped block", netconf(`{"range":"::fffe:0:0/95"}`), "ipam.range", `ipam.range "::fffe:0:0/95" includes the IPv4-mapped block ::ffff:0:0/96, whose addresses an IPReservation cannot hold`, false},
	{"IPv6 range ending in the IPv4-mapped block", netconf(`{"ipRanges":[{"range":"::/64","range_end":"::ffff:0:1"}]}`), "ipam.ipRanges[0].range_end", `IPv4-mapped`, false},
	{"IPv4-mapped gateway", netconf(`{"range":"10.0.0.0/24","gateway":"::ffff:10.0.0.1"}`), "ipam.gateway", `ipam.gateway "::ffff:10.0.0.1" is an IPv4-mapped IPv6 address; write it as IPv4 "10.0.0.1"`, true},
	{"IPv4-mapped static IP", `{"name":"n","runtimeConfig":{"ips":["::ffff:10.0.0.5"]},"ipam":{"range":"10.0.0.0/24"}}`, "runtimeConfig.ips[0]", `runtimeConfig.ips[0] "::ffff:10.0.0.5" is an IPv4-mapped IPv6 address; write it as IPv4 "10.0.0.5"`, true},
	{"IPv4-mapped static CIDR", `{"name":"n","args":{"cni":{"ips":["::ffff:10.0.0.5/120"]}},"ipam":{"range":"10.0.0.0/24"}}`, "args.cni.ips[0]", `write it as IPv4 "10.0.0.5/24"`, false},
	{"static IP with a zone", `{"name":"n","runtimeConfig":{"ips":["fe80::5%eth0"]},"ipam":{"range":"fe80::/64"}}`, "runtimeConfig.ips[0]", `runtimeConfig.ips[0]: invalid IP or CIDR "fe80::5%eth0" (IPv6 zones are not allowed)`, true},
	{"network name too long", `{"name":"` + strings.Repeat("n", v1alpha1.NetworkMaxLength+1) + `","ipam":{"range":"10.0.0.0/24"}}`, "name",
		fmt.Sprintf(`is %d characters long; at most %d are allowed (IPReservation spec.network)`, v1alpha1.NetworkMaxLength+1, v1alpha1.NetworkMaxLength), false},
	{"network name with a space", `{"name":"blue net","ipam":{"range":"10.0.0.0/24"}}`, "name", `name "blue net": invalid characters`, false},
	{"network name starting with a dot", `{"name":".blue","ipam":{"range":"10.0.0.0/24"}}`, "name", `name ".blue": invalid characters`, false},
}

func TestParseErrors(t *testing.T) {
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ipamconfig.Parse([]byte(tt.conf))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", cfg)
			}
			if cfg != nil {
				t.Errorf("Parse returned a config with its error")
			}
			var fe *ipamconfig.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %q (%T) is not a *FieldError", err, err)
			}
			if fe.Field != tt.field {
				t.Errorf("Field = %q, want %q (error %q)", fe.Field, tt.field, err)
			}
			if !strings.HasPrefix(err.Error(), fe.Field) {
				t.Errorf("error %q does not start with its field %q", err, fe.Field)
			}
			if tt.exact && err.Error() != tt.msg {
				t.Errorf("error\n got %s\nwant %s", err, tt.msg)
			}
			if !tt.exact && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
		})
	}
}

func TestParseErrorUnwrapsJSONCause(t *testing.T) {
	_, err := ipamconfig.Parse([]byte(`{"name": "n", "ipam": {`))
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("error %q does not wrap a *json.SyntaxError", err)
	}
	_, err = ipamconfig.Parse([]byte(`{"name": 1}`))
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		t.Fatalf("error %q does not wrap a *json.UnmarshalTypeError", err)
	}
}
