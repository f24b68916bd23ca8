#!/usr/bin/env bash
# Build the jupyterhub-gpu TensorFlow single-user image from images/tensorflow/Dockerfile.
#
#   bash scripts/build-tf-image.sh [cpu|gpu|gpu-2.12]
#
#   cpu       (make tf-test-image; `make test` builds it) the CPU test variant:
#             BASE_IMAGE=jupyterhub-gpu/bookworm-base:latest (debootstrap, made by
#             scripts/build-test-image.sh) + tensorflow-cpu==2.15.1 from the host wheelhouse,
#             tagged jupyterhub-gpu/tensorflow:2.15-cpu
#   gpu       (make image) the GPU recipe on a lab server: BASE_IMAGE=tensorflow/tensorflow:2.15.0-gpu
#             (pulled when missing; TensorFlow, CUDA and cuDNN come from it), tagged
#             jupyterhub-gpu/tensorflow:2.15
#   gpu-2.12  the 2.12 LTS variant of the same recipe: tensorflow/tensorflow:2.12.0-gpu,
#             tagged jupyterhub-gpu/tensorflow:2.12
#
# Every Python wheel is downloaded on the host for the base image's own Python (containers here
# cannot reach an index) into .cache/wheels/tf-<variant>/, re-downloaded only when
# images/tensorflow/requirements.txt, the dependencies in pyproject.toml, constraints.txt, the
# TensorFlow package or the base's Python change. jupyterhub-gpu's own wheel is built from this
# checkout each time (a few seconds). The image build is skipped when the existing image carries
# a jupyterhub-gpu.recipe-hash label equal to the hash of everything that goes into it (recipe
# files, examples, wheel set, the jupyterhub-gpu wheel, base image id, build arguments). The
# third-party layer is kept tagged as <image>-deps (e.g. jupyterhub-gpu/tensorflow-deps:2.15-cpu), the
# build cache that makes a change to jupyterhub-gpu alone a short rebuild.
#
# A rebuild takes the tag from the existing image: the log names that image (its id and build time)
# before the build, and after it removes that one image by id, unless a container (running or
# stopped) still uses it, in which case it is kept, untagged, and the log names the containers.
# Nothing else is pruned.
#
# Environment (all optional): BASE_IMAGE, IMAGE, TF_VERSION, TF_PACKAGE override the variant's
# values; FORCE=1 rebuilds even when up to date; STATE_DIR (default .state) holds the logs.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

VARIANT="${1:-cpu}"
case "$VARIANT" in
cpu)
    : "${BASE_IMAGE:=jupyterhub-gpu/bookworm-base:latest}" "${IMAGE:=jupyterhub-gpu/tensorflow:2.15-cpu}"
    : "${TF_VERSION:=2.15.1}" "${TF_PACKAGE=tensorflow-cpu==2.15.1}"
    ;;
gpu)
    : "${BASE_IMAGE:=tensorflow/tensorflow:2.15.0-gpu}" "${IMAGE:=jupyterhub-gpu/tensorflow:2.15}"
    : "${TF_VERSION:=2.15.0}" "${TF_PACKAGE=}"
    ;;
gpu-2.12)
    : "${BASE_IMAGE:=tensorflow/tensorflow:2.12.0-gpu}" "${IMAGE:=jupyterhub-gpu/tensorflow:2.12}"
    : "${TF_VERSION:=2.12.0}" "${TF_PACKAGE=}"
    ;;
*)
    printf 'usage: %s [cpu|gpu|gpu-2.12]\n' "$0" >&2
    exit 2
    ;;
esac

STATE_DIR="${STATE_DIR:-.state}"
RECIPE_DIR="images/tensorflow"
WHEEL_DIR=".cache/wheels/tf-$VARIANT"
WHEEL_STAMP="$WHEEL_DIR/.key"
LOCAL_WHEEL_DIR=".cache/wheels/tf-local"
CONTEXT_DIR=".cache/docker-context/tf-$VARIANT"
HASH_LABEL="jupyterhub-gpu.recipe-hash"
DEPS_IMAGE="${IMAGE%:*}-deps:${IMAGE##*:}"
WHEEL_PLATFORM="manylinux2014_x86_64"

log() { printf '[build-tf-image] %s\n' "$*" >&2; }
die() { printf '[build-tf-image] ERROR: %s\n' "$*" >&2; exit 1; }

CLEANUP_DIRS=()
cleanup() { local d; for d in "${CLEANUP_DIRS[@]}"; do rm -rf "$d"; done; }
trap cleanup EXIT

sha256_of_stdin() { sha256sum | cut -d' ' -f1; }
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

"$REPO_ROOT/scripts/docker-setup.sh"
mkdir -p "$STATE_DIR"
exec 9>"$STATE_DIR/build-tf-image.lock"
flock 9

