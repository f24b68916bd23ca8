#!/usr/bin/env bash
# Build the Docker images used by the jupyterhub-gpu integration tests.
#
#   1. jupyterhub-gpu/bookworm-base:latest
#        Debian bookworm (debootstrap --variant=minbase) with python3 and
#        python3-venv, imported with `docker import` because no image registry
#        is reachable. Slow (a few minutes), so it is skipped entirely when the
#        tag already exists (set REBUILD_BASE=1 to force).
#   2. jupyterhub-gpu/test-singleuser:latest
#        images/test/Dockerfile on top of the base image. The Python wheels are
#        downloaded on the host into .cache/wheels/test-image/ (containers can't
#        reach PyPI) and only re-downloaded when images/test/requirements.txt
#        changes. The build is skipped when the existing image carries a
#        `jupyterhub-gpu.recipe-hash` label equal to the hash of the recipe
#        (files in images/test/, the wheel set and the base image id); set
#        FORCE=1 to rebuild anyway.
#
# Runs scripts/docker-setup.sh first, so the daemon is started if needed.
#
# Environment (all optional):
#   BASE_IMAGE, TEST_IMAGE   image tags (defaults above)
#   DEBIAN_MIRROR            default http://deb.debian.org/debian
#   REBUILD_BASE=1           rebuild the base image even if it exists
#   FORCE=1                  rebuild the test image even if it is up to date
#   STATE_DIR                default .state (lock file, dockerd log)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

BASE_IMAGE="${BASE_IMAGE:-jupyterhub-gpu/bookworm-base:latest}"
TEST_IMAGE="${TEST_IMAGE:-jupyterhub-gpu/test-singleuser:latest}"
DEBIAN_SUITE="bookworm"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_PACKAGES="python3,python3-venv,passwd"
# Debian bookworm's python3 is 3.11.2; wheels are fetched for that interpreter.
WHEEL_PY_VERSION="3.11.2"
WHEEL_PLATFORM="manylinux2014_x86_64"

STATE_DIR="${STATE_DIR:-.state}"
IMAGE_DIR="images/test"
REQUIREMENTS="$IMAGE_DIR/requirements.txt"
WHEEL_DIR=".cache/wheels/test-image"
WHEEL_STAMP="$WHEEL_DIR/.requirements.sha256"
CONTEXT_DIR=".cache/docker-context/test-singleuser"
HASH_LABEL="jupyterhub-gpu.recipe-hash"

log() { printf '[build-test-image] %s\n' "$*" >&2; }
die() { printf '[build-test-image] ERROR: %s\n' "$*" >&2; exit 1; }

