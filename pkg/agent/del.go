package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
	"github.com/ipkeeper/ipkeeper/pkg/cniproto"
	"github.com/ipkeeper/ipkeeper/pkg/ipamconfig"
)

// Del releases the ephemeral reservations of an attachment: those owned by
// a pod on this network, this interface and this sandbox (container ID).
// Claim-owned reservations are kept. Something already gone is success.
func (a *Agent) Del(ctx context.Context, creq *cniproto.Request) (err error) {
	defer a.metrics.observe(cniproto.CmdDel, time.Now(), &err)
	network, err := networkName(creq.Config)
	if err != nil {
		return cniError(codeInvalidConfig, err)
	}
	doomed := a.idx.filter(func(e entry) bool {
		return e.network == network && e.owner.Kind == ipkeeperv1alpha1.OwnerPod &&
			e.ifName == creq.IfName && e.containerID == creq.ContainerID
	})
	return a.release(ctx, doomed, "DEL")
}

// release deletes reservations, continuing past failures and reporting them together.
func (a *Agent) release(ctx context.Context, entries []entry, verb string) error {
	var errs []error
	for _, e := range entries {
		if err := a.store.Delete(ctx, e.name, e.uid); err != nil {
			errs = append(errs, err)
			continue
		}
		a.idx.remove(e.name, e.uid)
		a.metrics.releases.WithLabelValues(verb).Inc()
		a.log.Debug("released", "verb", verb, "reservation", e.name, "ip", e.ip, "owner", e.owner.Namespace+"/"+e.owner.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return cniError(codeTryAgainLater, fmt.Errorf("%s: %w", verb, err))
	}
	return nil
}

// networkName reads the network name from a config, falling back to the
// bare "name" key when the rest does not validate: an attachment made under
// an older, valid config must still be releasable after the NAD changed.
func networkName(config []byte) (string, error) {
	if cfg, err := ipamconfig.Parse(config); err == nil {
		return cfg.Name, nil
	}
	var bare struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(config, &bare); err != nil {
		return "", fmt.Errorf("network configuration is not valid JSON: %w", err)
	}
	if bare.Name == "" {
		return "", fmt.Errorf("name: required (the network name identifies the address pool)")
	}
	return bare.Name, nil
}
