// SPDX-License-Identifier: Apache-2.0

package index

import (
	"encoding/json"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	ipkeeperv1alpha1 "github.com/ipkeeper/ipkeeper/pkg/apis/ipkeeper/v1alpha1"
)

// reservationEventDecoder decodes a watch stream of IPReservations (JSON,
// one event after another) in one pass per event, into objects holding
// only what the cache reads. Every agent decodes every reservation event
// of the cluster; client-go's decoder reads each event four times (the
// framer, the event, the object's kind, the object) and keeps its managed
// fields, which the agent drops.
type reservationEventDecoder struct {
	body io.ReadCloser
	dec  *json.Decoder
}

func newReservationEventDecoder(body io.ReadCloser) *reservationEventDecoder {
	return &reservationEventDecoder{body: body, dec: json.NewDecoder(body)}
}

// leanObject is the part of an event's object the agent reads: of an
// IPReservation its identity, version and spec (the decoder skips managed
// fields, labels and owner references); of an ERROR event's Status, the
// status. One struct for both lets an event be decoded in one pass.
type leanObject struct {
	Metadata struct {
		Name              string            `json:"name"`
		UID               types.UID         `json:"uid"`
		ResourceVersion   string            `json:"resourceVersion"`
		CreationTimestamp metav1.Time       `json:"creationTimestamp"`
		Annotations       map[string]string `json:"annotations"` // a bookmark's end of the initial events
	} `json:"metadata"`
	Spec ipkeeperv1alpha1.IPReservationSpec `json:"spec"`

	Status  string                `json:"status"`
	Message string                `json:"message"`
	Reason  metav1.StatusReason   `json:"reason"`
	Details *metav1.StatusDetails `json:"details"`
	Code    int32                 `json:"code"`
}

// Decode implements watch.Decoder.
func (d *reservationEventDecoder) Decode() (watch.EventType, runtime.Object, error) {
	var ev struct {
		Type   watch.EventType `json:"type"`
		Object leanObject      `json:"object"`
	}
	if err := d.dec.Decode(&ev); err != nil {
		return "", nil, err
	}
	o := &ev.Object
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		r := &ipkeeperv1alpha1.IPReservation{Spec: o.Spec}
		r.Name, r.UID, r.ResourceVersion, r.CreationTimestamp = o.Metadata.Name, o.Metadata.UID, o.Metadata.ResourceVersion, o.Metadata.CreationTimestamp
		if v, ok := o.Metadata.Annotations[metav1.InitialEventsAnnotationKey]; ok {
			r.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: v}
		}
		return ev.Type, r, nil
	case watch.Error:
		return ev.Type, &metav1.Status{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
			Status:   o.Status, Message: o.Message, Reason: o.Reason, Details: o.Details, Code: o.Code,
		}, nil
	default:
		return "", nil, fmt.Errorf("watch event of unknown type %q", ev.Type)
	}
}

// Close implements watch.Decoder.
func (d *reservationEventDecoder) Close() { _ = d.body.Close() }
