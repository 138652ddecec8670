#!/usr/bin/env bash
# Runs the Linux driver's tests, the CLI's sandbox tests (the escape battery
# first) and the bwrap driver's conformance suite again as if the kernel had
# no Landlock: under nolandlock
# (drivers/bwrap/internal/nolandlock), a seccomp filter that makes the
# Landlock system calls fail with EOPNOTSUPP for this process tree only.
# The machine is not touched. Every security test must hold there too: /proc
# is covered by mounts, PID 1 is a confined, non-dumpable sandbox-init, and
# what needs Landlock (allow_hosts) must be refused and reported, not
# claimed. ALEPH_TEST_NO_LANDLOCK=1 tells the tests which mode they are in
# (TestNoLandlockModeReported fails if Landlock is still visible).
set -euo pipefail
work=$(mktemp -d /tmp/aleph-nolandlock.XXXXXX)
trap 'rm -rf "$work"' EXIT
CGO_ENABLED=0 go build -o "$work/nolandlock" ./drivers/bwrap/internal/nolandlock
pkgs=${NOLANDLOCK_PKGS:-./drivers/bwrap/... ./cmd/aleph-sandbox/ ./conformance/}
# The tests whose outcome does not depend on Landlock (help text, serve's
# protocol, the conformance suite against its stand-in drivers...) ran in
# the main pass and are not run again: the packages' testdata/modes.txt
# name them, each with its reason, and every other test runs here
# (MODE_TESTS=all runs the whole packages).
lists="cmd/aleph-sandbox/testdata/modes.txt conformance/testdata/modes.txt drivers/bwrap/testdata/modes.txt"
skip=$(./scripts/mode-skip.sh nolandlock $lists)
echo "test-nolandlock: the tests $lists name for the main pass only are not run again"
ALEPH_TEST_NO_LANDLOCK=1 "$work/nolandlock" go test -race -count=1 -timeout "${TEST_TIMEOUT:-20m}" -skip "$skip" ${NOLANDLOCK_FLAGS:-} $pkgs
