// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/cni/cniproto"
	"github.com/ipkeeper/ipkeeper/internal/ipamconfig"
	"github.com/ipkeeper/ipkeeper/internal/naming"
	"github.com/ipkeeper/ipkeeper/internal/node/agent/index"
	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// Del releases the ephemeral reservations of an attachment: those owned by
// a pod on this network, this interface and this sandbox (container ID).
// A claim's addresses are ipkeeper-controller's and are kept. Something already gone is success.
// Each is released under its attachment's lock, at the version found for
// this sandbox: one a newer sandbox of the pod took over in the meantime
// is left alone.
func (a *Agent) Del(ctx context.Context, creq *cniproto.Request) (err error) {
	defer a.metrics.observe(cniproto.CmdDel, time.Now(), &err)
	pool, err := poolName(creq.Config)
	if err != nil {
		return cniError(codeInvalidConfig, err)
	}
	stillThisSandbox := func(r *ipkeeperv1alpha1.IPReservation) bool {
		return r.Spec.Owner.Kind == ipkeeperv1alpha1.OwnerPod && r.Spec.ContainerID == creq.ContainerID && r.Spec.InterfaceName == creq.IfName
	}
	// A create of this sandbox whose response was lost may exist without
	// the cache showing it yet (the same fault often cuts the watch).
	if err := a.resolveUncertainOfSandbox(ctx, sandboxKey{pool, creq.ContainerID, creq.IfName}); err != nil {
		return cniError(codeTryAgainLater, err)
	}
	var errs []error
	for _, e := range a.reservations.Sandbox(pool, creq.ContainerID, creq.IfName) {
		errs = append(errs, a.releaseAttachment(ctx, e, "DEL", stillThisSandbox, false))
	}
	if err := errors.Join(errs...); err != nil {
		return cniError(codeTryAgainLater, err)
	}
	return nil
}

// resolveUncertainOfSandbox reads live the reservations of the sandbox's
// creates whose outcome was unknown, putting those that exist and are
// still the sandbox's into the cache for the DEL to find.
func (a *Agent) resolveUncertainOfSandbox(ctx context.Context, sk sandboxKey) error {
	for _, kn := range a.uncertain.ofSandbox(sk) {
		cur, err := a.store.Get(ctx, kn[1])
		switch {
		case errors.Is(err, ErrGone):
		case err != nil:
			return fmt.Errorf("checking the outcome of an earlier create of this sandbox: %w", err)
		case cur.Spec.ContainerID == sk.containerID && cur.Spec.InterfaceName == sk.ifName:
			if e, ok := index.EntryOf(cur); ok {
				a.reservations.Wrote(e)
			}
		}
		a.uncertain.forget(kn[0], kn[1])
	}
	return nil
}

// releaseAttachment releases a pod reservation under its attachment's
// lock (the one ADD takes), if the cache still holds that object and
// still says it should go. With exact, only the version judged (e) may go:
// any change since, seen in the cache or by the API server, keeps it.
func (a *Agent) releaseAttachment(ctx context.Context, e entry, verb string, still func(*ipkeeperv1alpha1.IPReservation) bool, exact bool) error {
	h := holder{owner: e.Owner, ifName: e.InterfaceName}
	defer a.locks.lock(h.key(e.Pool))()
	cur, ok := a.reservations.Get(e.Name)
	if !ok || cur.UID != e.UID || cur.Released() || !still(index.ReservationOf(cur)) || (exact && cur.ResourceVersion != e.ResourceVersion) {
		return nil // released, or taken over, while we waited for the lock
	}
	if exact {
		still = nil
	}
	return a.release(ctx, []entry{cur}, verb, still)
}

// poolName reads the network's pool from a config; see networkOf.
func poolName(config []byte) (string, error) {
	pool, _, err := networkOf(config)
	return pool, err
}

// networkOf reads the network's pool and name from a config, falling back
// to the bare "name" and "ipam.pool" keys when the rest does not
// validate: an attachment made under an older, valid config must still be
// releasable after the NAD changed.
func networkOf(config []byte) (pool, network string, err error) {
	if cfg, err := ipamconfig.Parse(config); err == nil {
		return cfg.PoolName(), cfg.Name, nil
	}
	var bare struct {
		Name string          `json:"name"`
		IPAM json.RawMessage `json:"ipam"`
	}
	if err := json.Unmarshal(config, &bare); err != nil {
		return "", "", fmt.Errorf("network configuration is not valid JSON: %w", err)
	}
	if bare.Name == "" {
		return "", "", fmt.Errorf("name: required (the network name identifies the address pool)")
	}
	var ipam struct {
		Pool string `json:"pool"`
	}
	if json.Unmarshal(bare.IPAM, &ipam) == nil && ipam.Pool != "" {
		return ipam.Pool, bare.Name, nil
	}
	return naming.InlinePool(bare.Name), bare.Name, nil
}

// sandboxKey is what a DEL names: a sandbox's interface on a pool.
type sandboxKey struct {
	pool        string
	containerID string
	ifName      string
}