# --- 1. the base image ----------------------------------------------------------------------------
if ! image_exists "$BASE_IMAGE"; then
    if [[ $VARIANT == cpu && $BASE_IMAGE == jupyterhub-gpu/bookworm-base:* ]]; then
        log "base image $BASE_IMAGE missing: building it with scripts/build-test-image.sh"
        bash "$REPO_ROOT/scripts/build-test-image.sh"
    else
        log "pulling $BASE_IMAGE"
        docker pull "$BASE_IMAGE" || die "cannot pull $BASE_IMAGE (no registry reachable? see docs/images.md)"
    fi
fi
BASE_ID="$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE")"
PY_VERSION="$(docker run --rm --network none --entrypoint python3 "$BASE_IMAGE" \
    -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')" ||
    die "$BASE_IMAGE has no python3"
log "base $BASE_IMAGE (${BASE_ID:7:12}) has Python $PY_VERSION"

# --- 2. the host wheelhouse (third-party wheels) ---------------------------------------------------
DEPS_FILE="$STATE_DIR/tf-image-deps.txt"
python3 - "$DEPS_FILE" <<'EOF'
import sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
open(sys.argv[1], "w").write("# jupyterhub-gpu's own dependencies (pyproject.toml)\n" + "\n".join(deps) + "\n")
EOF
key="$({
    cat "$RECIPE_DIR/requirements.txt" "$DEPS_FILE" constraints.txt
    printf 'python=%s platform=%s tf=%s\n' "$PY_VERSION" "$WHEEL_PLATFORM" "$TF_PACKAGE"
} | sha256_of_stdin)"
if [[ -f $WHEEL_STAMP && "$(cat "$WHEEL_STAMP")" == "$key" ]]; then
    log "wheelhouse $WHEEL_DIR is up to date"
else
    log "downloading wheels into $WHEEL_DIR (Python $PY_VERSION, $WHEEL_PLATFORM)"
    tmp="$WHEEL_DIR.tmp.$$"
    rm -rf "$tmp"
    CLEANUP_DIRS+=("$tmp")
    # shellcheck disable=SC2086 # TF_PACKAGE is one requirement or empty
    if ! python3 -m pip download --disable-pip-version-check --dest "$tmp" \
        --python-version "$PY_VERSION" --platform "$WHEEL_PLATFORM" --implementation cp --only-binary=:all: \
        -c constraints.txt -r "$RECIPE_DIR/requirements.txt" -r "$DEPS_FILE" pip $TF_PACKAGE \
        >"$STATE_DIR/pip-download-tf-image.log" 2>&1; then
        tail -n 20 "$STATE_DIR/pip-download-tf-image.log" >&2
        die "pip download failed (full log: $STATE_DIR/pip-download-tf-image.log)"
    fi
    printf '%s\n' "$key" >"$tmp/.key"
    rm -rf "$WHEEL_DIR"
    mv "$tmp" "$WHEEL_DIR"
    log "wheelhouse ready: $(find "$WHEEL_DIR" -name '*.whl' | wc -l) wheels, $(du -sh "$WHEEL_DIR" | cut -f1)"
fi

# --- 3. jupyterhub-gpu's own wheel, from this checkout ---------------------------------------------
rm -rf "$LOCAL_WHEEL_DIR"
mkdir -p "$LOCAL_WHEEL_DIR"
if ! python3 -m pip wheel --disable-pip-version-check --no-deps --wheel-dir "$LOCAL_WHEEL_DIR" . \
    >"$STATE_DIR/pip-wheel-jupyterhub-gpu.log" 2>&1; then
    tail -n 20 "$STATE_DIR/pip-wheel-jupyterhub-gpu.log" >&2
    die "building the jupyterhub-gpu wheel failed (the Lab extension needs Node.js to build once)"
fi
LOCAL_WHEEL="$(ls "$LOCAL_WHEEL_DIR"/jupyterhub_gpu-*.whl)"
VERSION="$(basename "$LOCAL_WHEEL" | cut -d- -f2)"

