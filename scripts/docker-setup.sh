#!/usr/bin/env bash
# Make sure a working Docker daemon is available for the integration tests.
#
# Idempotent: safe to run any number of times.
#   * installs docker.io and debootstrap with apt when they are missing;
#   * if `docker info` already works (or a dockerd is already running), the
#     daemon is left alone;
#   * otherwise starts `dockerd --bridge=none --iptables=false` in the
#     background (detached, so it outlives this script) with its log in
#     ${STATE_DIR:-.state}/dockerd.log, and waits up to DOCKERD_WAIT_S
#     (default 60) seconds for it to answer.
#
# The daemon is started without a default bridge and without iptables, and the
# tests' containers use --network host, except the network isolation test
# (tests/docker/test_network_isolation.py): Docker enforces the isolated network
# (enable_icc=false, internal) with iptables rules, so that test starts a dockerd
# of its own, with iptables, on its own socket, data root and exec root, and
# leaves this one alone.
#
# The stand-in NVIDIA driver (scripts/nvml-sim-setup.sh) is set up first, and dockerd starts with its
# bin/ on PATH: dockerd then registers its nvidia device driver and runs the stand-in container hook for
# containers with GPU device requests, as on a lab server with the NVIDIA Container Toolkit. A running
# dockerd that was started without it (its PATH lacks that directory) is restarted, once, with it; set
# NVML_SIM=0 to leave the engine as it is (then GPU device requests fail: omit_device_requests).
#
# Environment:
#   STATE_DIR       where dockerd.log goes (default: .state, relative to repo)
#   DOCKERD_ARGS    arguments for dockerd (default: "--bridge=none --iptables=false")
#   DOCKERD_WAIT_S  seconds to wait for the daemon (default: 60)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

STATE_DIR="${STATE_DIR:-.state}"
DOCKERD_ARGS="${DOCKERD_ARGS:---bridge=none --iptables=false}"
DOCKERD_WAIT_S="${DOCKERD_WAIT_S:-60}"
DOCKERD_LOG="$STATE_DIR/dockerd.log"
NVML_SIM="${NVML_SIM:-1}"
NVML_SIM_ROOT="${NVML_SIM_ROOT:-/var/lib/jupyterhub-gpu-sim}"

log() { printf '[docker-setup] %s\n' "$*" >&2; }
die() { printf '[docker-setup] ERROR: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run: $*"
    fi
}

# --- 1. packages -------------------------------------------------------------
install_packages() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    # docker.io also ships the CLI; only ask for it separately if just the CLI is gone.
    if ! command -v docker >/dev/null 2>&1 && [[ ${#missing[@]} -eq 0 ]]; then
        missing+=(docker.io)
    fi
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    [[ ${#missing[@]} -eq 0 ]] && return 0

    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and apt-get is not available"
    log "installing ${missing[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    # Only refresh the package lists when apt does not know the packages yet.
    if ! as_root apt-get install -y -q --no-install-recommends "${missing[@]}"; then
        log "install failed; running apt-get update and retrying"
        as_root apt-get update -q
        as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
}

# --- 2. daemon ---------------------------------------------------------------
docker_ok() { docker info >/dev/null 2>&1; }

# the engine of the default socket: its pid file (a test's own dockerd, on a socket and pid file of its own,
# is not it)
main_dockerd_pid() {
    local pid
    pid="$(cat /var/run/docker.pid 2>/dev/null)" || return 1
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && printf '%s\n' "$pid"
}

dockerd_running() { main_dockerd_pid >/dev/null; }

show_log_tail() {
    if [[ -f $DOCKERD_LOG ]]; then
        log "last lines of $DOCKERD_LOG:"
        tail -n 30 "$DOCKERD_LOG" >&2 || true
    fi
}

start_dockerd() {
    local args
    read -r -a args <<<"$DOCKERD_ARGS"
    mkdir -p "$STATE_DIR"
    log "starting dockerd ${args[*]} (log: $DOCKERD_LOG)"
    {
        printf '\n==== %s: dockerd %s ====\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${args[*]}"
    } >>"$DOCKERD_LOG"
    # setsid + nohup: own session, ignores SIGHUP, so it survives this script
    # and the shell that ran it.
    local path="$PATH"
    [[ $NVML_SIM == 1 ]] && path="$NVML_SIM_ROOT/bin:$PATH"
    as_root env PATH="$path" setsid nohup dockerd "${args[@]}" >>"$DOCKERD_LOG" 2>&1 </dev/null &
    STARTED_PID=$!
    disown "$STARTED_PID" 2>/dev/null || true
}

wait_for_docker() {
    local waited=0
    while ! docker_ok; do
        if [[ -n ${STARTED_PID:-} ]] && ! kill -0 "$STARTED_PID" 2>/dev/null && ! dockerd_running; then
            show_log_tail
            die "dockerd exited during startup"
        fi
        if ((waited >= DOCKERD_WAIT_S)); then
            show_log_tail
            die "docker daemon did not answer 'docker info' within ${DOCKERD_WAIT_S}s"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    if ((waited > 0)); then
        log "docker daemon is up after ${waited}s"
    fi
}

# whether the running dockerd has the stand-in hook's directory on its PATH (it registered the nvidia driver)
dockerd_has_hook() {
    local pid
    pid="$(main_dockerd_pid)" || return 1
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -q "^PATH=\(.*:\)\?$NVML_SIM_ROOT/bin\(:\|$\)"
}

stop_dockerd() {
    local pid waited=0
    pid="$(main_dockerd_pid)" || return 0
    log "restarting dockerd (pid $pid) so that it registers the stand-in NVIDIA hook ($NVML_SIM_ROOT/bin)"
    as_root kill "$pid"
    while kill -0 "$pid" 2>/dev/null; do
        ((waited++ < 60)) || die "dockerd (pid $pid) did not stop within 60s"
        sleep 1
    done
}

main() {
    install_packages
    if [[ $NVML_SIM == 1 ]]; then
        NVML_SIM_ROOT="$NVML_SIM_ROOT" bash "$REPO_ROOT/scripts/nvml-sim-setup.sh"
        if dockerd_running && ! dockerd_has_hook; then
            stop_dockerd
        fi
    fi

    if docker_ok; then
        log "docker daemon already running; leaving it alone"
        return 0
    fi

    STARTED_PID=""
    if dockerd_running; then
        log "a dockerd process exists but does not answer yet; waiting for it"
    else
        start_dockerd
    fi
    wait_for_docker
    log "docker is ready ($(docker version --format 'server {{.Server.Version}}' 2>/dev/null || echo 'version unknown'))"
}

main "$@"
