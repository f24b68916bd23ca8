#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU: the NVML inventory, the sampler and the
# server extension's stats API against the real device (tests/gpu/), and shares of
# one GPU (tests/gpu/test_nvml_shares_real.py: two "servers" holding different amounts
# of memory through libcuda's cuMemAlloc, each read with NVMLReader by its own process
# tree; it needs only nvidia-ml-py and the driver).
#
# Run it on a GPU machine that has python3 with nvidia-ml-py and PyTorch (for the load)
# and, for the stats API, jupyter_server: where nothing can be fetched, carry
# jupyter_server's wheels in .whl/ (see docs/admin.md, "Checking a GPU host").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-check}"
mkdir -p "$OUT"
{
  nvidia-smi
  nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv
} 2>&1 | tee "$OUT/nvidia-smi.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c "import pynvml; print('nvidia-ml-py', pynvml.__version__ if hasattr(pynvml, '__version__') else '?')"
# the PID namespace decides how shares are attributed (docs/user.md "If your profile is a share of a GPU")
echo "pid namespace: $(readlink /proc/self/ns/pid) (the host's is pid:[4026531836])" | tee -a "$OUT/nvidia-smi.txt"
PYTHONUNBUFFERED=1 python3 -m pytest -q -s -rs --noconftest -p no:cacheprovider -m gpu tests/gpu \
  -o asyncio_mode=strict 2>&1 | tee "$OUT/gpu-tests.log"
exit "${PIPESTATUS[0]}"
