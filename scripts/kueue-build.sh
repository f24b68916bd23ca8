#!/usr/bin/env bash
# Build the Kueue manager of the k8s test layer from its Go module (tools/kueue/go.mod pins sigs.k8s.io/kueue).
#
# Cached like scripts/k8s-build.sh: the binary goes to .cache/kueue/<key>/bin/kueue, the key being a hash of the
# tools module (go.mod, go.sum and its Go sources) and of this script; a rerun with the same key prints the path
# and builds nothing. One build at a time (a lock in the cache directory): `make test` starts one in the
# background early (k8s-build-early) and scripts/k8s-setup.sh's call waits for it here, then finds its binary.
#
# Prints the bin directory on its last line of stdout. Environment:
#   KUEUE_CACHE_DIR  where the keyed bin directories go (default: .cache/kueue in the repository)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$REPO_ROOT/tools/kueue"
KUEUE_CACHE_DIR="${KUEUE_CACHE_DIR:-$REPO_ROOT/.cache/kueue}"

log() { printf '[kueue-build] %s\n' "$*" >&2; }

command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"  # where the polyglot machines install it
command -v go >/dev/null || { log "ERROR: Go >= 1.25 is needed to build Kueue (tools/kueue)"; exit 1; }

SELF="$REPO_ROOT/scripts/kueue-build.sh"
key=$(cd "$TOOLS" && cat go.mod go.sum $(find . -name '*.go' | LC_ALL=C sort) "$SELF" | sha256sum | cut -c1-16)
BIN="$KUEUE_CACHE_DIR/$key/bin"

mkdir -p "$KUEUE_CACHE_DIR"
exec 9>"$KUEUE_CACHE_DIR/.lock"
flock 9
if [[ -x $BIN/kueue ]]; then
    log "cached: $BIN"
    echo "$BIN"
    exit 0
fi

cd "$TOOLS"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false  # the module as go.sum pins it (read-only)
KUEUE_VERSION=$(go list -m -f '{{.Version}}' sigs.k8s.io/kueue)
pkg=sigs.k8s.io/kueue/pkg/version
ldflags="-s -w -X $pkg.GitVersion=$KUEUE_VERSION -X $pkg.GitCommit=$KUEUE_VERSION -X $pkg.BuildDate=1970-01-01"

tmp="$KUEUE_CACHE_DIR/$key/bin.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"
start=$(date +%s)
log "building Kueue $KUEUE_VERSION into $BIN (cold on 2 cores: see docs/kubernetes.md)"
go build -trimpath -ldflags "$ldflags" -o "$tmp/kueue" sigs.k8s.io/kueue/cmd/kueue
rm -rf "$BIN"
mv "$tmp" "$BIN"
log "built in $(($(date +%s) - start)) s: $BIN"
echo "$BIN"
