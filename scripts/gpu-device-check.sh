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
# the stand-in driver (tools/nvml-sim) against the real one: the same pynvml calls, their types, units and
# error codes (built here where gcc exists; else carried prebuilt in .cache/nvml-sim/lib)
SIM="$OUT/nvml-sim"
mkdir -p "$SIM/lib" "$SIM/state" "$SIM/dev"
if command -v gcc >/dev/null; then
  gcc -shared -fPIC -O2 -Wl,-soname,libnvidia-ml.so.1 -o "$SIM/lib/libnvidia-ml.so.1" tools/nvml-sim/nvml_sim.c -lpthread
elif [[ -f .cache/nvml-sim/lib/libnvidia-ml.so.1 ]]; then
  cp .cache/nvml-sim/lib/libnvidia-ml.so.1 "$SIM/lib/"
fi
if [[ -f $SIM/lib/libnvidia-ml.so.1 ]]; then
  printf 'driver version=550.54.15\ngpu index=0 uuid=GPU-5e0b1c2d-0000-4000-8000-000000000001 minor=0 total_mib=143771 util=50 used_mib=4096 mig=off name=Simulated H200\n' >"$SIM/state/nvml.state"
  : >"$SIM/dev/nvidia0"
  python3 tools/nvml-sim/compare.py probe >"$OUT/nvml-real.json"
  LD_LIBRARY_PATH="$SIM/lib" JUPYTERHUB_GPU_NVML_STATE="$SIM/state/nvml.state" JUPYTERHUB_GPU_NVML_DEV_DIR="$SIM/dev" \
    python3 tools/nvml-sim/compare.py probe >"$OUT/nvml-standin.json"
  python3 tools/nvml-sim/compare.py diff "$OUT/nvml-real.json" "$OUT/nvml-standin.json" | tee "$OUT/nvml-compare.txt"
else
  echo "no gcc and no prebuilt stand-in: the stand-in was not compared with the real driver" | tee "$OUT/nvml-compare.txt"
fi
PYTHONUNBUFFERED=1 python3 -m pytest -q -s -rs --noconftest -p no:cacheprovider -m gpu tests/gpu \
  -o asyncio_mode=strict 2>&1 | tee "$OUT/gpu-tests.log"
exit "${PIPESTATUS[0]}"
