#!/usr/bin/env bash
# Build the k8s test layer's binaries from the Kubernetes Go modules (tools/k8s/go.mod): kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, etcd, and the simulated NVIDIA device plugin.
#
# Cached: the binaries go to .cache/k8s/<key>/bin, the key being a hash of the tools module (go.mod, go.sum
# and its Go sources) and of this script; a rerun with the same key prints the path and builds nothing. The Go
# build cache (GOCACHE, ~/.cache/go-build by default) makes a build after a small change cost little more than
# the links.
#
# One build at a time (a lock in the cache directory): a second caller waits for the first and uses its binaries.
#
# Prints the bin directory on its last line of stdout. Environment:
#   K8S_CACHE_DIR  where the keyed bin directories go (default: .cache/k8s in the repository)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$REPO_ROOT/tools/k8s"
K8S_CACHE_DIR="${K8S_CACHE_DIR:-$REPO_ROOT/.cache/k8s}"

log() { printf '[k8s-build] %s\n' "$*" >&2; }

command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"  # where the polyglot machines install it
command -v go >/dev/null || { log "ERROR: Go >= 1.24 is needed to build the k8s test layer (tools/k8s)"; exit 1; }

SELF="$REPO_ROOT/scripts/k8s-build.sh"
key=$(cd "$TOOLS" && cat go.mod go.sum $(find . -name '*.go' | LC_ALL=C sort) "$SELF" | sha256sum | cut -c1-16)
BIN="$K8S_CACHE_DIR/$key/bin"
NAMES=(kube-apiserver kube-controller-manager kube-scheduler kubelet etcd gpu-device-plugin-sim pause)

complete() { for n in "${NAMES[@]}"; do [[ -x $BIN/$n ]] || return 1; done; }
# one build at a time: `make test` starts one in the background early (k8s-build-early) and k8s-setup's waits
# for it here, then finds its binaries
mkdir -p "$K8S_CACHE_DIR"
exec 9>"$K8S_CACHE_DIR/.lock"
flock 9
if complete; then
    log "cached: $BIN"
    echo "$BIN"
    exit 0
fi

# the release the binaries report (kubectl version, the node's kubeletVersion): the module's own version
K8S_VERSION=$(cd "$TOOLS" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"

tmp="$K8S_CACHE_DIR/$key/bin.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"
start=$(date +%s)
log "building Kubernetes $K8S_VERSION and etcd into $BIN (cold on 2 cores: see docs/kubernetes.md)"
cd "$TOOLS"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false  # the module as go.sum pins it (read-only)
go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
go build -trimpath -ldflags "-s -w" -o "$tmp/" ./cmd/gpu-device-plugin-sim ./cmd/pause
rm -rf "$BIN"
mv "$tmp" "$BIN"
log "built in $(($(date +%s) - start)) s: $BIN"
echo "$BIN"
