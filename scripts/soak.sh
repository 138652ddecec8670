#!/usr/bin/env bash
# The soak and the load sweep (docs/performance.md): N commands through one
# warm pipeline, then concurrency 1..64, then a check that nothing was left
# behind (sandbox processes, command cgroups, temp directories). Not part of
# `make test`: it takes several minutes. SOAK_N overrides the soak's length.
#
# What is counted is this run's own: processes whose command line names its
# workspace root, command cgroups whose owning driver is dead, temp dirs in
# its own TMPDIR; so other sandboxes on the machine do not blur the check.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/bin/aleph-sandbox
n=${SOAK_N:-10000}
work=$(mktemp -d "${TMPDIR:-/tmp}/aleph-soak.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws" "$work/tmp" "$work/data"
export ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="$work/ws" ALEPH_SANDBOX_SANDBOX__AUDIT_LOG="" \
	TMPDIR="$work/tmp" XDG_DATA_HOME="$work/data"
count_left() {
	local procs cgroups=0 tmps d owner
	procs=$(pgrep -c -f -- "$work/ws" || true)
	while IFS= read -r d; do
		owner=${d##*/aleph-}
		owner=${owner%%-*}
		[[ $owner =~ ^[0-9]+$ ]] && ! kill -0 "$owner" 2>/dev/null && cgroups=$((cgroups + 1))
	done < <(find /sys/fs/cgroup -maxdepth 5 -type d -name 'aleph-*' 2>/dev/null)
	tmps=$(find "$work/tmp" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	echo "sandbox processes: $procs, cgroups of dead drivers: $cgroups, temp entries: $tmps"
}
before=$(count_left)
echo "before: $before"
echo "== soak: $n commands, concurrency 1"
"$bin" bench --warm-only --n "$n" --concurrency 1 -- /bin/true
for c in 1 2 4 8 16 32 64; do
	echo "== load: concurrency $c"
	"$bin" bench --warm-only --n $((c * 20)) --concurrency "$c" -- /bin/true
done
echo "== the baselines beside it, interleaved"
"$bin" bench --n 50 -- /bin/true
sleep 1
after=$(count_left)
echo "after: $after"
if [[ $after != "sandbox processes: 0, cgroups of dead drivers: 0, temp entries: 0" ]]; then
	echo "soak: something was left behind" >&2
	exit 1
fi