# Paths to clean up on exit (rootfs dirs may contain device nodes / mounts).
CLEANUP_ROOTFS=""
CLEANUP_DIRS=()
cleanup() {
    local d mnt
    if [[ -n $CLEANUP_ROOTFS && -d $CLEANUP_ROOTFS ]]; then
        # debootstrap mounts proc/sys inside the target; unmount anything left
        # over (deepest first) before deleting, and never cross filesystems.
        while read -r mnt; do
            umount -l "$mnt" 2>/dev/null || true
        done < <(awk -v root="$CLEANUP_ROOTFS/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r)
        rm -rf --one-file-system "$CLEANUP_ROOTFS"
    fi
    for d in "${CLEANUP_DIRS[@]}"; do
        rm -rf "$d"
    done
}
trap cleanup EXIT

sha256_of_stdin() { sha256sum | cut -d' ' -f1; }

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# --- 0. docker daemon + lock -------------------------------------------------
"$REPO_ROOT/scripts/docker-setup.sh"

mkdir -p "$STATE_DIR"
exec 9>"$STATE_DIR/build-test-image.lock"
if ! flock -n 9; then
    log "another build-test-image.sh is running; waiting for it"
    flock 9
fi

# --- 1. base image (debootstrap) ---------------------------------------------
# Remove docs/man/info/translations from a freshly bootstrapped rootfs and tell
# dpkg to keep them out. $1 must be the rootfs (never empty, never /).
slim_rootfs() {
    local root="${1:?slim_rootfs: rootfs path required}"
    [[ $root != / && -d $root/etc/dpkg/dpkg.cfg.d && -d $root/usr/share/doc ]] ||
        die "slim_rootfs: refusing to touch '$root' (not a bootstrapped rootfs)"
    log "removing docs, man pages and translations from the rootfs"
    printf '%s\n' \
        'path-exclude /usr/share/doc/*' \
        'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/groff/*' \
        'path-exclude /usr/share/info/*' \
        'path-exclude /usr/share/linda/*' \
        'path-exclude /usr/share/lintian/overrides/*' \
        'path-exclude /usr/share/locale/*' \
        'path-exclude /usr/share/man/*' \
        >"$root/etc/dpkg/dpkg.cfg.d/docker-slim"
    find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
    find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
    local d
    for d in groff info linda lintian/overrides locale man; do
        if [[ -d $root/usr/share/$d ]]; then
            find "$root/usr/share/$d" -mindepth 1 -delete
        fi
    done
}

build_base_image() {
    if [[ ${REBUILD_BASE:-0} != 1 ]] && image_exists "$BASE_IMAGE"; then
        log "base image $BASE_IMAGE exists; skipping debootstrap (REBUILD_BASE=1 to force)"
        return 0
    fi
    command -v debootstrap >/dev/null 2>&1 ||
        die "debootstrap is not installed (run scripts/docker-setup.sh)"
    [[ $(id -u) -eq 0 ]] || die "debootstrap needs root"

    local rootfs start
    rootfs="$(mktemp -d "${TMPDIR:-/var/tmp}/jupyterhub-gpu-rootfs.XXXXXX")"
    CLEANUP_ROOTFS="$rootfs"
    start=$SECONDS
    log "building base image $BASE_IMAGE: debootstrap --variant=minbase $DEBIAN_SUITE ($DEBIAN_MIRROR) into $rootfs"
    if ! debootstrap --variant=minbase --include="$BASE_PACKAGES" \
        "$DEBIAN_SUITE" "$rootfs" "$DEBIAN_MIRROR" >"$STATE_DIR/debootstrap.log" 2>&1; then
        tail -n 30 "$STATE_DIR/debootstrap.log" >&2 || true
        if [[ -f $rootfs/debootstrap/debootstrap.log ]]; then
            tail -n 30 "$rootfs/debootstrap/debootstrap.log" >&2 || true
        fi
        die "debootstrap failed (full log: $STATE_DIR/debootstrap.log)"
    fi

    log "cleaning apt caches and logs in the rootfs"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb \
        "$rootfs"/var/cache/apt/archives/partial/* \
        "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/lib/apt/lists/* \
        "$rootfs"/var/log/apt/* \
        "$rootfs"/var/cache/debconf/*-old \
        "$rootfs"/tmp/* "$rootfs"/var/tmp/*
    mkdir -p "$rootfs/var/lib/apt/lists/partial"
    : >"$rootfs/var/log/dpkg.log"
    : >"$rootfs/var/log/alternatives.log"
    # Same apt hygiene as the official Debian images: never keep .debs.
    cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    # Slim it like the official debian:*-slim images: no docs (but keep the
    # copyright files), man pages, info pages or translations, now and for any
    # package installed later.
    slim_rootfs "$rootfs"

    # debootstrap copies the host's resolv.conf/hostname; docker provides both.
    : >"$rootfs/etc/hostname"
    : >"$rootfs/etc/resolv.conf"

    OLD_BASE_ID="$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null || true)"
    log "importing rootfs as $BASE_IMAGE"
    tar --numeric-owner --xattrs -C "$rootfs" -c . |
        docker import \
            --change 'ENV LANG=C.UTF-8' \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'CMD ["/bin/bash"]' \
            --message "debootstrap --variant=minbase --include=$BASE_PACKAGES $DEBIAN_SUITE" \
            - "$BASE_IMAGE" >/dev/null

    rm -rf --one-file-system "$rootfs"
    CLEANUP_ROOTFS=""
    log "base image $BASE_IMAGE built in $((SECONDS - start))s"
}

# --- 2. host wheelhouse ------------------------------------------------------
wheelhouse_key() {
    {
        cat "$REQUIREMENTS"
        printf 'python-version=%s platform=%s\n' "$WHEEL_PY_VERSION" "$WHEEL_PLATFORM"
    } | sha256_of_stdin
}

ensure_wheelhouse() {
    local key tmp
    key="$(wheelhouse_key)"
    if [[ -f $WHEEL_STAMP && "$(cat "$WHEEL_STAMP")" == "$key" ]] &&
        compgen -G "$WHEEL_DIR/*.whl" >/dev/null; then
        log "wheelhouse $WHEEL_DIR is up to date"
        return 0
    fi

    log "downloading wheels for $REQUIREMENTS into $WHEEL_DIR (python $WHEEL_PY_VERSION, $WHEEL_PLATFORM)"
    mkdir -p "$(dirname "$WHEEL_DIR")"
    tmp="$WHEEL_DIR.tmp.$$"
    rm -rf "$tmp"
    CLEANUP_DIRS+=("$tmp")
    local pip_log="$STATE_DIR/pip-download-test-image.log"
    if ! python3 -m pip download --disable-pip-version-check \
        --dest "$tmp" \
        --python-version "$WHEEL_PY_VERSION" --platform "$WHEEL_PLATFORM" \
        --implementation cp --only-binary=:all: \
        -r "$REQUIREMENTS" >"$pip_log" 2>&1; then
        grep -v 'is ignored: it is neither a file nor a directory' "$pip_log" | tail -n 15 >&2 || true
        # Some dependency has no binary wheel: build the missing ones on the
        # host. Only valid when the host interpreter matches the image's
        # (CPython 3.11 on x86_64 Linux).
        python3 -c 'import sys, platform; sys.exit(not (sys.version_info[:2] == (3, 11) and platform.machine() == "x86_64"))' ||
            die "pip download failed and the host python cannot build compatible wheels (need CPython 3.11 x86_64)"
        log "binary-only download failed; building the missing wheels on the host with pip wheel"
        rm -rf "$tmp"
        if ! python3 -m pip wheel --disable-pip-version-check \
            --wheel-dir "$tmp" -r "$REQUIREMENTS" >>"$pip_log" 2>&1; then
            tail -n 30 "$pip_log" >&2 || true
            die "pip wheel failed for $REQUIREMENTS (full log: $pip_log)"
        fi
    fi
    printf '%s\n' "$key" >"$tmp/.requirements.sha256"
    rm -rf "$WHEEL_DIR"
    mv "$tmp" "$WHEEL_DIR"
    log "wheelhouse ready: $(find "$WHEEL_DIR" -name '*.whl' | wc -l) wheels, $(du -sh "$WHEEL_DIR" | cut -f1)"
}

# --- 3. test single-user image -----------------------------------------------
recipe_hash() {
    {
        # every file of the recipe (Dockerfile, requirements.txt, ...)
        (cd "$IMAGE_DIR" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
        # the exact wheel set that gets installed
        find "$WHEEL_DIR" -maxdepth 1 -name '*.whl' -printf '%f\n' | LC_ALL=C sort
        # the base image it is built on
        docker image inspect --format '{{.Id}}' "$BASE_IMAGE"
    } | sha256_of_stdin
}

build_test_image() {
    local hash current start
    hash="$(recipe_hash)"
    if [[ ${FORCE:-0} != 1 ]] && image_exists "$TEST_IMAGE"; then
        current="$(docker image inspect --format "{{ index .Config.Labels \"$HASH_LABEL\" }}" "$TEST_IMAGE" 2>/dev/null || true)"
        if [[ $current == "$hash" ]]; then
            log "test image $TEST_IMAGE is up to date ($HASH_LABEL=${hash:0:12}); skipping build (FORCE=1 to rebuild)"
            return 0
        fi
        log "test image $TEST_IMAGE is out of date (recipe hash ${current:0:12} -> ${hash:0:12}); rebuilding"
    fi

    start=$SECONDS
    # Minimal build context: the recipe files plus the wheelhouse as wheels/.
    rm -rf "$CONTEXT_DIR"
    mkdir -p "$CONTEXT_DIR"
    CLEANUP_DIRS+=("$CONTEXT_DIR")
    cp -a "$IMAGE_DIR"/. "$CONTEXT_DIR"/
    cp -al "$WHEEL_DIR" "$CONTEXT_DIR/wheels" 2>/dev/null || cp -a "$WHEEL_DIR" "$CONTEXT_DIR/wheels"

    log "building $TEST_IMAGE from $IMAGE_DIR/Dockerfile"
    # Classic builder: no buildx/BuildKit needed, and --network host works
    # without entitlements (the daemon runs without a bridge network).
    if ! DOCKER_BUILDKIT=0 docker build \
        --network host \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" \
        --label "$HASH_LABEL=$hash" \
        --label "org.opencontainers.image.created=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        --tag "$TEST_IMAGE" \
        "$CONTEXT_DIR" >"$STATE_DIR/docker-build-test-image.log" 2>&1; then
        tail -n 40 "$STATE_DIR/docker-build-test-image.log" >&2 || true
        die "docker build failed (full log: $STATE_DIR/docker-build-test-image.log)"
    fi
    rm -rf "$CONTEXT_DIR"
    rmdir --ignore-fail-on-non-empty "$(dirname "$CONTEXT_DIR")"

    # Drop superseded copies of the test image and the builder-stage image
    # (which holds the wheels); both are untagged and labelled.
    docker image prune --force --filter "label=$HASH_LABEL" >/dev/null || true
    docker image prune --force --filter "label=jupyterhub-gpu.stage=builder" >/dev/null || true

    log "smoke test: jupyterhub-singleuser --version"
    docker run --rm --network host "$TEST_IMAGE" jupyterhub-singleuser --version >&2 ||
        die "smoke test of $TEST_IMAGE failed"
    log "test image $TEST_IMAGE built in $((SECONDS - start))s"
}

# A rebuilt base leaves the previous one untagged; once the test image has
# moved to the new base, remove it (docker refuses while anything uses it).
remove_old_base_image() {
    [[ -n $OLD_BASE_ID ]] || return 0
    [[ $OLD_BASE_ID != "$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE")" ]] || return 0
    if docker image rm "$OLD_BASE_ID" >/dev/null 2>&1; then
        log "removed the previous base image ${OLD_BASE_ID:7:12}"
    fi
}

OLD_BASE_ID=""
build_base_image
ensure_wheelhouse
build_test_image
remove_old_base_image
log "done: $BASE_IMAGE, $TEST_IMAGE ($(docker image inspect --format '{{.Size}}' "$TEST_IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
