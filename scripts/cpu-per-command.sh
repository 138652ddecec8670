#!/usr/bin/env bash
# CPU per command (docs/performance.md, "Seventh round"): throughput is CPU
# per command, so this measures the machine's busy time rather than
# latency. For ROUNDS rounds, in turn: N raw minimal bwrap sandboxes
# started C at a time, then N commands through one warm pipeline at
# concurrency C (`bench --warm-only`). Each way's busy time is the change
# of /proc/stat's user, nice, system, irq and softirq over its run (every
# process and the kernel's workers: a sandbox's teardown counts too; idle,
# iowait and steal do not), divided by N. Prints each way's median in ms
# per command and their ratio.
#
# Whatever else runs on the machine counts too: run it on a quiet one, and
# compare builds by running this script for each in turn.
#
#   scripts/cpu-per-command.sh [ROUNDS [N [C]]]     (defaults 5 200 4)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5} n=${2:-200} conc=${3:-4}
bin=$PWD/bin/aleph-sandbox
for tool in bwrap xargs; do
	command -v "$tool" >/dev/null || { echo "cpu-per-command: $tool not found" >&2; exit 2; }
done
[ -x "$bin" ] || { echo "cpu-per-command: $bin missing: run make build" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/aleph-cpu.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws"

# The smallest bwrap sandbox, as bench's "raw minimal bwrap" row: every
# namespace, the system directories (links kept as links), /proc, /dev and
# the workspace.
minimal=(--unshare-all --die-with-parent --ro-bind /usr /usr)
for d in /bin /sbin /lib /lib32 /lib64 /libx32; do
	if [ -L "$d" ]; then
		minimal+=(--symlink "$(readlink "$d")" "$d")
	elif [ -d "$d" ]; then
		minimal+=(--ro-bind "$d" "$d")
	fi
done
minimal+=(--proc /proc --dev /dev --bind "$work/ws" "$work/ws" --chdir "$work/ws" -- /bin/true)

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8; exit}' /proc/stat; }
hz=$(getconf CLK_TCK)
measure() { # prints ms of busy CPU per command of "$@"
	local a b
	a=$(busy)
	"$@" >/dev/null 2>&1 || { echo "cpu-per-command: $1 failed" >&2; exit 1; }
	b=$(busy)
	awk -v d=$((b - a)) -v hz="$hz" -v n="$n" 'BEGIN{printf "%.2f\n", d*1000/hz/n}'
}
raw() { seq "$n" | xargs -P "$conc" -I{} bwrap "${minimal[@]}"; }
warm() { "$bin" bench --warm-only --concurrency "$conc" --n "$n" -- /bin/true; }

: >"$work/raw" >"$work/warm"
for _ in $(seq "$rounds"); do
	measure raw >>"$work/raw"
	measure warm >>"$work/warm"
done
median() { sort -n "$1" | awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
r=$(median "$work/raw") w=$(median "$work/warm")
echo "busy CPU per command, median of $rounds rounds of $n at concurrency $conc:"
echo "  raw minimal bwrap  $r ms   (all: $(tr '\n' ' ' <"$work/raw"))"
echo "  warm pipeline      $w ms   (all: $(tr '\n' ' ' <"$work/warm"))"
awk -v r="$r" -v w="$w" 'BEGIN{if (r > 0) printf "  warm / raw minimal %.2fx\n", w/r}'
