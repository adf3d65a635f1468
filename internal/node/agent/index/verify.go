// SPDX-License-Identifier: Apache-2.0

package index

import (
	"errors"
	"fmt"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Verify reports where x's maps disagree with each other, hold empty
// inner maps (which would leak per pool, attachment or node), or link a
// reservation that is not a pod's of the cache's node. Tests call it after
// each scenario; it reads every entry, so nothing else should.
//
// It is in a product file because the agent's tests call it too, and a
// _test.go file is compiled only into its own package's tests. It is a
// function, not a method, so that the binaries do not link it: the linker
// keeps the exported methods of a type once reflection may call them
// (text/template can), but drops a function nothing calls.
func Verify(x *Cache) error {
	var errs []error
	x.mu.RLock()
	defer x.mu.RUnlock()
	for name, e := range x.byName {
		if e.Name != name {
			errs = append(errs, fmt.Errorf("byName[%q] holds an entry named %q", name, e.Name))
		}
		if got := x.taken[e.Pool][e.IP]; got != name {
			errs = append(errs, fmt.Errorf("taken[%q][%s] = %q, want %q", e.Pool, e.IP, got, name))
		}
		k := attachmentKey{e.Pool, e.Owner.UID, e.InterfaceName}
		inPod := x.byPod[k].has(name)
		inSandbox := x.bySandbox[sandboxKey{e.Pool, e.ContainerID, e.InterfaceName}].has(name)
		inNode := x.byNode[nodeKey{e.Node, e.Pool}].has(name)
		inRetired := x.retired[nodeKey{e.Node, e.Pool}].has(name)
		if x.remote(e) {
			// Not a pod of this node: only its address, identity and
			// owner kind are kept.
			if inPod || inSandbox || inNode || inRetired || e.Owner.UID != "" || e.ContainerID != "" || e.InterfaceName != "" {
				errs = append(errs, fmt.Errorf("%s (owner kind %s, node %q) is kept whole (%+v) or found by byPod %v, bySandbox %v, byNode %v, retired %v",
					name, e.Owner.Kind, e.Node, e, inPod, inSandbox, inNode, inRetired))
			}
			continue
		}
		if e.Owner.Kind != ipkeeperv1alpha1.OwnerPod {
			// A claim's (or another owner's): the agent acts on none.
			if inPod || inSandbox || inNode || inRetired {
				errs = append(errs, fmt.Errorf("%s (owner kind %s) is found by byPod %v, bySandbox %v, byNode %v, retired %v", name, e.Owner.Kind, inPod, inSandbox, inNode, inRetired))
			}
			continue
		}
		if inRetired != e.Released() {
			errs = append(errs, fmt.Errorf("%s (released %v) in retired = %v", name, e.Released(), inRetired))
		}
		if e.Released() {
			// Nobody's: no attachment, sandbox or node finds it.
			if inPod || inSandbox || inNode {
				errs = append(errs, fmt.Errorf("released %s is still found by byPod %v, bySandbox %v, byNode %v", name, inPod, inSandbox, inNode))
			}
			continue
		}
		if !inPod || !inSandbox || !inNode {
			errs = append(errs, fmt.Errorf("pod reservation %s missing from byPod %v, bySandbox %v or byNode %v", name, inPod, inSandbox, inNode))
		}
	}
	for k, m := range x.retired {
		if m.len() == 0 {
			errs = append(errs, fmt.Errorf("retired[%+v] is an empty set (leak)", k))
		}
		for name := range m.all() {
			if e, ok := x.byName[name]; !ok || !e.Released() || (nodeKey{e.Node, e.Pool}) != k {
				errs = append(errs, fmt.Errorf("retired[%+v] lists %q, which the cache holds as %+v (present: %v)", k, name, e, ok))
			}
		}
	}
	for network, m := range x.taken {
		if len(m) == 0 {
			errs = append(errs, fmt.Errorf("taken[%q] is an empty map (leak)", network))
		}
		for ip, name := range m {
			if e, ok := x.byName[name]; !ok || e.Pool != network || e.IP != ip {
				errs = append(errs, fmt.Errorf("taken[%q][%s] = %q, which the cache holds as %+v (present: %v)", network, ip, name, e, ok))
			}
		}
	}
	for k, m := range x.bySandbox {
		for name := range m.all() {
			if e, ok := x.byName[name]; !ok || (sandboxKey{e.Pool, e.ContainerID, e.InterfaceName}) != k {
				errs = append(errs, fmt.Errorf("bySandbox[%+v] lists %q, which the cache holds as %+v (present: %v)", k, name, e, ok))
			}
		}
		if m.len() == 0 {
			errs = append(errs, fmt.Errorf("bySandbox[%+v] is an empty set (leak)", k))
		}
	}
	for k, m := range x.byNode {
		for name := range m.all() {
			if e, ok := x.byName[name]; !ok || (nodeKey{e.Node, e.Pool}) != k {
				errs = append(errs, fmt.Errorf("byNode[%+v] lists %q, which the cache holds as %+v (present: %v)", k, name, e, ok))
			}
		}
		if m.len() == 0 {
			errs = append(errs, fmt.Errorf("byNode[%+v] is an empty set (leak)", k))
		}
	}
	for k, m := range x.byPod {
		if m.len() == 0 {
			errs = append(errs, fmt.Errorf("byPod[%+v] is an empty set (leak)", k))
		}
		for name := range m.all() {
			e, ok := x.byName[name]
			if !ok || (attachmentKey{e.Pool, e.Owner.UID, e.InterfaceName}) != k || e.Owner.Kind != ipkeeperv1alpha1.OwnerPod {
				errs = append(errs, fmt.Errorf("byPod[%+v] lists %q, which the cache holds as %+v (present: %v)", k, name, e, ok))
			}
		}
	}
	return errors.Join(errs...)
}
