"""A real IPython kernel applies the GPU memory cap of a shared GPU at its start (serverext/memcap.py).

The kernel is started by jupyter_client, as a server starts it, with the cap in its environment. IPython reads
the kernel config the wheel installs as ``<sys.prefix>/etc/ipython/ipython_kernel_config.py`` (the image's
build checks it is there); here the very same file is the kernel's profile config (``$IPYTHONDIR``), so the
test does not depend on how the venv was installed. The kernel's stderr (the server's log) goes to a file.
TensorFlow is the CPU build: once the notebook imports it, the limit is set on 0 GPUs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from jupyterhub_gpu import env as gpu_env
from jupyterhub_gpu.serverext.memcap import PREFIX

ROOT = Path(__file__).resolve().parents[2]
KERNEL_CONFIG = ROOT / "jupyter-config" / "ipython" / "ipython_kernel_config.py"

STATE = """
import json, sys
_m = sys.modules.get("jupyterhub_gpu.serverext.memcap")
_s = _m and _m.state
print(json.dumps({
    "loaded": "jupyterhub_gpu.serverext.memcap" in get_ipython().extension_manager.loaded,
    "tensorflow_imported": "tensorflow" in sys.modules,
    "state": _s and {"cap": _s.cap_mib, "unit": _s.unit, "tensorflow": _s.tensorflow,
                     "tensorflow_gpus": _s.tensorflow_gpus, "torch": _s.torch},
}))
"""


class Kernel:
    def __init__(self, tmp_path: Path, extra_env: dict[str, str]):
        ipython_dir = tmp_path / "ipython"
        (ipython_dir / "profile_default").mkdir(parents=True)
        shutil.copy(KERNEL_CONFIG, ipython_dir / "profile_default" / "ipython_kernel_config.py")
        env = {k: v for k, v in os.environ.items() if not k.startswith(gpu_env.PREFIX)}
        env.update(IPYTHONDIR=str(ipython_dir), TF_CPP_MIN_LOG_LEVEL="3", **extra_env)
        self.stderr_path = tmp_path / "kernel-stderr.log"
        self._stderr = open(self.stderr_path, "wb")
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env, stderr=self._stderr, cwd=str(tmp_path))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=90)

    def run(self, code: str, timeout: float = 180) -> tuple[str, str]:
        """``code`` in the kernel: its stdout and stderr as the notebook would show them."""
        out, err = [], []

        def hook(msg):
            if msg["msg_type"] == "stream":
                (out if msg["content"]["name"] == "stdout" else err).append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                err.append("\n".join(msg["content"]["traceback"]))

        reply = self.kc.execute_interactive(code, output_hook=hook, timeout=timeout)
        assert reply["content"]["status"] == "ok", "".join(err)
        return "".join(out), "".join(err)

    def state(self) -> dict:
        out, _ = self.run(STATE)
        return json.loads(out.strip().splitlines()[-1])

    def log_lines(self) -> list[str]:
        self._stderr.flush()
        text = self.stderr_path.read_text(errors="replace")
        return [line for line in text.splitlines() if line.startswith(PREFIX)]

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        self._stderr.close()


@pytest.fixture
def kernel(tmp_path):
    kernels = []

    def start(extra_env: dict[str, str]) -> Kernel:
        k = Kernel(tmp_path / f"k{len(kernels)}", extra_env)
        kernels.append(k)
        return k

    yield start
    for k in kernels:
        k.close()


def test_a_kernel_with_a_cap_applies_it_at_start_and_limits_tensorflow_at_its_import(kernel):
    k = kernel({gpu_env.MEMORY_LIMIT_MIB: "4096", gpu_env.SHARE: "1/4"})
    started = k.state()
    assert started == {
        "loaded": True,
        "tensorflow_imported": False,  # nothing imported at kernel start
        "state": {
            "cap": 4096,
            "unit": "share 1/4",
            "tensorflow": "to be limited at its import",
            "tensorflow_gpus": None,
            "torch": "not installed",
        },
    }
    at_start = (
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): TensorFlow to be limited at its import;"
        " PyTorch not installed"
    )
    assert k.log_lines() == [at_start]

    # the notebook imports TensorFlow: configured at that moment, and TensorFlow works
    out, err = k.run("import tensorflow as tf\nprint(float(tf.reduce_sum(tf.constant([1.0, 2.0]))))")
    assert out.strip() == "3.0"
    imported = k.state()
    assert imported["tensorflow_imported"] is True
    assert imported["state"]["tensorflow"] == "TensorFlow logical device limit set on 0 GPUs (no GPU visible)"
    assert imported["state"]["tensorflow_gpus"] == 0
    assert k.log_lines() == [
        at_start,
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): TensorFlow logical device limit set on 0 GPUs"
        " (no GPU visible)",
    ]
    # the lines are the server's log, not the notebook's output
    assert PREFIX not in out + err


def test_a_kernel_on_a_whole_gpu_sets_nothing(kernel):
    k = kernel({})
    assert k.state() == {"loaded": True, "tensorflow_imported": False, "state": None}
    assert k.log_lines() == []


def test_a_kernel_with_a_bad_cap_starts_and_logs_it(kernel):
    k = kernel({gpu_env.MEMORY_LIMIT_MIB: "a quarter"})
    assert k.state() == {"loaded": True, "tensorflow_imported": False, "state": None}
    assert k.log_lines() == [
        "jupyterhub-gpu: ignoring the GPU memory cap 'a quarter': not a positive whole number of MiB; no limit is set"
    ]
