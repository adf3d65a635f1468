// SPDX-License-Identifier: Apache-2.0

package reservation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

var (
	// ErrTaken reports that a reservation of that name already exists.
	ErrTaken = errors.New("address already reserved")
	// ErrGone reports that a reservation does not exist (any more).
	ErrGone = errors.New("reservation not found")
	// ErrChanged reports that a reservation is not the version a write was
	// made for: it changed, or another object took its name. Re-read it.
	ErrChanged = errors.New("reservation changed")
)

// Store is every datastore step on reservations the package takes. Each
// method is a live API call; errors wrap ErrTaken, ErrGone or ErrChanged
// as each says, so a caller never inspects API status codes.
type Store interface {
	// Create creates a reservation and fills in its UID and
	// resourceVersion; ErrTaken (wrapped) when the name exists.
	Create(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error
	// Get reads a reservation live; ErrGone (wrapped) when it does not exist.
	Get(ctx context.Context, name string) (*ipkeeperv1alpha1.IPReservation, error)
	// Delete deletes the reservation with that name only if it is still
	// that object (uid) at that version (resourceVersion; "" for any
	// version): ErrGone when it does not exist, ErrChanged when it is
	// another object or version.
	Delete(ctx context.Context, name string, uid types.UID, resourceVersion string) error
	// Retire sets spec.reuseAfter on the reservation with that name, with
	// Delete's preconditions (a resourceVersion is required) and errors,
	// and returns it as written: the release of an address in a pool with
	// a reuse cooldown.
	Retire(ctx context.Context, name string, uid types.UID, resourceVersion string, reuseAfter time.Time) (*ipkeeperv1alpha1.IPReservation, error)
}

// KubeStore is the Store of a controller-runtime client: the controllers,
// the Cluster API provider and the import use it as it is, the agent
// through its own Store, which counts its API calls.
type KubeStore struct {
	// Client writes, and reads unless Live is set.
	Client client.Client
	// Live, when set, is what Get reads: a controller's Client reads its
	// cache, and a create found taken must see what is there now.
	Live client.Reader
	// REST, when set, is what Create posts through (a REST client of
	// ipkeeper.io/v1alpha1): of the API server's answer Create then reads
	// only the metadata the server sets, not the whole object with its
	// managed fields. Decoding the answer whole was a tenth of the agent's
	// CPU per ADD in an allocation storm.
	REST rest.Interface
}

// Create implements Store.
func (s KubeStore) Create(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error {
	var err error
	if s.REST != nil {
		err = createLean(ctx, s.REST, r)
	} else {
		err = s.Client.Create(ctx, r)
	}
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%w: reservation %s", ErrTaken, r.Name)
	}
	if err != nil {
		return fmt.Errorf("creating reservation %s: %w", r.Name, err)
	}
	return nil
}

// createLean creates r through c and fills in what the server set of its
// metadata (UID, resourceVersion, generation, creation time). The rest of
// the answer is r as sent: no defaults are declared for IPReservations,
// and the watch delivers the stored object.
func createLean(ctx context.Context, c rest.Interface, r *ipkeeperv1alpha1.IPReservation) error {
	r.APIVersion, r.Kind = ipkeeperv1alpha1.GroupVersion.String(), "IPReservation"
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding reservation %s: %w", r.Name, err)
	}
	raw, err := c.Post().Resource("ipreservations").Body(body).Do(ctx).Raw()
	if err != nil {
		return err
	}
	var answer struct {
		Metadata struct {
			UID             types.UID `json:"uid"`
			ResourceVersion string    `json:"resourceVersion"`
			Generation      int64     `json:"generation"`
			// A string: metav1.Time's own decoding costs more than the rest.
			CreationTimestamp string `json:"creationTimestamp"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return fmt.Errorf("decoding the API server's answer to the create of reservation %s: %w", r.Name, err)
	}
	if answer.Metadata.UID == "" || answer.Metadata.ResourceVersion == "" {
		return fmt.Errorf("the API server's answer to the create of reservation %s has no uid or resourceVersion", r.Name)
	}
	created, err := time.Parse(time.RFC3339, answer.Metadata.CreationTimestamp)
	if err != nil {
		return fmt.Errorf("the API server's answer to the create of reservation %s: creationTimestamp: %w", r.Name, err)
	}
	r.UID, r.ResourceVersion = answer.Metadata.UID, answer.Metadata.ResourceVersion
	r.Generation, r.CreationTimestamp = answer.Metadata.Generation, metav1.NewTime(created)
	return nil
}

// Get implements Store.
func (s KubeStore) Get(ctx context.Context, name string) (*ipkeeperv1alpha1.IPReservation, error) {
	var reader client.Reader = s.Client
	if s.Live != nil {
		reader = s.Live
	}
	r := &ipkeeperv1alpha1.IPReservation{}
	if err := reader.Get(ctx, client.ObjectKey{Name: name}, r); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s", ErrGone, name)
		}
		return nil, fmt.Errorf("reading reservation %s: %w", name, err)
	}
	return r, nil
}

// Update writes r's spec and metadata at r's resourceVersion, filling in
// the new one: the agent's take-over of a new sandbox of the same
// attachment, and a handover's Lend, Unlend and PassToBorrower.
// ErrChanged when the reservation changed or went since it was read.
func (s KubeStore) Update(ctx context.Context, r *ipkeeperv1alpha1.IPReservation) error {
	if err := s.Client.Update(ctx, r); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: updating reservation %s: %w", ErrChanged, r.Name, err)
		}
		return fmt.Errorf("updating reservation %s: %w", r.Name, err)
	}
	return nil
}

// Delete implements Store.
func (s KubeStore) Delete(ctx context.Context, name string, uid types.UID, resourceVersion string) error {
	r := &ipkeeperv1alpha1.IPReservation{}
	r.Name = name
	// Both preconditions: the UID keeps us from deleting a reservation
	// someone else made for the address after ours went; the version keeps
	// us from deleting one a new holder took over after we decided.
	pre := client.Preconditions{UID: &uid}
	if resourceVersion != "" {
		pre.ResourceVersion = &resourceVersion
	}
	err := s.Client.Delete(ctx, r, pre)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %s", ErrGone, name)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: deleting reservation %s: %w", ErrChanged, name, err)
	default:
		return fmt.Errorf("deleting reservation %s: %w", name, err)
	}
}

// Retire implements Store.
func (s KubeStore) Retire(ctx context.Context, name string, uid types.UID, resourceVersion string, reuseAfter time.Time) (*ipkeeperv1alpha1.IPReservation, error) {
	patch, err := RetirePatch(uid, resourceVersion, reuseAfter)
	if err != nil {
		return nil, fmt.Errorf("retiring reservation %s: %w", name, err)
	}
	r := &ipkeeperv1alpha1.IPReservation{}
	r.Name = name
	err = s.Client.Patch(ctx, r, patch)
	switch {
	case err == nil:
		return r, nil
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: %s", ErrGone, name)
	case apierrors.IsConflict(err):
		return nil, fmt.Errorf("%w: retiring reservation %s: %w", ErrChanged, name, err)
	default:
		return nil, fmt.Errorf("retiring reservation %s: %w", name, err)
	}
}

// RetirePatch sets spec.reuseAfter on the reservation that is still that
// object (uid) at that version (resourceVersion): a merge patch carrying
// the resourceVersion fails with Conflict when the reservation changed
// since it was judged, exactly as a delete with both preconditions does,
// and NotFound when it is gone.
func RetirePatch(uid types.UID, resourceVersion string, reuseAfter time.Time) (client.Patch, error) {
	if uid == "" || resourceVersion == "" {
		return nil, fmt.Errorf("retiring a reservation needs its uid and resourceVersion (got %q, %q)", uid, resourceVersion)
	}
	at := metav1.NewTime(reuseAfter)
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid, "resourceVersion": resourceVersion},
		"spec":     map[string]any{"reuseAfter": &at},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the retire patch: %w", err)
	}
	return client.RawPatch(types.MergePatchType, body), nil
}
