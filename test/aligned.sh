#!/usr/bin/env bash
# test/aligned.sh: fail when a module that the tests build (the test modules,
# and the modules under test/controlplane that build kube-apiserver, etcd and
# CoreDNS) compiles a dependency it shares with the product at another version.
#
# Why: Go's build cache keys a compiled package by the versions of everything
# below it. One module built with another golang.org/x/sys compiles every
# package above it a second time: client-go, apiserver, grpc. Aligned, the
# controller's tests, kube-apiserver's build, the test modules and CoreDNS
# compile those shared packages once between them, which is most of a first
# run's build on a fresh machine. `make verify` runs this.
#
# Exempt: Consul (test/controlplane/consul). Its last open-source release,
# 1.14, builds only against the dependencies of its day (client-go 0.18,
# grpc 1.49).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
go=${GO:-go}
export GOWORK=off

# built DIR ARGS...: "module version" of each module that provides a package
# `go list -deps ARGS` builds in DIR, the product's own packages left out.
built() {
	local dir=$1
	shift
	(cd "$dir" && "$go" list -deps -f '{{with .Module}}{{if not .Main}}{{if .Replace}}{{if .Replace.Version}}{{.Path}} {{.Replace.Version}}{{end}}{{else}}{{.Path}} {{.Version}}{{end}}{{end}}{{end}}' "$@") |
		sed '/^$/d' | sort -u
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
built . -test ./... >"$work/product"

status=0
check() {
	local dir=$1
	shift
	built "$dir" "$@" >"$work/other"
	local mismatches
	mismatches=$(join "$work/product" "$work/other" | awk '$2 != $3 { printf "  %s: %s in the product, %s here\n", $1, $2, $3 }')
	if [[ -n $mismatches ]]; then
		echo "aligned: $dir builds shared dependencies at other versions than the product:"
		echo "$mismatches"
		status=1
	fi
}

check test/promrules -test ./...
check test/workflows -test ./...
check test/controlplane/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver ./controllermanager k8s.io/kubernetes/cmd/kube-proxy
check test/controlplane/etcd go.etcd.io/etcd/server/v3
check test/controlplane/coredns .

if ((status)); then
	cat <<'EOF'

Each shared dependency compiles once for all of them only at one version.
Raise the lower side to the higher version (`go get MODULE@VERSION`, then
`go mod tidy`, in that module's directory: the product's is the repository's
root) and run `make verify` again. A control-plane module whose go.sum
changes is rebuilt at the next run (install.sh keys its cache by go.sum).
EOF
fi
exit "$status"
