#!/usr/bin/env bash
# Runs the Linux driver's tests, the CLI's sandbox tests (the escape battery
# first), the bwrap driver's conformance suite and the module root's tests
# (the Go runtime end to end: its files API on a layered session, processes,
# secrets) a second time as an ordinary user, to check the
# honest degrade path (no writable cgroups, no root). Only meaningful when the
# main run was root; as a non-root user the main run already was unprivileged.
# UNPRIV_PKGS replaces the packages, e.g. UNPRIV_PKGS='-run TestX .'.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
	echo "test-unprivileged: already unprivileged; nothing more to run"
	exit 0
fi
user=aleph-ci
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
home=$(getent passwd "$user" | cut -d: -f6)
work=$(mktemp -d /tmp/aleph-unpriv.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -a . "$work/src"
# The module cache is copied, not downloaded again: the run stays offline.
modcache=$(go env GOMODCACHE)
mkdir -p "$home/go/pkg"
# Modules added since the last run are copied too (-n keeps what is there).
mkdir -p "$home/go/pkg/mod"
cp -a -n "$modcache/." "$home/go/pkg/mod/"
chown -R "$user:" "$work" "$home/go"
# The build cache is shared the same way, by hard links where the two
# caches are on one file system (a copy otherwise): with a cold cache the
# pass spent minutes compiling the race-instrumented standard library and
# the programs its tests build (467 s against 217 s for the driver's test
# binary alone under load 25). Only the directories become the user's:
# the linked entries stay root's and read-only to the user, who can add
# entries and drop its own links but never change what the main pass
# reads. A module's package is still compiled again (its path under the
# user's module cache differs, and the path is part of the cache key).
gocache=$(go env GOCACHE)
ucache="$home/.cache/go-build"
if [ -d "$gocache" ]; then
	mkdir -p "$ucache"
	cp -a -l -n "$gocache/." "$ucache/" 2>/dev/null || cp -a -n "$gocache/." "$ucache/"
	# The trim stamp is written in place: the user's own, not root's.
	rm -f "$ucache/trim.txt"
	find "$home/.cache" -type d -exec chown "$user:" {} +
fi
gobin=$(command -v go)
# The module root (.) runs whole: its tests took 18 s as aleph-ci
# (2026-12-07, 2 cores at a load average of 5 to 7), a small part of the
# pass, and a -run set would have to be kept up with the package.
pkgs=${UNPRIV_PKGS:-./drivers/bwrap/... ./cmd/aleph-sandbox/ ./conformance/ .}
# The tests whose outcome does not depend on the user (help text, serve's
# protocol, the conformance suite against its stand-in drivers...) ran in
# the main pass and are not run again: the packages' testdata/modes.txt
# name them, each with its reason, and every other test runs here, the
# docs' examples included (MODE_TESTS=all runs the whole packages).
lists="cmd/aleph-sandbox/testdata/modes.txt conformance/testdata/modes.txt drivers/bwrap/testdata/modes.txt"
skip=$(./scripts/mode-skip.sh unprivileged $lists)
echo "test-unprivileged: the tests $lists name for the main pass only are not run again"
# UNPRIV_PKGS is split into go test's arguments at spaces, never globbed
# (a -run pattern keeps its parentheses, bars and stars), and handed over
# as arguments, not as shell text.
set -f
# shellcheck disable=SC2086
runuser -u "$user" -- env -i PATH="$(dirname "$gobin"):/usr/sbin:/usr/bin:/sbin:/bin" HOME="$home" \
	GOCACHE="$ucache" GOMODCACHE="$home/go/pkg/mod" GOPROXY=off GOTOOLCHAIN=local \
	bash -c 'cd "$1" && timeout=$2 skip=$3 && shift 3 && exec go test -race -count=1 -timeout "$timeout" -skip "$skip" "$@"' \
	bash "$work/src" "${TEST_TIMEOUT:-30m}" "$skip" $pkgs
