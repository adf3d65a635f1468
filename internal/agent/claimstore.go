// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ClaimStore reads and writes IPAMClaims, live.
type ClaimStore interface {
	// Wait returns the claim, waiting up to timeout for it to be created.
	Wait(ctx context.Context, namespace, name string, timeout time.Duration) (*ipamclaimsv1alpha1.IPAMClaim, error)
	// Get reads the claim.
	Get(ctx context.Context, namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, error)
	// UpdateStatus writes the claim's status; a conflict is returned as is
	// (apierrors.IsConflict) for the caller to re-read.
	UpdateStatus(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim) error
}

// errClaimMissing reports a claim that did not appear in time.
var errClaimMissing = errors.New("IPAMClaim not found")

type apiClaimStore struct {
	c       client.WithWatch
	metrics *metrics
}

func (s *apiClaimStore) Get(ctx context.Context, namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	c := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s/%s", errClaimMissing, namespace, name)
		}
		return nil, fmt.Errorf("reading IPAMClaim %s/%s: %w", namespace, name, err)
	}
	return c, nil
}

// Wait watches for the claim instead of polling: the controller may create
// it just after the pod (the VM's claims are normally created first).
func (s *apiClaimStore) Wait(ctx context.Context, namespace, name string, timeout time.Duration) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	c, err := s.Get(ctx, namespace, name)
	if err == nil || !errors.Is(err, errClaimMissing) {
		return c, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := s.c.Watch(ctx, &ipamclaimsv1alpha1.IPAMClaimList{}, client.InNamespace(namespace),
		client.MatchingFields{"metadata.name": name})
	if err != nil {
		return nil, fmt.Errorf("watching for IPAMClaim %s/%s: %w", namespace, name, err)
	}
	defer w.Stop()
	// It may have been created between the read and the watch.
	if c, err := s.Get(ctx, namespace, name); err == nil || !errors.Is(err, errClaimMissing) {
		return c, err
	}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s/%s did not appear within %s", errClaimMissing, namespace, name, timeout)
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The watch ended early (API server restart): read once more.
				return s.Get(ctx, namespace, name)
			}
			if c, isClaim := ev.Object.(*ipamclaimsv1alpha1.IPAMClaim); isClaim && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				return c, nil
			}
		}
	}
}

func (s *apiClaimStore) UpdateStatus(ctx context.Context, c *ipamclaimsv1alpha1.IPAMClaim) error {
	s.metrics.apiWrites.WithLabelValues("claim-status").Inc()
	if c.Status.IPs == nil {
		c.Status.IPs = []string{} // required by the CRD schema
	}
	if err := s.c.Status().Update(ctx, c); err != nil {
		if apierrors.IsConflict(err) {
			return err
		}
		return fmt.Errorf("writing status of IPAMClaim %s/%s: %w", c.Namespace, c.Name, err)
	}
	return nil
}
