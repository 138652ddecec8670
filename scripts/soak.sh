#!/usr/bin/env bash
# The soak and the load sweep (docs/performance.md): N commands through one
# warm pipeline, then concurrency 1..64, then a check that nothing was left
# behind (sandbox processes, command cgroups, temp directories). Not part of
# `make test`: it takes several minutes. SOAK_N overrides the soak's length.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/aleph-sandbox
n=${SOAK_N:-10000}
work=$(mktemp -d /tmp/aleph-soak.XXXXXX)
trap 'rm -rf "$work"' EXIT
export ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="$work/ws" ALEPH_SANDBOX_SANDBOX__AUDIT_LOG=""
count_left() {
	local procs cgroups tmps
	procs=$(pgrep -c -x bwrap || true)
	cgroups=$(find /sys/fs/cgroup -maxdepth 4 -type d -name 'aleph-*' 2>/dev/null | wc -l)
	tmps=$(find /tmp -maxdepth 1 -name 'aleph-plugin*' 2>/dev/null | wc -l)
	echo "bwrap processes: $procs, command cgroups: $cgroups, plugin temp dirs: $tmps"
}
echo "before: $(count_left)"
echo "== soak: $n commands, concurrency 1"
"$bin" bench --n "$n" --concurrency 1 -- /bin/true
for c in 1 2 4 8 16 32 64; do
	echo "== load: concurrency $c"
	"$bin" bench --n $((c * 20)) --concurrency "$c" -- /bin/true
done
sleep 1
echo "after: $(count_left)"
