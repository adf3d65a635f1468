#!/usr/bin/env bash
# Regenerates into the working tree and fails if anything changed, so stale
# generated files (deepcopy, CRDs, the Helm chart's copies) cannot land.
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory generate >/dev/null
if ! git diff --exit-code --stat -- pkg/apis manifests/crds manifests/rbac tests/crds charts/ipkeeper/crds charts/ipkeeper/files; then
	echo "generated files are stale: run 'make generate' and commit the result" >&2
	exit 1
fi
untracked=$(git ls-files --others --exclude-standard -- pkg/apis manifests/crds manifests/rbac tests/crds charts/ipkeeper/crds charts/ipkeeper/files)
if [[ -n "$untracked" ]]; then
	echo "generated files are not committed:" >&2
	echo "$untracked" >&2
	exit 1
fi
echo "generated files are up to date"
