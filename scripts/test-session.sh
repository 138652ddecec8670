#!/usr/bin/env bash
# Runs the conformance suite and the CLI escape battery again with every
# command of a session run in its session's sandbox
# (sandbox.linux.session_sandbox = "always", see docs/linux.md): the
# security tests must hold for a command forked inside a persistent sandbox,
# after earlier commands of the session, exactly as for a sandbox built for
# it. The default pass runs the driver's own session tests, and serve (the
# Python and TypeScript suites, the serve end-to-end tests) uses session
# sandboxes by default; SESSION_ALL=1 also reruns the driver's whole package
# in this mode. No -race here: the default pass has it; this one is about
# what the sandbox enforces.
set -euo pipefail
export ALEPH_TEST_SESSION=${ALEPH_TEST_SESSION:-on}
pids=()
if [ "${SESSION_ALL:-0}" = 1 ]; then
	go test -count=1 -timeout "${TEST_TIMEOUT:-20m}" ${SESSION_FLAGS:-} ./drivers/bwrap/ &
	pids+=($!)
fi
go test -count=1 -timeout "${TEST_TIMEOUT:-20m}" ${SESSION_FLAGS:-} -run '^(TestBwrapDriver|TestEscapeBattery)$' ./conformance/ ./cmd/aleph-sandbox/ &
pids+=($!)
rc=0
for p in "${pids[@]}"; do
	wait "$p" || rc=1
done
exit $rc
