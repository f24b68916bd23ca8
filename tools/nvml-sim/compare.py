"""Compare the stand-in NVIDIA driver with a real one: the same pynvml calls, their types, units and error codes.

    python3 tools/nvml-sim/compare.py probe > real.json           # with the real libnvidia-ml (a GPU machine)
    LD_LIBRARY_PATH=ROOT/lib JUPYTERHUB_GPU_NVML_STATE=... JUPYTERHUB_GPU_NVML_DEV_DIR=... \\
        python3 tools/nvml-sim/compare.py probe > standin.json     # with the stand-in
    python3 tools/nvml-sim/compare.py diff real.json standin.json  # exit 1 where they differ

``probe`` makes each call the project makes (jupyterhub_gpu/gpus/nvml.py) on GPU 0, and the error cases
(an index past the last GPU, an unknown UUID, a buffer too small), and writes for each what came back: the
Python type, the value's unit class (bytes, small numbers such as percentages and degrees, large ones such
as milliwatts) or NVML's error code. Values themselves differ between machines and are not compared. Needs
only nvidia-ml-py (scripts/gpu-device-check.sh runs it).
"""

from __future__ import annotations

import ctypes
import json
import sys


def unit(value) -> str:
    """The unit class of a number: what a caller would mistake if the stand-in got it wrong."""
    if isinstance(value, bytes | str):
        return "text"
    if not isinstance(value, int):
        return type(value).__name__
    if value >= 1 << 30:
        return "bytes"  # memory sizes: NVML reports bytes, never MiB
    if value <= 100:
        return "small"  # percentages, degrees, indices, counts
    return "large"  # milliwatts, PIDs, timestamps


def outcome(fn, *args) -> dict:
    import pynvml

    try:
        value = fn(*args)
    except pynvml.NVMLError as e:
        return {"error": e.value}
    if isinstance(value, list):
        return {"type": "list"}  # how many processes run differs between machines
    fields = getattr(value, "_fields_", None)
    if fields:
        return {"type": type(value).__name__, "fields": {name: unit(getattr(value, name)) for name, _ in fields}}
    if hasattr(value, "value") and not isinstance(value, bytes | str | int):
        value = value.value
    return {"type": type(value).__name__, "unit": unit(value)}


def probe() -> dict:
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        count = pynvml.nvmlDeviceGetCount()
        small = ctypes.create_string_buffer(2)
        return {
            "count": outcome(pynvml.nvmlDeviceGetCount),
            "driver_version": outcome(pynvml.nvmlSystemGetDriverVersion),
            "name": outcome(pynvml.nvmlDeviceGetName, h),
            "uuid": outcome(pynvml.nvmlDeviceGetUUID, h),
            "memory": outcome(pynvml.nvmlDeviceGetMemoryInfo, h),
            "utilization": outcome(pynvml.nvmlDeviceGetUtilizationRates, h),
            "temperature": outcome(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
            "power": outcome(pynvml.nvmlDeviceGetPowerUsage, h),
            "processes": outcome(pynvml.nvmlDeviceGetComputeRunningProcesses, h),
            "index_past_the_last": outcome(pynvml.nvmlDeviceGetHandleByIndex, count),
            "unknown_uuid": outcome(pynvml.nvmlDeviceGetHandleByUUID, b"GPU-00000000-0000-0000-0000-000000000000"),
            "name_buffer_too_small": {"error": pynvml.nvmlLib.nvmlDeviceGetName(h, small, ctypes.c_uint(2))},
        }
    finally:
        pynvml.nvmlShutdown()


def diff(real: dict, standin: dict) -> list[str]:
    return [
        f"{key}: real {real.get(key)!r}, stand-in {standin.get(key)!r}"
        for key in sorted(set(real) | set(standin))
        if real.get(key) != standin.get(key)
    ]


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"]:
        json.dump(probe(), sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    if argv[:1] == ["diff"] and len(argv) == 3:
        with open(argv[1]) as a, open(argv[2]) as b:
            found = diff(json.load(a), json.load(b))
        for line in found:
            print(line)
        print(f"{len(found)} difference(s) between the real driver and the stand-in")
        return 1 if found else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
