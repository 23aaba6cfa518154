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
# The first run's exit status is the wrapper's when it fails: go test then
# prints its output, whose last lines say what failed.
BACKENDSLICE_TEST_STACK=dual "$@" || exit
echo "=== the same suite on a single-stack API server (BACKENDSLICE_TEST_STACK=single)"
BACKENDSLICE_TEST_STACK=single exec "$@"
