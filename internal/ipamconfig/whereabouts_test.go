// SPDX-License-Identifier: Apache-2.0

package ipamconfig_test

import (
	"reflect"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/iprange"
)

// whereaboutsExamples are configurations in the shape whereabouts documents,
// with "type": "whereabouts" replaced by "ipkeeper" and nothing else changed.
var whereaboutsExamples = []struct {
	name string
	conf string
	want []rng
}{
	{"readme macvlan with exclude", `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "ipkeeper",
        "range": "192.168.2.225/28",
        "exclude": [
           "192.168.2.229/30",
           "192.168.2.236/32"
        ]
      }
    }`, []rng{{subnet: "192.168.2.224/28", start: "192.168.2.225", end: "192.168.2.238", exclude: []string{"192.168.2.228/30", "192.168.2.236/32"}}}},
	{"range A-B form", `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "ipkeeper",
        "range": "192.168.2.225-192.168.2.230/28"
      }
    }`, []rng{{subnet: "192.168.2.224/28", start: "192.168.2.225", end: "192.168.2.230"}}},
	{"kubernetes datastore with logging and gateway", `{
      "cniVersion": "0.3.1",
      "name": "whereabouts-conf",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "ipkeeper",
        "datastore": "kubernetes",
        "kubernetes": { "kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig" },
        "range": "192.168.2.0/24",
        "range_start": "192.168.2.10",
        "range_end": "192.168.2.100",
        "gateway": "192.168.2.1",
        "log_file": "/tmp/whereabouts.log",
        "log_level": "debug",
        "leader_lease_duration": 1500,
        "enable_overlapping_ranges": true,
        "network_name": "shared"
      }
    }`, []rng{{subnet: "192.168.2.0/24", start: "192.168.2.10", end: "192.168.2.100", gw: "192.168.2.1"}}},
	{"legacy etcd", `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "ipkeeper",
        "etcd_host": "127.0.0.1:2379",
        "range": "192.168.2.0/24",
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    }`, []rng{{subnet: "192.168.2.0/24", start: "192.168.2.1", end: "192.168.2.254"}}},
	{"ipv6", `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "ipkeeper",
        "range": "2001::0/116",
        "gateway": "2001::1"
      }
    }`, []rng{{subnet: "2001::/116", start: "2001::1", end: "2001::fff", gw: "2001::1"}}},
	{"dual-stack ipRanges", `{
      "cniVersion": "0.3.0",
      "name": "whereaboutsexample",
      "type": "macvlan",
      "master": "eth0",
      "mode": "bridge",
      "ipam": {
        "type": "ipkeeper",
        "ipRanges": [{
            "range": "192.168.10.0/24"
          }, {
            "range": "abcd::/64"
        }]
      }
    }`, []rng{
		{subnet: "192.168.10.0/24", start: "192.168.10.1", end: "192.168.10.254"},
		{subnet: "abcd::/64", start: "abcd::1", end: "abcd::ffff:ffff:ffff:ffff"},
	}},
	{"ipRanges with exclude and range_start", `{
      "cniVersion": "0.3.1",
      "name": "whereaboutsexample",
      "type": "bridge",
      "bridge": "br0",
      "ipam": {
        "type": "ipkeeper",
        "ipRanges": [{
            "range": "10.10.0.0/16",
            "range_start": "10.10.1.0",
            "exclude": ["10.10.1.0/28"]
          }, {
            "range": "fd10::-fd10::ffff/64",
            "exclude": ["fd10::/125"]
        }]
      }
    }`, []rng{
		{subnet: "10.10.0.0/16", start: "10.10.1.0", end: "10.10.255.254", exclude: []string{"10.10.1.0/28"}},
		{subnet: "fd10::/64", start: "fd10::1", end: "fd10::ffff", exclude: []string{"fd10::/125"}},
	}},
	{"network-attachment-definition plugin chain element", `{
      "cniVersion": "0.3.1",
      "name": "macvlan-persistent",
      "type": "macvlan",
      "master": "eth1",
      "allowPersistentIPs": true,
      "ipam": {"type": "ipkeeper", "range": "172.16.0.0/22", "exclude": ["172.16.0.0/24"]}
    }`, []rng{{subnet: "172.16.0.0/22", start: "172.16.0.1", end: "172.16.3.254", exclude: []string{"172.16.0.0/24"}}}},
}

func TestWhereaboutsExamples(t *testing.T) {
	for _, tt := range whereaboutsExamples {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ipamconfig.Parse([]byte(tt.conf))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if cfg.IPAMType != "ipkeeper" || cfg.Name == "" {
				t.Errorf("IPAMType %q, Name %q", cfg.IPAMType, cfg.Name)
			}
			var want []iprange.Range
			for _, w := range tt.want {
				want = append(want, w.build(t))
			}
			if !reflect.DeepEqual(cfg.Ranges, want) {
				t.Errorf("Ranges\n got %v\nwant %v", cfg.Ranges, want)
			}
		})
	}
}
