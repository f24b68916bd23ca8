#!/usr/bin/env bash
# Build the hub image of config/kubernetes/hub.Dockerfile for the k8s test layer, which runs it as a pod.
#
#   1. jupyterhub-gpu/k8s-hub-standin:test  images/k8s-hub-standin: a stand-in for the chart's hub image
#        (quay.io/jupyterhub/k8s-hub cannot be pulled here) on jupyterhub-gpu/bookworm-base, with JupyterHub,
#        KubeSpawner, psycopg and jupyterhub-gpu's other dependencies from a host wheelhouse
#        (.cache/wheels/k8s-hub, downloaded again only when pyproject.toml's dependencies or constraints.txt
#        change; containers cannot reach PyPI).
#   2. jupyterhub-gpu/k8s-hub:test  config/kubernetes/hub.Dockerfile itself, unchanged, built on the stand-in
#        (K8S_HUB_IMAGE/K8S_HUB_TAG build arguments) from a context holding this checkout's wheel, as an admin
#        builds it from dist/.
#
# Each build is skipped when its image carries the hash of what it was built from. Environment: STATE_DIR
# (.state), FORCE=1 (rebuild anyway).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

BASE_IMAGE="${BASE_IMAGE:-jupyterhub-gpu/bookworm-base:latest}"
STANDIN_IMAGE="jupyterhub-gpu/k8s-hub-standin:test"
HUB_IMAGE="${K8S_HUB_IMAGE:-jupyterhub-gpu/k8s-hub:test}"
STATE_DIR="${STATE_DIR:-.state}"
WHEEL_DIR=".cache/wheels/k8s-hub"
LOCAL_WHEEL_DIR=".cache/wheels/k8s-hub-local"
CONTEXT_DIR=".cache/docker-context/k8s-hub"
HASH_LABEL="jupyterhub-gpu.recipe-hash"
WHEEL_PLATFORM="manylinux2014_x86_64"

log() { printf '[build-k8s-hub-image] %s\n' "$*" >&2; }
die() { printf '[build-k8s-hub-image] ERROR: %s\n' "$*" >&2; exit 1; }
sha256_of_stdin() { sha256sum | cut -d' ' -f1; }
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
label_of() { docker image inspect --format "{{ index .Config.Labels \"$HASH_LABEL\" }}" "$1" 2>/dev/null || true; }

"$REPO_ROOT/scripts/docker-setup.sh"
mkdir -p "$STATE_DIR"
exec 9>"$STATE_DIR/build-k8s-hub-image.lock"
flock 9

image_exists "$BASE_IMAGE" || bash "$REPO_ROOT/scripts/build-test-image.sh"
BASE_ID="$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE")"
PY_VERSION="$(docker run --rm --network none --entrypoint python3 "$BASE_IMAGE" \
    -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"

# --- the wheelhouse: jupyterhub-gpu's dependencies, its kubernetes extra, the recipe's psycopg -----------------
REQS="$STATE_DIR/k8s-hub-requirements.txt"
python3 - "$REQS" <<'PY'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
reqs = [*project["dependencies"], *project["optional-dependencies"]["kubernetes"], "psycopg[binary]>=3.1"]
open(sys.argv[1], "w").write("# the hub image's third-party packages (pyproject.toml and hub.Dockerfile)\n" + "\n".join(reqs) + "\n")
PY
key="$({ cat "$REQS" constraints.txt; printf 'python=%s platform=%s\n' "$PY_VERSION" "$WHEEL_PLATFORM"; } | sha256_of_stdin)"
if [[ "$(cat "$WHEEL_DIR/.key" 2>/dev/null)" == "$key" ]]; then
    log "wheelhouse $WHEEL_DIR is up to date"
else
    log "downloading wheels into $WHEEL_DIR (Python $PY_VERSION, $WHEEL_PLATFORM)"
    tmp="$WHEEL_DIR.tmp.$$"
    rm -rf "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --disable-pip-version-check --dest "$tmp" \
        --python-version "$PY_VERSION" --platform "$WHEEL_PLATFORM" --implementation cp --only-binary=:all: \
        -c constraints.txt -r "$REQS" >"$STATE_DIR/pip-download-k8s-hub.log" 2>&1 || {
        tail -n 20 "$STATE_DIR/pip-download-k8s-hub.log" >&2
        die "pip download failed (full log: $STATE_DIR/pip-download-k8s-hub.log)"
    }
    printf '%s\n' "$key" >"$tmp/.key"
    rm -rf "$WHEEL_DIR"
    mv "$tmp" "$WHEEL_DIR"
    trap - EXIT
