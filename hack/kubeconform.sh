#!/usr/bin/env bash
# Validates every rendered install against the schemas of Kubernetes
# (K8S_VERSION of hack/tools.sh) and of the CRDs it uses, offline, with
# kubeconform in strict mode (no unknown fields, no duplicate keys). Run by
# `make lint`.
#
# Rendered: `kubectl kustomize` of manifests/ and of each overlay under
# manifests/overlays/, and, once charts/ipkeeper exists, `helm template` of
# the chart with its default values (and its crds/), with each
# values-*.yaml next to it, and with every optional object turned on
# (cert-manager certificates, the NetworkPolicy, the Prometheus Operator
# objects).
#
# Schemas (hack/kubeschemas, into a temporary directory, a few seconds):
# Kubernetes' from its swagger.json, ipkeeper's from manifests/crds, and, for
# the kinds of other projects the installs use, cert-manager's from
# tests/crds/cert-manager and the Prometheus Operator's from its API types
# (the tools cache's kube-schemas). A kind without a schema fails the check.
set -euo pipefail
cd "$(dirname "$0")/.."

components=(kubernetes kubeconform kube-schemas)
[[ -d charts/ipkeeper ]] && components+=(helm)
bash hack/tools.sh "${components[@]}"
eval "$(bash hack/tools.sh --env | sed 's/^/export /')"
kube_version=$(sed -n 's/^K8S_VERSION=v//p' hack/tools.sh)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go run ./hack/kubeschemas -out "$work/schemas" \
	-swagger "$IPKEEPER_KUBE_SCHEMAS_DIR/swagger.json" \
	-crds manifests/crds -crds tests/crds/cert-manager -crds "$IPKEEPER_KUBE_SCHEMAS_DIR/crds"

mkdir "$work/rendered"
for dir in manifests manifests/overlays/*/; do
	dir=${dir%/}
	"$IPKEEPER_KUBECTL" kustomize "$dir" >"$work/rendered/kustomize-${dir//\//_}.yaml"
done
if [[ -d charts/ipkeeper ]]; then
	chart=charts/ipkeeper
	"$IPKEEPER_HELM" template ipkeeper "$chart" --kube-version "$kube_version" --include-crds >"$work/rendered/helm-default.yaml"
	for values in "$chart"/values-*.yaml; do
		[[ -e "$values" ]] || continue
		name=$(basename "$values" .yaml)
		"$IPKEEPER_HELM" template ipkeeper "$chart" --kube-version "$kube_version" -f "$values" >"$work/rendered/helm-$name.yaml"
	done
	# Every optional object at once; a renamed value fails here, by name.
	"$IPKEEPER_HELM" template ipkeeper "$chart" --kube-version "$kube_version" \
		--set certificates.mode=cert-manager,networkPolicy.enabled=true \
		--set monitoring.serviceMonitor.enabled=true,monitoring.prometheusRule.enabled=true \
		>"$work/rendered/helm-optional.yaml"
fi

"$IPKEEPER_KUBECONFORM" -strict -summary -kubernetes-version "$kube_version" \
	-schema-location "$work/schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
	"$work"/rendered/*.yaml