# --- 4. the image ------------------------------------------------------------------------------------
# the wheel's bytes vary with nothing but its contents (hatchling fixes the timestamps)
hash="$({
    (cd "$RECIPE_DIR" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    (find examples -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    find "$WHEEL_DIR" -maxdepth 1 -name '*.whl' -printf '%f\n' | LC_ALL=C sort
    sha256sum <"$LOCAL_WHEEL"
    # jupyterhub-gpu's own dependencies, installed from the wheelhouse in the deps stage
    sha256sum <"$DEPS_FILE"
    printf '%s\n' "$BASE_ID" "$TF_VERSION" "$TF_PACKAGE"
} | sha256_of_stdin)"
if [[ ${FORCE:-0} != 1 ]] && image_exists "$IMAGE"; then
    current="$(docker image inspect --format "{{ index .Config.Labels \"$HASH_LABEL\" }}" "$IMAGE" 2>/dev/null || true)"
    if [[ $current == "$hash" ]]; then
        log "$IMAGE is up to date ($HASH_LABEL=${hash:0:12}); skipping the build (FORCE=1 to rebuild)"
        exit 0
    fi
    log "$IMAGE is out of date (${current:0:12} -> ${hash:0:12}); rebuilding"
fi

start=$SECONDS
rm -rf "$CONTEXT_DIR"
mkdir -p "$CONTEXT_DIR"
CLEANUP_DIRS+=("$CONTEXT_DIR")
cp -a "$RECIPE_DIR"/. "$CONTEXT_DIR"/
cp "$DEPS_FILE" "$CONTEXT_DIR/jupyterhub-gpu-deps.txt"
cp -a examples "$CONTEXT_DIR/examples"
cp -al "$WHEEL_DIR" "$CONTEXT_DIR/wheels" 2>/dev/null || cp -a "$WHEEL_DIR" "$CONTEXT_DIR/wheels"
mkdir "$CONTEXT_DIR/local"
cp "$LOCAL_WHEEL" "$WHEEL_DIR"/pip-*.whl "$CONTEXT_DIR/local/"

log "building $IMAGE from $RECIPE_DIR/Dockerfile (BASE_IMAGE=$BASE_IMAGE TF_VERSION=$TF_VERSION TF_PACKAGE=${TF_PACKAGE:-none})"
BUILD_LOG="$STATE_DIR/docker-build-tf-image-$VARIANT.log"
: >"$BUILD_LOG"
# classic builder: the daemon here is older than the client and runs without a bridge network
build() {
    DOCKER_BUILDKIT=0 docker build --network host \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" \
        --build-arg "TF_VERSION=$TF_VERSION" \
        --build-arg "TF_PACKAGE=$TF_PACKAGE" \
        --build-arg "JUPYTERHUB_GPU_VERSION=$VERSION" \
        "$@" "$CONTEXT_DIR" >>"$BUILD_LOG" 2>&1 || {
        tail -n 40 "$BUILD_LOG" >&2
        die "docker build failed (full log: $BUILD_LOG)"
    }
}
image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
short_id() { local id="${1#sha256:}"; printf '%s' "${id:0:12}"; }
# The containers (running or not) created from image id $1, as "name (status)" lines.
containers_using() {
    docker ps --all --no-trunc --filter "ancestor=$1" --format '{{.Names}} ({{.Status}})' 2>/dev/null || true
}
# An image that a new build took the tag $1 from (old id $2): removed, unless a container still uses
# it or another tag still names it; either way the log says what happened to it.
retire_image() {
    local tag="$1" old="$2" new users line
    [[ -n $old ]] || return 0
    new="$(image_id "$tag")"
    [[ $old != "$new" ]] || return 0
    users="$(containers_using "$old")"
    if [[ -n $users ]]; then
        log "kept the previous $tag ($(short_id "$old"), untagged now): containers still use it:"
        while IFS= read -r line; do log "    $line"; done <<<"$users"
        log "  remove it with 'docker image rm $(short_id "$old")' once they are gone"
        return 0
    fi
    if docker image rm "$old" >/dev/null 2>&1; then
        log "removed the previous $tag ($(short_id "$old"))"
    else
        log "kept the previous $tag ($(short_id "$old")): docker would not remove it (another tag or a child image uses it)"
    fi
}

# Say what a build replaces before it does.
OLD_IMAGE_ID="$(image_id "$IMAGE")"
OLD_DEPS_ID="$(image_id "$DEPS_IMAGE")"
if [[ -n $OLD_IMAGE_ID ]]; then
    old_created="$(docker image inspect --format '{{ index .Config.Labels "org.opencontainers.image.created" }}' "$IMAGE" 2>/dev/null || true)"
    log "replacing $IMAGE: the existing image $(short_id "$OLD_IMAGE_ID") (built ${old_created:-at an unknown time}) loses the tag" \
        "and is removed after the build, unless a container still uses it"
fi
# The third-party layer (TensorFlow and the rest) is its own tagged stage: an untagged stage would be
# lost, and with it the cache that makes a change to jupyterhub-gpu a seconds-long build.
build --target deps --tag "$DEPS_IMAGE"
build --label "$HASH_LABEL=$hash" --label "org.opencontainers.image.created=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --tag "$IMAGE"
# the superseded copies of both, by id: never an image a container uses, never another build's
retire_image "$IMAGE" "$OLD_IMAGE_ID"
retire_image "$DEPS_IMAGE" "$OLD_DEPS_ID"

log "smoke test: jupyterhub-singleuser --version as $(docker run --rm --network none "$IMAGE" id -un)"
docker run --rm --network none "$IMAGE" jupyterhub-singleuser --version >&2 || die "smoke test of $IMAGE failed"
log "$IMAGE built in $((SECONDS - start))s ($(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
