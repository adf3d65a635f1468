#!/usr/bin/env bash
# Every Go file carries the SPDX licence line before its package clause:
# hand-written files start with it, generated files get it from
# hack/boilerplate.go.txt (after their build constraint). Run by `make lint`.
set -euo pipefail
cd "$(dirname "$0")/.."
want='// SPDX-License-Identifier: Apache-2.0'
missing=()
while IFS= read -r f; do
	[[ -f "$f" ]] || continue
	if ! awk -v want="$want" '$0 == want { found = 1; exit } /^package / { exit } END { exit !found }' "$f"; then
		missing+=("$f")
	fi
done < <(git ls-files --cached --others --exclude-standard -- '*.go' | sort -u)
if ((${#missing[@]})); then
	echo "these Go files lack '$want' before their package clause:" >&2
	printf '  %s\n' "${missing[@]}" >&2
	echo "add it with: bash hack/check-license.sh --fix" >&2
	[[ "${1:-}" == "--fix" ]] || exit 1
	for f in "${missing[@]}"; do
		{ printf '%s\n\n' "$want"; cat "$f"; } > "$f.tmp" && mv "$f.tmp" "$f"
	done
	echo "fixed ${#missing[@]} files"
fi
