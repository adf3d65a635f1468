// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	ipamclaimsv1alpha1 "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ipkeeper/ipkeeper/internal/claimstatus"
)

// ClaimStore reads IPAMClaims, live. The agent never writes them.
type ClaimStore interface {
	// Wait returns the claim once it exists and records addresses
	// (status.ips), waiting up to timeout: errClaimMissing (wrapped) when
	// it never appeared, a *noAddressesError when it did but has none.
	Wait(ctx context.Context, namespace, name string, timeout time.Duration) (*ipamclaimsv1alpha1.IPAMClaim, error)
	// Get reads the claim; errClaimMissing (wrapped) when it does not exist.
	Get(ctx context.Context, namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, error)
}

// errClaimMissing reports a claim that did not appear in time.
var errClaimMissing = errors.New("IPAMClaim not found")

// noAddressesError reports a claim that exists but recorded no addresses
// in time (ipkeeper-controller has not filled it yet), or was still being
// deleted.
type noAddressesError struct {
	claim   *ipamclaimsv1alpha1.IPAMClaim
	timeout time.Duration
}

func (e *noAddressesError) Error() string {
	if e.claim.DeletionTimestamp != nil {
		return fmt.Sprintf("%s, and ipkeeper did not make it again within %s", deletingMessage(e.claim), e.timeout)
	}
	return fmt.Sprintf("IPAMClaim %s/%s has no addresses (status.ips) after %s", e.claim.Namespace, e.claim.Name, e.timeout)
}

func deletingMessage(c *ipamclaimsv1alpha1.IPAMClaim) string {
	return fmt.Sprintf("IPAMClaim %s/%s is being deleted (its VM stopped or no longer has this network): its addresses are being freed", c.Namespace, c.Name)
}

type apiClaimStore struct {
	c       client.WithWatch
	metrics *metrics
}

func (s *apiClaimStore) Get(ctx context.Context, namespace, name string) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	s.metrics.apiReads.WithLabelValues("get").Inc()
	c := &ipamclaimsv1alpha1.IPAMClaim{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s/%s", errClaimMissing, namespace, name)
		}
		return nil, fmt.Errorf("reading IPAMClaim %s/%s: %w", namespace, name, err)
	}
	return c, nil
}

// usable reports whether ipkeeper-controller has recorded the claim's
// addresses and the claim is not being deleted: the addresses of a claim
// being deleted are freed once it is gone, so a launcher waits for the
// claim made again.
func usable(c *ipamclaimsv1alpha1.IPAMClaim) bool {
	return claimstatus.Filled(c) && c.DeletionTimestamp == nil
}

// Wait watches the one claim instead of polling: the controller creates
// a VM's claims and fills them when the VM is created, normally long
// before its launcher pod, but a pod may come first (a VM created just
// before, a controller restarting). The watch starts with the claim as it
// is (the API server's initial event of a watch), so one request reads a
// filled claim and waits for an unfilled one; the claim it shows filled
// is confirmed by one consistent read (confirm). A watch that ends early (an API
// server restart) is made again until the deadline.
func (s *apiClaimStore) Wait(ctx context.Context, namespace, name string, timeout time.Duration) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	var last *ipamclaimsv1alpha1.IPAMClaim // what the claim looks like, nil while it does not exist
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for ctx.Err() == nil {
		c, err := s.watchOnce(ctx, namespace, name, &last)
		if err != nil {
			return nil, err
		}
		if c != nil {
			if c, err = s.confirm(ctx, c, &last); c != nil || err != nil {
				return c, err
			}
			// That claim is gone or changed: watch the one there is, once
			// the watch cache has caught up.
		}
		select {
		case <-ctx.Done():
		case <-time.After(claimRewatchDelay):
		}
	}
	if last == nil {
		return nil, fmt.Errorf("%w: %s/%s did not appear within %s", errClaimMissing, namespace, name, timeout)
	}
	return nil, &noAddressesError{claim: last, timeout: timeout}
}

// confirm reads the claim the watch showed usable, consistently (a read
// without a resourceVersion): the watch starts from the API server's watch
// cache, which may still show a claim deleted a moment ago and made again
// under the same name (a VM deleted and re-created), whose reservations
// still exist until the garbage collector frees them. Handing out those
// addresses would give the new VM addresses about to go to someone else.
// It returns the claim when it is that one, or a newer version of it,
// still usable; nil when the claim is gone or another (last then says
// what there is).
func (s *apiClaimStore) confirm(ctx context.Context, seen *ipamclaimsv1alpha1.IPAMClaim, last **ipamclaimsv1alpha1.IPAMClaim) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	c, err := s.Get(ctx, seen.Namespace, seen.Name)
	switch {
	case errors.Is(err, errClaimMissing):
		*last = nil
		return nil, nil
	case err != nil:
		return nil, err
	case c.UID == seen.UID && usable(c):
		return c, nil
	}
	*last = c
	return nil, nil
}

// claimRewatchDelay spaces the watches of a claim whose watch ended early.
const claimRewatchDelay = 200 * time.Millisecond

// watchOnce watches the claim until it is usable (returned), ctx ends
// or the watch ends (nil, nil: the caller decides), keeping last up to
// date with what it shows of the claim. A watch the API server refuses
// for good (forbidden, bad request) ends the wait with its error.
func (s *apiClaimStore) watchOnce(ctx context.Context, namespace, name string, last **ipamclaimsv1alpha1.IPAMClaim) (*ipamclaimsv1alpha1.IPAMClaim, error) {
	s.metrics.apiReads.WithLabelValues("watch").Inc()
	// resourceVersion "0": the initial event comes from the API server's
	// watch cache at once. An unset one would wait for the cache to be
	// proven current (up to a progress notification of etcd's, some
	// 100 ms); a claim a moment older than the newest is harmless here,
	// as later events follow it and each address's reservation is read
	// live.
	w, err := s.c.Watch(ctx, &ipamclaimsv1alpha1.IPAMClaimList{}, client.InNamespace(namespace),
		client.MatchingFields{"metadata.name": name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsBadRequest(err) || apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("watching IPAMClaim %s/%s: %w", namespace, name, err)
		}
		return nil, nil
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return nil, nil
			}
			c, isClaim := ev.Object.(*ipamclaimsv1alpha1.IPAMClaim)
			switch {
			case !isClaim:
			case ev.Type == watch.Deleted:
				*last = nil
			case ev.Type == watch.Added || ev.Type == watch.Modified:
				if usable(c) {
					return c, nil
				}
				*last = c
			}
		}
	}
}
