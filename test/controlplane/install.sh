#!/usr/bin/env bash
# install.sh NAME: put a test binary (kube-apiserver, kube-proxy,
# kube-controller-manager, etcd, consul or coredns) into <repo>/bin/.
#
# The binaries cannot be downloaded here, so each one is built from a pinned Go
# module under test/controlplane/ (kept apart from the product's go.mod): NAME/,
# except kube-proxy and kube-controller-manager, which come from the same
# k8s.io/kubernetes module (and the same staging replaces) as kube-apiserver and
# are built from kube-apiserver/ (kube-controller-manager as the upstream
# controllers the suites run, kube-apiserver/controllermanager). A build
# is done once per machine and kept in the user cache, keyed by the version pinned
# in that module's go.mod and a hash of the module's files:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/backendslice/NAME-VERSION-MODULEHASH/NAME
#
# and then linked (or copied) into bin/. A fresh clone on a warm machine therefore
# takes seconds; bumping the version in go.mod, any dependency in go.sum, or
# editing the module's sources, changes the key and rebuilds.
# Concurrent runs are serialised with flock(1) so that only one of them builds.
#
# Environment: BACKENDSLICE_CACHE_DIR overrides the cache root
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/backendslice); GO overrides the go command.
set -euo pipefail

usage() {
	echo "usage: $0 kube-apiserver|kube-proxy|kube-controller-manager|etcd|consul|coredns" >&2
	exit 2
}
[[ $# -eq 1 ]] || usage
name=$1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
go=${GO:-go}

# mod: the module whose version is the cache key; pkg: what to build;
# moddir: where its go.mod is; minutes: how long a cold build takes on 2 cores
# (measured).
moddir=$here/$name
case $name in
kube-apiserver)
	mod=k8s.io/kubernetes
	pkg=k8s.io/kubernetes/cmd/kube-apiserver
	minutes=10
	;;
kube-proxy)
	mod=k8s.io/kubernetes
	pkg=k8s.io/kubernetes/cmd/kube-proxy
	moddir=$here/kube-apiserver
	minutes=2 # most packages are shared with kube-apiserver's build
	;;
kube-controller-manager)
	mod=k8s.io/kubernetes
	# The upstream controllers the suites run, with kube-controller-manager's
	# flags for them (controllermanager/main.go says why not the whole).
	pkg=./controllermanager
	moddir=$here/kube-apiserver
	minutes=1 # shares most packages with kube-apiserver's build
	;;
etcd)
	mod=go.etcd.io/etcd/server/v3
	pkg=go.etcd.io/etcd/server/v3
	minutes=1
	;;
consul)
	mod=github.com/hashicorp/consul
	pkg=. # the agent-only main in test/controlplane/consul
	minutes=5
	;;
coredns)
	mod=github.com/coredns/coredns
	pkg=. # a main in test/controlplane/coredns with the plugins the tests use
	minutes=6
	;;
*) usage ;;
esac

[[ -f $moddir/go.mod ]] || {
	echo "install.sh: $moddir/go.mod not found" >&2
	exit 1
}

# The version of $mod required by the module's go.mod (single-line or block form).
version=$(awk -v m="$mod" '
	$1 == "require" && $2 == "(" { inreq = 1; next }
	inreq && $1 == ")" { inreq = 0; next }
	$1 == "require" && $2 == m { print $3; exit }
	inreq && $1 == m { print $2; exit }
' "$moddir/go.mod")
[[ -n $version ]] || {
	echo "install.sh: no 'require $mod' in $moddir/go.mod" >&2
	exit 1
}

if [[ -n ${BACKENDSLICE_CACHE_DIR:-} ]]; then
	cacheroot=$BACKENDSLICE_CACHE_DIR
elif [[ -n ${XDG_CACHE_HOME:-} ]]; then
	cacheroot=$XDG_CACHE_HOME/backendslice
elif [[ -n ${HOME:-} ]]; then
	cacheroot=$HOME/.cache/backendslice
else
	echo "install.sh: neither XDG_CACHE_HOME nor HOME is set; set BACKENDSLICE_CACHE_DIR" >&2
	exit 1
fi
# GOWORK=off: a go.work in the checkout must not change what gets built.
# -mod=readonly: the build never edits the pinned go.mod/go.sum.
# -buildvcs=false: the checkout may have no commits, and the stamp is not wanted.
# -trimpath and CGO_ENABLED=0: as the Makefile builds and tests the product
# (and as Kubernetes releases its binaries), so that the packages both need
# are compiled once, for both, in Go's build cache.
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false -trimpath" CGO_ENABLED=0

# The cache key also holds a hash of the module's files (go.mod, go.sum
# and its Go sources, with the modules its replace directives point at
# below it) and of the flags above: its dependencies are pinned to the
# product's versions (test/aligned.sh) and move with them, and a binary
# built from other dependencies, other sources, or with other flags, is
# another binary.
sum=$(
	cd "$moddir"
	find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) | LC_ALL=C sort |
		while IFS= read -r f; do printf '%s\n' "$f" && cat "$f"; done
	printf '%s\n' "$GOFLAGS CGO_ENABLED=$CGO_ENABLED"
) && sum=$(sha256sum <<<"$sum")
cachedir=$cacheroot/$name-$version-${sum:0:12}
cached=$cachedir/$name
mkdir -p "$cachedir" "$repo/bin"

