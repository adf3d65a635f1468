package agent

import (
	"encoding/json"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	corev1 "k8s.io/api/core/v1"
)

// claimRefArg is the args.cni key (and network selection element key) that
// names the IPAMClaim an attachment uses.
const claimRefArg = "ipam-claim-reference"

// claimReference returns the IPAMClaim name this attachment references, or
// "" for an ephemeral attachment. Multus does not pass the reference to its
// delegates, so it is read from the pod's networks annotation: the element
// whose interface is ifName, else the element Multus names ifName by
// position (net1 for the first element ...). args.cni carries it for setups
// without Multus' annotation.
//
// found reports whether the annotation has an element for ifName: Multus
// attaches only what the annotation lists, so a missing element means the
// pod object read is older than the annotation (a hotplug just now).
func claimReference(pod *corev1.Pod, ifName string, config []byte) (ref string, found bool, err error) {
	if annot := pod.Annotations[nadv1.NetworkAttachmentAnnot]; annot != "" {
		elems, err := nadutils.ParseNetworkAnnotation(annot, pod.Namespace)
		if err != nil {
			return "", false, fmt.Errorf("pod %s/%s annotation %s: %w", pod.Namespace, pod.Name, nadv1.NetworkAttachmentAnnot, err)
		}
		if e := elementFor(elems, ifName); e != nil {
			found = true
			if e.IPAMClaimReference != "" {
				return e.IPAMClaimReference, true, nil
			}
		}
	}
	var conf struct {
		Args struct {
			CNI map[string]any `json:"cni"`
		} `json:"args"`
	}
	if err := json.Unmarshal(config, &conf); err != nil {
		return "", found, fmt.Errorf("args.cni: %w", err)
	}
	switch v := conf.Args.CNI[claimRefArg].(type) {
	case nil:
		return "", found, nil
	case string:
		return v, true, nil
	default:
		return "", found, fmt.Errorf("args.cni.%s: want a claim name (string), got %v", claimRefArg, v)
	}
}

// elementFor picks the network selection element of the attachment ifName.
func elementFor(elems []*nadv1.NetworkSelectionElement, ifName string) *nadv1.NetworkSelectionElement {
	for _, e := range elems {
		if e.InterfaceRequest == ifName {
			return e
		}
	}
	for i, e := range elems {
		if e.InterfaceRequest == "" && fmt.Sprintf("net%d", i+1) == ifName {
			return e
		}
	}
	return nil
}