fi

BUILD_LOG="$STATE_DIR/docker-build-k8s-hub.log"
: >"$BUILD_LOG"
# classic builder: the daemon here is older than the client and runs without a bridge network
build() {
    DOCKER_BUILDKIT=0 docker build --network host "$@" >>"$BUILD_LOG" 2>&1 || {
        tail -n 40 "$BUILD_LOG" >&2
        die "docker build failed (full log: $BUILD_LOG)"
    }
}

# --- 1. the stand-in for the chart's hub image -----------------------------------------------------------------
standin_hash="$({
    sha256sum images/k8s-hub-standin/Dockerfile "$REQS"
    find "$WHEEL_DIR" -maxdepth 1 -name '*.whl' -printf '%f\n' | LC_ALL=C sort
    printf '%s\n' "$BASE_ID"
} | sha256_of_stdin)"
if [[ ${FORCE:-0} == 1 || "$(label_of "$STANDIN_IMAGE")" != "$standin_hash" ]]; then
    log "building $STANDIN_IMAGE"
    ctx="$CONTEXT_DIR-standin"
    rm -rf "$ctx" && mkdir -p "$ctx"
    cp images/k8s-hub-standin/Dockerfile "$ctx/"
    grep -v '^#' "$REQS" >"$ctx/requirements.txt"
    cp -al "$WHEEL_DIR" "$ctx/wheels" 2>/dev/null || cp -a "$WHEEL_DIR" "$ctx/wheels"
    build --build-arg "BASE_IMAGE=$BASE_IMAGE" --label "$HASH_LABEL=$standin_hash" --tag "$STANDIN_IMAGE" "$ctx"
    rm -rf "$ctx"
fi

# --- 2. hub.Dockerfile on the stand-in, with this checkout's wheel ---------------------------------------------
rm -rf "$LOCAL_WHEEL_DIR" && mkdir -p "$LOCAL_WHEEL_DIR"
python3 -m pip wheel --disable-pip-version-check --no-deps --wheel-dir "$LOCAL_WHEEL_DIR" . \
    >"$STATE_DIR/pip-wheel-k8s-hub.log" 2>&1 || {
    tail -n 20 "$STATE_DIR/pip-wheel-k8s-hub.log" >&2
    die "building the jupyterhub-gpu wheel failed (the Lab extension needs Node.js to build once)"
}
hub_hash="$({
    sha256sum config/kubernetes/hub.Dockerfile "$LOCAL_WHEEL_DIR"/jupyterhub_gpu-*.whl | cut -d' ' -f1
    docker image inspect --format '{{.Id}}' "$STANDIN_IMAGE"
} | sha256_of_stdin)"
if [[ ${FORCE:-0} != 1 && "$(label_of "$HUB_IMAGE")" == "$hub_hash" ]]; then
    log "$HUB_IMAGE is up to date"
    exit 0
fi
log "building $HUB_IMAGE from config/kubernetes/hub.Dockerfile on $STANDIN_IMAGE"
rm -rf "$CONTEXT_DIR" && mkdir -p "$CONTEXT_DIR"
cp "$LOCAL_WHEEL_DIR"/jupyterhub_gpu-*.whl "$CONTEXT_DIR/"
build -f config/kubernetes/hub.Dockerfile --build-arg "K8S_HUB_IMAGE=${STANDIN_IMAGE%:*}" \
    --build-arg "K8S_HUB_TAG=${STANDIN_IMAGE##*:}" --label "$HASH_LABEL=$hub_hash" --tag "$HUB_IMAGE" "$CONTEXT_DIR"
rm -rf "$CONTEXT_DIR"
docker image prune --force --filter "label=$HASH_LABEL" >/dev/null || true
log "$HUB_IMAGE: $(docker run --rm --network none "$HUB_IMAGE" jupyterhub --version) as uid $(docker run --rm --network none "$HUB_IMAGE" id -u)"
