#!/usr/bin/env bash
# Prints go test's -skip pattern for a mode pass: the tests that the lists
# name (LIST..., each a package's testdata/modes.txt) as not run again in
# MODE (unprivileged, nolandlock), as ^(A|B|...)$. A list line is
# "TestName MODES WHY", MODES "-" or a comma list of the passes that still
# run the test; '#' starts a comment. scripts/modes_test.go checks the
# lists. With MODE_TESTS=all, prints a pattern no test matches: the whole
# packages run.
set -euo pipefail
mode=$1
shift
if [ "${MODE_TESTS:-}" = all ]; then
	echo '^$'
	exit 0
fi
names=$(awk -v mode="$mode" '
	/^[ \t]*(#|$)/ { next }
	{
		n = split($2, m, ",")
		keep = 0
		for (i = 1; i <= n; i++) if (m[i] == mode) keep = 1
		if (!keep) print $1
	}' "$@" | sort -u | paste -sd '|' -)
if [ -z "$names" ]; then
	echo '^$'
else
	echo "^($names)\$"
fi
