#!/usr/bin/env bash
# `make bench`: the side-by-side table, then the Go microbenchmarks. Each
# step runs in a process group of its own, and whatever ends this script
# (Ctrl-C, SIGTERM from make, a failing step, SIGKILL of this script or of
# make) ends that group too: `aleph-sandbox bench` starts a private `serve`,
# and a bench killed part way must not leave it running. A private TMPDIR
# holds the serve's socket and data and is removed at the end.
#
# Usage: scripts/bench.sh BIN GO PKG... (the Makefile's $(BIN), $(GO) and
# $(BENCH_PKGS)); BENCH_N sets the table's count. make runs this script
# directly (no shell between them), so its parent is make itself.
set -euo pipefail
if [ $# -lt 3 ]; then
	echo "usage: $0 BIN GO PKG..." >&2
	exit 2
fi
BIN=$1
GO=$2
shift 2
pkgs=("$@")
BENCH_N=${BENCH_N:-50}

work=$(mktemp -d "${TMPDIR:-/tmp}/aleph-bench.XXXXXX")
export TMPDIR=$work
group= # the process group of the step running now

# end_group ends the running step's whole process group: SIGTERM first, so
# the private serve shuts its sandboxes down, then SIGKILL for what is left.
end_group() {
	[ -n "$group" ] || return 0
	kill -TERM -- "-$group" 2>/dev/null || return 0
	for _ in $(seq 50); do
		kill -0 -- "-$group" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL -- "-$group" 2>/dev/null || true
}
cleanup() {
	trap - EXIT INT TERM HUP
	end_group
	[ -z "${watchdog:-}" ] || kill "$watchdog" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# A trap cannot run when this script (or make above it) is killed with
# SIGKILL. The watchdog can: it outlives both, and when either is gone it
# kills the group of the step that was running. It ignores the signals a
# Ctrl-C or make send, so it is the last to go.
self=$$
parent=$PPID
(
	trap '' INT TERM HUP
	while kill -0 "$self" 2>/dev/null && kill -0 "$parent" 2>/dev/null; do
		sleep 0.5
	done
	g=$(cat "$work/group" 2>/dev/null || true)
	[ -z "$g" ] || kill -KILL -- "-$g" 2>/dev/null || true
	rm -rf "$work"
) </dev/null >/dev/null 2>&1 &
watchdog=$!

# step runs one command as the leader of a new process group (setsid forks
# no further from a background job, so its pid is the group's id).
step() {
	setsid "$@" &
	group=$!
	echo "$group" >"$work/group"
	local rc=0
	wait "$group" || rc=$?
	end_group # what the step left behind in its group
	group=
	rm -f "$work/group"
	return "$rc"
}

step "$BIN/aleph-sandbox" bench --n "$BENCH_N" -- /bin/true
step "$GO" test -timeout 30m -run '^$' -bench . -skip '^BenchmarkLaunch$' -benchtime 300ms -benchmem "${pkgs[@]}"
step "$GO" test -timeout 30m -run '^$' -bench '^BenchmarkLaunch$' -benchtime 40x ./drivers/bwrap/
