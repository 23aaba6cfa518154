#!/usr/bin/env bash
# test/run.sh: what `make test` runs. Every suite, on a real kube-apiserver and
# etcd, dual-stack, and the end-to-end suites again on a single-stack API
# server, right after, from the same test binary (test/bothstacks.sh); then
# the test modules.
#
# On a fresh machine most of the time goes into building the binaries the
# suites run (test/controlplane/install.sh). Only kube-apiserver and etcd are
# needed by nearly every suite, so they are built first; Consul, kube-proxy,
# kube-controller-manager and CoreDNS build in the background, at a lower CPU
# priority, while the suites that need none of them run. The suites that do
# run next (and wait for a binary still being built: controlplane.Binary).
# On a warm machine every binary is in the cache and the build steps take
# seconds.
#
# Environment: GO, MAKE, TEST_PKGS (default ./...), E2E_PKGS (./test/e2e/...:
# those of TEST_PKGS that run on both stacks), TEST_FLAGS (-count=1 -timeout
# 30m: both runs of a suite get them), SUBMODULES, KUBEBUILDER_ASSETS.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
go=${GO:-go}
make=${MAKE:-make}
read -r -a test_pkgs <<<"${TEST_PKGS:-./...}"
read -r -a e2e_pkgs <<<"${E2E_PKGS:-./test/e2e/...}"
read -r -a test_flags <<<"${TEST_FLAGS:--count=1 -timeout 30m}"
read -r -a submodules <<<"${SUBMODULES:-}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# phase prints a step's header with the time it starts.
start=$SECONDS
phase() { printf -- '--- %s (%s UTC, %d s in)\n' "$*" "$(date -u +%T)" $((SECONDS - start)); }

phase "building Consul, kube-proxy, kube-controller-manager and CoreDNS in the background ($work/extras.log)"
export BACKENDSLICE_BUILDING="consul kube-proxy kube-controller-manager coredns"
export BACKENDSLICE_BUILD_FAILED=$work/extras.failed
(nice -n 10 "$make" dataplane consul >"$work/extras.log" 2>&1 || touch "$BACKENDSLICE_BUILD_FAILED") &
builder=$!

"$make" controlplane shellcheck

# The packages whose tests start Consul or the data-path lab: they run once
# the background build is done, the others meanwhile.
mapfile -t later < <(grep -rlE --include='*_test.go' \
	'consultest\.|framework\.(RunWithConsul|RunWithLab|LabBinary|StartKubeProxy)' . |
	xargs -r -n1 dirname | sort -u | xargs -r "$go" list)
mapfile -t all < <("$go" list "${test_pkgs[@]}")
first=() second=()
# is_later PKG: whether PKG waits for the background build.
is_later() { [[ " ${later[*]} " == *" $1 "* ]]; }
for pkg in "${all[@]}"; do
	if is_later "$pkg"; then second+=("$pkg"); else first+=("$pkg"); fi
done

# Each end-to-end suite runs on both stacks from one link of its binary:
# go test runs every binary through test/bothstacks.sh, which runs those of
# the suites' directories twice.
BACKENDSLICE_BOTH_STACKS=$("$go" list -f '{{.Dir}}' "${e2e_pkgs[@]}" | xargs -r realpath)
export BACKENDSLICE_BOTH_STACKS
both_stacks=(-exec "$PWD/test/bothstacks.sh")

# Four packages at a time, not go test's default of two on two cores: the
# suites mostly wait, on timers, drains, labs' connections and providers'
# answers (at two at a time the CPU stood 80-90% idle through the later
# ones), and each of the end-to-end ones holds its place for two runs. Each
# starts its own API server, lab and agents.
parallel=(-p 4)

status=0
phase "go test: the packages that need only kube-apiserver and etcd (${#first[@]})"
"$go" test "${parallel[@]}" "${both_stacks[@]}" "${first[@]}" "${test_flags[@]}" || status=1

phase "waiting for the background build"
wait "$builder" || true
if [[ -e $BACKENDSLICE_BUILD_FAILED ]]; then
	cat "$work/extras.log"
	echo "make dataplane consul failed: see its log above" >&2
	exit 1
fi
grep -E 'built in|bin/' "$work/extras.log" || true
unset BACKENDSLICE_BUILDING

if ((${#second[@]})); then
	phase "go test: the packages that run Consul or the data-path lab (${#second[@]})"
	"$go" test "${parallel[@]}" "${both_stacks[@]}" "${second[@]}" "${test_flags[@]}" || status=1
fi

for m in "${submodules[@]}"; do
	phase "go test ($m)"
	(cd "$m" && "$go" test ./... "${test_flags[@]}") || status=1
done
exit "$status"