# link_into_bin makes bin/NAME point at the cached binary: a symlink, else a hard
# link, else a copy (written next to the target and renamed into place).
link_into_bin() {
	local dst=$repo/bin/$name
	if ln -sfn "$cached" "$dst" 2>/dev/null || ln -f "$cached" "$dst" 2>/dev/null; then
		:
	else
		cp -f "$cached" "$dst.tmp.$$" && mv -f "$dst.tmp.$$" "$dst"
	fi
	echo "$name $version: bin/$name -> $cached"
}

if [[ -x $cached ]]; then
	link_into_bin
	exit 0
fi

# Serialise builds of this NAME-VERSION across processes. Another run that holds
# the lock may be building it right now: wait for it, then use its result.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$cachedir/.lock"
	if ! flock -n 9; then
		echo "$name $version: another build holds $cachedir/.lock; waiting for it..."
		flock 9
	fi
	if [[ -x $cached ]]; then
		link_into_bin
		exit 0
	fi
else
	echo "$name $version: flock(1) not found; building without a lock" >&2
fi

start=$SECONDS
echo "$name $version: not in the cache, building it from ${moddir#"$repo"/}/."
echo "$name $version: the first build takes ~$minutes min on 2 cores; later runs (and fresh clones on this machine) take seconds."

tmpdir=$(mktemp -d "$cachedir/.build.XXXXXX")
trap 'rm -rf "$tmpdir"' EXIT

cd "$moddir"

# -s -w: no symbol table or DWARF, which the tests never read, and which take
# a good part of linking kube-apiserver and kube-controller-manager.
ldflags="-s -w"
if [[ $mod == k8s.io/kubernetes ]]; then
	# What the Kubernetes release build stamps, so that /version and --version
	# report the real version (Helm, discovery and kubectl read it).
	minor=${version#v*.}
	minor=${minor%%.*}
	major=${version#v}
	major=${major%%.*}
	v=k8s.io/component-base/version
	ldflags+=" -X $v.gitVersion=$version -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
fi

echo "$name $version: downloading modules and listing packages..."
total=$("$go" list -deps "$pkg" | wc -l | tr -d ' ')

log=$cachedir/build.log
echo "$name $version: compiling up to $total packages (full log: $log)"

# go build -v prints each package as it compiles it, on stderr, along with any
# errors. Count the package lines, show the rest, and say something at least
# every 30 s (the final link of kube-apiserver alone takes a while).
count_progress() {
	local n=0 last=$SECONDS line rc
	while :; do
		rc=0
		IFS= read -r -t 30 line || rc=$?
		if ((rc == 0)); then
			printf '%s\n' "$line" >>"$log"
			if [[ $line =~ ^[A-Za-z0-9._~/+-]+$ ]]; then
				n=$((n + 1))
				if (((n % 100 == 0 && SECONDS - last >= 5) || SECONDS - last >= 30)); then
					echo "$name: $n/$total packages compiled ($((SECONDS - start))s)"
					last=$SECONDS
				fi
			else
				printf '%s\n' "$line"
			fi
		elif ((rc > 128)); then # timed out: no output for 30 s
			echo "$name: $n/$total packages compiled, still working ($((SECONDS - start))s)"
			last=$SECONDS
		else # end of input
			echo "$name: $n packages compiled ($((SECONDS - start))s)"
			return 0
		fi
	done
}

: >"$log"
if ! "$go" build -v -ldflags="$ldflags" -o "$tmpdir/$name" "$pkg" 2>&1 | count_progress; then
	echo "$name $version: go build failed; see the errors above and $log" >&2
	exit 1
fi

chmod 0755 "$tmpdir/$name"
mv -f "$tmpdir/$name" "$cached" # same directory: an atomic rename
echo "$name $version: built in $((SECONDS - start))s, cached at $cached"
link_into_bin
