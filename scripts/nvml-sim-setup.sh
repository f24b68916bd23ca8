#!/usr/bin/env bash
# The stand-in NVIDIA driver for a machine without a GPU (CI, a trial of a lab server): docs/admin.md
# "Trying it without a GPU", tools/nvml-sim/.
#
#   bash scripts/nvml-sim-setup.sh
#
# Builds libnvidia-ml.so.1 from tools/nvml-sim/nvml_sim.c into $NVML_SIM_ROOT/lib (default
# /var/lib/jupyterhub-gpu-sim), installs the stand-in container hook into $NVML_SIM_ROOT/bin (dockerd
# registers its nvidia device driver when that directory is on its PATH at start: scripts/docker-setup.sh)
# and, where there is none yet, writes a state of $NVML_SIM_GPUS (default T4x4: 4 Simulated T4;
# jupyterhub_gpu/gpus/standin.py).
# Idempotent: the library is rebuilt only when its source changed. Never on a machine with a real driver
# library in that root: the root is the stand-in's own.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
ROOT="${NVML_SIM_ROOT:-/var/lib/jupyterhub-gpu-sim}"
SRC=tools/nvml-sim/nvml_sim.c
log() { printf '[nvml-sim-setup] %s\n' "$*" >&2; }

if ! command -v gcc >/dev/null 2>&1; then
    log "installing gcc with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gcc libc6-dev ||
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gcc libc6-dev; }
fi
mkdir -p "$ROOT/lib" "$ROOT/bin" "$ROOT/state" "$ROOT/dev"
chmod 0755 "$ROOT" "$ROOT/lib" "$ROOT/bin" "$ROOT/state" "$ROOT/dev"
hash="$(sha256sum "$SRC" | cut -d' ' -f1)"
if [[ ! -f $ROOT/lib/.source-hash || $(cat "$ROOT/lib/.source-hash") != "$hash" || ! -f $ROOT/lib/libnvidia-ml.so.1 ]]; then
    log "building $ROOT/lib/libnvidia-ml.so.1"
    gcc -shared -fPIC -O2 -Wall -Wextra -Werror -Wl,-soname,libnvidia-ml.so.1 -o "$ROOT/lib/.libnvidia-ml.so.1.new" "$SRC" -lpthread
    mv -f "$ROOT/lib/.libnvidia-ml.so.1.new" "$ROOT/lib/libnvidia-ml.so.1"
    printf '%s' "$hash" >"$ROOT/lib/.source-hash"
fi
install -m 0755 tools/nvml-sim/nvidia-container-runtime-hook "$ROOT/bin/nvidia-container-runtime-hook"
PY="${PYTHON:-.venv/bin/python}"
if ! "$PY" -c "import jupyterhub_gpu.gpus.standin" 2>/dev/null; then
    log "ERROR: $PY cannot import jupyterhub_gpu (run 'make venv', or set PYTHON to a Python that has it)"
    exit 1
fi
"$PY" -m jupyterhub_gpu.gpus.standin --root "$ROOT" \
    --gpus "${NVML_SIM_GPUS:-T4x4}" $([[ ${NVML_SIM_KEEP:-1} == 1 ]] && echo --keep) >/dev/null
log "stand-in NVIDIA driver ready in $ROOT (state: $ROOT/state/nvml.state)"
