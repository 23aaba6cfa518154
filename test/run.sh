#!/usr/bin/env bash
# test/run.sh: what `make test` runs. Every suite, on a real kube-apiserver and
# etcd, dual-stack; the test modules; and the end-to-end suites again on a
# single-stack API server.
#
# On a fresh machine most of the time goes into building the binaries the
# suites run (test/controlplane/install.sh). Only kube-apiserver and etcd are
# needed by nearly every suite, so they are built first; Consul, kube-proxy,
# kube-controller-manager and CoreDNS build in the background, at a lower CPU
# priority, while the suites that need none of them run, dual-stack and then
# single-stack. The suites that do run next (and wait for a binary still being
# built: controlplane.Binary). On a warm machine every binary is in the cache
# and the build steps take seconds.
#
# Environment: GO, MAKE, TEST_PKGS (default ./...), E2E_PKGS (./test/e2e/...),
# TEST_FLAGS (-count=1 -timeout 30m), SUBMODULES, KUBEBUILDER_ASSETS.
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
# the background build is done, the others meanwhile, and so do the
# end-to-end suites' single-stack runs.
mapfile -t later < <(grep -rlE --include='*_test.go' \
	'consultest\.|framework\.(RunWithConsul|RunWithLab|LabBinary|StartKubeProxy)' . |
	xargs -r -n1 dirname | sort -u | xargs -r "$go" list)
mapfile -t all < <("$go" list "${test_pkgs[@]}")
mapfile -t e2e < <("$go" list "${e2e_pkgs[@]}")
first=() second=() single_first=() single_second=()
# is_later PKG: whether PKG waits for the background build.
is_later() { [[ " ${later[*]} " == *" $1 "* ]]; }
for pkg in "${all[@]}"; do
	if is_later "$pkg"; then second+=("$pkg"); else first+=("$pkg"); fi
done
for pkg in "${e2e[@]}"; do
	if is_later "$pkg"; then single_second+=("$pkg"); else single_first+=("$pkg"); fi
done

# The suites after the first group mostly wait: on timers, drains, labs'
# connections and providers' answers. At go test's default of two packages
# at a time on two cores the CPU stood 80-90% idle through them, so four run
# at a time (each starts its own API server, lab and agents).
waiting=(-p 4)

status=0
phase "go test: the packages that need only kube-apiserver and etcd (${#first[@]})"
"$go" test "${first[@]}" "${test_flags[@]}" || status=1

if ((${#single_first[@]})); then
	phase "go test: those of them that are end-to-end suites, on a single-stack API server (${#single_first[@]})"
	BACKENDSLICE_TEST_STACK=single "$go" test "${waiting[@]}" "${single_first[@]}" "${test_flags[@]}" || status=1
fi

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
	"$go" test "${waiting[@]}" "${second[@]}" "${test_flags[@]}" || status=1
fi

for m in "${submodules[@]}"; do
	phase "go test ($m)"
	(cd "$m" && "$go" test ./... "${test_flags[@]}") || status=1
done

if ((${#single_second[@]})); then
	phase "go test: the end-to-end suites that run Consul or the data-path lab, on a single-stack API server (${#single_second[@]})"
	BACKENDSLICE_TEST_STACK=single "$go" test "${waiting[@]}" "${single_second[@]}" "${test_flags[@]}" || status=1
fi
exit "$status"
