// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipkeeper/ipkeeper/tests/framework"
)

// NetNS is a named network namespace made with `ip netns add`, standing in
// for a pod sandbox.
type NetNS struct {
	Name string
	// Path is what a runtime passes as CNI_NETNS.
	Path string
}

// NewNetNS creates a network namespace named name with its loopback up and
// deletes it when t ends, whatever the outcome. Interfaces inside go with
// it, including the container end of a veth (which takes its peer along).
func NewNetNS(t testing.TB, name string) *NetNS {
	t.Helper()
	mustIP(t, "netns", "add", name)
	t.Cleanup(func() {
		if out, err := ipCmd(context.Background(), "netns", "delete", name); err != nil {
			t.Logf("deleting network namespace %s: %v: %s", name, err, out)
		}
	})
	mustIP(t, "-n", name, "link", "set", "lo", "up")
	return &NetNS{Name: name, Path: filepath.Join("/var/run/netns", name)}
}

// Addrs returns the global addresses of interface ifname in the namespace.
func (n *NetNS) Addrs(ctx context.Context, ifname string) ([]netip.Prefix, error) {
	out, err := ipCmd(ctx, "-n", n.Name, "-j", "addr", "show", "dev", ifname)
	if err != nil {
		return nil, fmt.Errorf("ip -n %s addr show dev %s: %w: %s", n.Name, ifname, err, out)
	}
	var links []struct {
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
			Scope     string `json:"scope"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return nil, fmt.Errorf("parsing `ip -j addr` output %q: %w", out, err)
	}
	var addrs []netip.Prefix
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if a.Scope != "global" {
				continue
			}
			ip, err := netip.ParseAddr(a.Local)
			if err != nil {
				return nil, fmt.Errorf("parsing address %q of %s in %s: %w", a.Local, ifname, n.Name, err)
			}
			addrs = append(addrs, netip.PrefixFrom(ip, a.PrefixLen))
		}
	}
	return addrs, nil
}

// MAC returns the MAC address of interface ifname in the namespace.
func (n *NetNS) MAC(ctx context.Context, ifname string) (string, error) {
	out, err := ipCmd(ctx, "-n", n.Name, "-j", "link", "show", "dev", ifname)
	if err != nil {
		return "", fmt.Errorf("ip -n %s link show dev %s: %w: %s", n.Name, ifname, err, out)
	}
	var links []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return "", fmt.Errorf("parsing `ip -j link show dev %s` output %q: %w", ifname, out, err)
	}
	if len(links) != 1 {
		return "", fmt.Errorf("`ip -j link show dev %s` listed %d links: %s", ifname, len(links), out)
	}
	return links[0].Address, nil
}

// HasLink reports whether interface ifname exists in the namespace.
func (n *NetNS) HasLink(ctx context.Context, ifname string) (bool, error) {
	out, err := ipCmd(ctx, "-n", n.Name, "-j", "link", "show")
	if err != nil {
		return false, fmt.Errorf("ip -n %s link show: %w: %s", n.Name, err, out)
	}
	var links []struct {
		Name string `json:"ifname"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return false, fmt.Errorf("parsing `ip -j link` output %q: %w", out, err)
	}
	for _, l := range links {
		if l.Name == ifname {
			return true, nil
		}
	}
	return false, nil
}

// Ping pings ip from inside the namespace until one echo is answered (the
// first may be lost to neighbour discovery), for at most 30s.
func (n *NetNS) Ping(ctx context.Context, ip netip.Addr) error {
	var last []byte
	err := framework.Eventually(ctx, 30*time.Second, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		out, err := ipCmd(ctx, "netns", "exec", n.Name, "ping", "-c1", "-W2", ip.String())
		last = out
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("ping %s from %s: %w; last output:\n%s", ip, n.Name, err, last)
	}
	return nil
}

// DeleteHostLinkOnCleanup deletes link name of the host namespace when t
// ends, if it exists then (a bridge the bridge plugin created, a veth).
func DeleteHostLinkOnCleanup(t testing.TB, name string) {
	t.Helper()
	t.Cleanup(func() {
		out, err := ipCmd(context.Background(), "link", "delete", name)
		if err != nil && !strings.Contains(string(out), "Cannot find device") {
			t.Logf("deleting host link %s: %v: %s", name, err, out)
		}
	})
}

// NewHostVethPair creates an up veth pair a<->b in the host namespace and
// deletes it when t ends. Deleting one end removes both.
func NewHostVethPair(t testing.TB, a, b string) {
	t.Helper()
	DeleteHostLinkOnCleanup(t, a)
	mustIP(t, "link", "add", a, "type", "veth", "peer", "name", b)
	mustIP(t, "link", "set", a, "up")
	mustIP(t, "link", "set", b, "up")
}

// UniqueSuffix returns n random hex characters, for names that must not
// clash with a previous run's leftovers or another test (interface names
// are at most 15 characters).
func UniqueSuffix(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)[:n]
}

// ipCmd runs ip(8) (also for `ip netns exec`) and returns its combined output.
func ipCmd(ctx context.Context, args ...string) ([]byte, error) {
	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.Bytes(), err
}

// mustIP is ipCmd that fails t.
func mustIP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := ipCmd(context.Background(), args...); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
