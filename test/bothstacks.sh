#!/usr/bin/env bash
# test/bothstacks.sh: the program `make test` (test/run.sh) gives go test's
# -exec. go test runs each test binary through it, in the package's
# directory: it runs an end-to-end suite's binary twice, on a dual-stack API
# server and then on a single-stack one, and any other binary once, as go
# test would. So each suite's binary is linked once for both runs: a link
# takes about 11 CPU-seconds, and there are 21 suites.
#
# Environment: BACKENDSLICE_BOTH_STACKS, the directories of the packages to
# run on both stacks, one per line, with no symbolic link.
set -uo pipefail

if ! grep -qxF -- "$(pwd -P)" <<<"${BACKENDSLICE_BOTH_STACKS:-}"; then
	exec "$@"
fi
# Both runs run, whatever the first's result, so that a failure says which
# stacks it is on. go test prints the output of a binary that fails: both
# runs', then the line that names the failed ones.
BACKENDSLICE_TEST_STACK=dual "$@"
dual=$?
echo "=== the same suite on a single-stack API server (BACKENDSLICE_TEST_STACK=single)"
BACKENDSLICE_TEST_STACK=single "$@"
single=$?
if ((dual || single)); then
	echo "=== failed: dual-stack run exit $dual, single-stack run exit $single"
	exit $((dual ? dual : single))
fi
