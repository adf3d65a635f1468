#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Runs lanes of make targets side by side, the targets of one lane one after
# another:
#
#   hack/side-by-side.sh test-integration "test-e2e test-install"
#
# The control-plane suites spend most of their time waiting on their own API
# servers (each uses about 0.8 of a core on two), so two lanes finish in
# about the time of the longer one. Each lane writes to its own log, printed
# whole once every lane has ended, so that `go test -v` output is never
# interleaved; a line says when each lane ends. Exits 1 if any target failed.
set -uo pipefail

make=${MAKE:-make}
lanes=("$@")
dir=$(mktemp -d /tmp/ipkeeper-lanes.XXXXXX)
pids=()
cleanup() {
	# Each lane is its own process group (set -m): stop it whole.
	for p in "${pids[@]}"; do
		kill -- "-$p" 2>/dev/null
	done
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

set -m
for i in "${!lanes[@]}"; do
	(
		start=$SECONDS
		for target in ${lanes[$i]}; do
			if ! "$make" --no-print-directory "$target"; then
				echo "== lane '${lanes[$i]}': $target FAILED after $((SECONDS - start)) s" >"$dir/$i.end"
				exit 1
			fi
		done
		echo "== lane '${lanes[$i]}': passed in $((SECONDS - start)) s" >"$dir/$i.end"
	) >"$dir/$i.log" 2>&1 &
	pids+=($!)
done
set +m

status=0
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || status=1
	cat "$dir/$i.end" 2>/dev/null || echo "== lane '${lanes[$i]}': ended without a word"
done
pids=()
for i in "${!lanes[@]}"; do
	echo "== output of lane '${lanes[$i]}'"
	cat "$dir/$i.log"
done
for i in "${!lanes[@]}"; do
	cat "$dir/$i.end" 2>/dev/null
done
exit $status
