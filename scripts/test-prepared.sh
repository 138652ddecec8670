#!/usr/bin/env bash
# Runs the Linux driver's tests, the conformance suite and the CLI escape
# battery again with every command handed to a prepared sandbox
# (sandbox.linux.prepared = "always", see docs/linux.md): the security tests
# must hold on the hand-over path exactly as on a sandbox built for its
# command. The default pass (make test-go) runs them in the default mode,
# where the one-shot CLI never prepares a sandbox and the driver's own
# tests prepare one where they ask for it. No -race here: the default pass
# has it; this one is about what the sandbox enforces.
set -euo pipefail
export ALEPH_TEST_PREPARED=${ALEPH_TEST_PREPARED:-always}
go test -count=1 -timeout "${TEST_TIMEOUT:-20m}" ${PREPARED_FLAGS:-} ./drivers/bwrap/ &
a=$!
go test -count=1 -timeout "${TEST_TIMEOUT:-20m}" ${PREPARED_FLAGS:-} -run '^(TestBwrapDriver|TestEscapeBattery)$' ./conformance/ ./cmd/aleph-sandbox/ &
b=$!
rc=0
wait $a || rc=1
wait $b || rc=1
exit $rc
