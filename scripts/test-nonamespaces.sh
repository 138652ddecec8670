#!/usr/bin/env bash
# Runs the Landlock tier's tests, the bwrap driver's conformance suite and
# one command through the CLI as if the host refused namespaces: under
# nonamespaces (drivers/bwrap/internal/nonamespaces), a seccomp filter that
# makes unshare, setns and clone with CLONE_NEW* fail with EPERM and clone3
# with ENOSYS for this process tree only, as an unprivileged container does.
# The machine is not touched. bwrap's trial sandbox then fails, and:
#  - the driver's tier tests (TestTier*, TestNoNamespacesModeReported) run
#    against the real bwrap: fail closed with the fallback off, the Landlock
#    tier with it on, every security test with its positive control;
#  - the conformance suite runs against the driver plugin with
#    fallback = "landlock": it runs the cases of the features the tier
#    claims and skips the others (protected_paths, network_via_proxy);
#  - the CLI end-to-end test runs `exec -- /bin/echo hi` with the fallback
#    off (one line naming the fix) and on (works);
#  - the CLI escape battery runs against the Landlock tier: it reads the
#    capability report (doctor --json) and runs every case whose needs the
#    tier claims, denials and positive controls alike; the cases of what the
#    tier states it does not give (protected entries, a private /tmp, a /proc
#    and /dev of its own, a PID namespace, unix sockets, allow_hosts) are
#    skipped with the report's reason;
#  - the CLI's git quarantine end-to-end test runs in the tier (its
#    workspaces without a .git of their own, which the tier refuses);
#  - the MCP server's shell-line and agent-baseline tests run in the tier
#    (a shell line refused before it runs, the same line approved forking).
# The bwrap-tier driver tests are not run here: they test the namespaces.
# ALEPH_TEST_NO_NAMESPACES=1 tells the tests which mode they are in.
set -euo pipefail
work=$(mktemp -d /tmp/aleph-nonamespaces.XXXXXX)
trap 'rm -rf "$work"' EXIT
CGO_ENABLED=0 go build -o "$work/nonamespaces" ./drivers/bwrap/internal/nonamespaces
export ALEPH_TEST_NO_NAMESPACES=1
# The three runs are independent and mostly wait on sandboxes: they run
# side by side (as test-prepared.sh's do), and the pass fails if any fails.
"$work/nonamespaces" go test -race -count=1 -timeout "${TEST_TIMEOUT:-20m}" ${NONAMESPACES_FLAGS:-} \
	-run '^(TestTier|TestNoNamespaces)' ./drivers/bwrap/ &
a=$!
"$work/nonamespaces" go test -count=1 -timeout "${TEST_TIMEOUT:-20m}" ${NONAMESPACES_FLAGS:-} -run '^TestBwrapDriver$' ./conformance/ &
b=$!
"$work/nonamespaces" go test -race -count=1 -timeout "${TEST_TIMEOUT:-20m}" ${NONAMESPACES_FLAGS:-} -run '^(TestNoNamespacesExec|TestEscapeBattery|TestGitQuarantineEndToEnd|TestMCPHostBaselineIsForTheCallOnly|TestMCPShellCommandSpawnEndToEnd|TestAgentBaselineEndToEnd)$' ./cmd/aleph-sandbox/ &
c=$!
rc=0
wait $a || rc=1
wait $b || rc=1
wait $c || rc=1
exit $rc
