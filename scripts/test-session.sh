#!/usr/bin/env bash
# Runs the Linux driver's tests, the conformance suite and the CLI escape
# battery again with every command of a session run in its session's
# sandbox (sandbox.linux.session_sandbox = "always", see docs/linux.md):
# the security tests must hold for a command forked inside a persistent
# sandbox exactly as for a sandbox built for it. Not part of make test.
# No -race here: the default pass has it; this one is about what the
# sandbox enforces.
set -euo pipefail
export ALEPH_TEST_SESSION=${ALEPH_TEST_SESSION:-on}
go test -count=1 -timeout "${TEST_TIMEOUT:-20m}" ${SESSION_FLAGS:-} ./drivers/bwrap/ &
a=$!
go test -count=1 -timeout "${TEST_TIMEOUT:-20m}" ${SESSION_FLAGS:-} -run '^(TestBwrapDriver|TestEscapeBattery)$' ./conformance/ ./cmd/aleph-sandbox/ &
b=$!
rc=0
wait $a || rc=1
wait $b || rc=1
exit $rc
