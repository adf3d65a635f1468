// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"strings"
	"testing"
)

// A network's configuration is parsed once and shared by its requests;
// one with a part of its own attachment, and a bad one, are parsed each
// time; the memory stays bounded.
func TestParsedConfigs(t *testing.T) {
	p := &parsedConfigs{}
	plain := []byte(netconf(`{"type":"ipkeeper","range":"10.1.0.0/24"}`))
	first, err := p.parse(plain)
	if err != nil {
		t.Fatal(err)
	}
	// Other bytes with the same content: a request's own buffer.
	again, err := p.parse([]byte(string(plain)))
	if err != nil {
		t.Fatal(err)
	}
	if again != first || p.len() != 1 {
		t.Fatalf("the same configuration parsed again (%p, %p; %d remembered)", first, again, p.len())
	}
	if first.Name != "storage" || len(first.Ranges) != 1 || !strings.HasPrefix(first.Ranges[0].String(), "10.1.0.0/24") {
		t.Fatalf("remembered configuration %+v, want network storage with range 10.1.0.0/24", first)
	}

	for name, conf := range map[string]string{
		"static address": `{"cniVersion":"1.0.0","name":"storage","ipam":{"type":"ipkeeper","range":"10.1.0.0/24"},"runtimeConfig":{"ips":["10.1.0.9/24"]}}`,
		"claim":          `{"cniVersion":"1.0.0","name":"storage","ipam":{"type":"ipkeeper","range":"10.1.0.0/24"},"args":{"cni":{"ipam-claim-reference":"vm1.blue"}}}`,
		"MAC":            `{"cniVersion":"1.0.0","name":"storage","ipam":{"type":"ipkeeper","range":"10.1.0.0/24","sticky_mac":true},"runtimeConfig":{"mac":"02:00:00:0a:00:01"}}`,
	} {
		a, errA := p.parse([]byte(conf))
		b, errB := p.parse([]byte(conf))
		if errA != nil || errB != nil {
			t.Fatalf("%s: %v, %v", name, errA, errB)
		}
		if a == b || p.len() != 1 {
			t.Errorf("%s: a configuration of one attachment was remembered (%d remembered)", name, p.len())
		}
	}

	bad := []byte(netconf(`{"type":"ipkeeper","range":"10.1.0.0/33"}`))
	for range 2 {
		if _, err := p.parse(bad); err == nil || !strings.Contains(err.Error(), "10.1.0.0/33") {
			t.Fatalf("bad configuration: error %v, want one naming 10.1.0.0/33", err)
		}
	}
	if p.len() != 1 {
		t.Fatalf("%d remembered after a bad configuration, want 1", p.len())
	}

	for i := range 2 * maxParsedConfigs {
		if _, err := p.parse([]byte(netconf(fmt.Sprintf(`{"type":"ipkeeper","range":"10.%d.%d.0/24"}`, 2+i/256, i%256)))); err != nil {
			t.Fatal(err)
		}
		if n := p.len(); n > maxParsedConfigs {
			t.Fatalf("%d configurations remembered, more than %d", n, maxParsedConfigs)
		}
	}
}
