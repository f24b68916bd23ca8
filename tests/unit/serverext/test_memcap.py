"""The GPU memory cap a kernel applies on a shared GPU (serverext/memcap.py): the environment, TensorFlow, PyTorch.

TensorFlow here is the CPU build (no GPU visible): the code path that limits it runs and reports 0 GPUs. It
is imported only in fresh interpreters, so that the hook is seen waiting for the import and no TensorFlow is
loaded into the test process. PyTorch is not installed in the venv (the "not installed" path is real); its
limiting path runs against a small stand-in ``torch`` package that records what PyTorch's CUDA API was asked
(PyTorch's own CUDA needs a GPU), written into a temporary folder by the test.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib
from traitlets.config.loader import PyFileConfigLoader

from jupyterhub_gpu import env as gpu_env
from jupyterhub_gpu.serverext import memcap

ROOT = Path(__file__).resolve().parents[3]
KERNEL_CONFIG = ROOT / "jupyter-config" / "ipython" / "ipython_kernel_config.py"

CAP = {gpu_env.MEMORY_LIMIT_MIB: "4096", gpu_env.SHARE: "1/4"}


@pytest.fixture(autouse=True)
def fresh():
    memcap.reset()
    yield
    memcap.reset()


def hooks() -> list:
    return [f for f in sys.meta_path if isinstance(f, memcap._AfterImport)]


def run_python(code: str, env: dict[str, str], extra_path: Path | None = None) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter with ``env`` added (no other jupyterhub-gpu variable), stderr kept apart."""
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith(gpu_env.PREFIX)}
    paths = [str(ROOT), *([str(extra_path)] if extra_path else []), base.get("PYTHONPATH", "")]
    full = {**base, **env, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full, timeout=240
    )


def our_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(memcap.PREFIX)]


# -- the environment ------------------------------------------------------------------------------------


def test_without_a_cap_nothing_is_set_or_logged(caplog):
    caplog.set_level(logging.INFO, logger="jupyterhub_gpu.memcap")
    assert memcap.apply({}) is None
    assert memcap.apply({gpu_env.MEMORY_LIMIT_MIB: "  ", gpu_env.SHARE: "1/4"}) is None
    assert memcap.state is None and hooks() == [] and caplog.records == []


@pytest.mark.parametrize("bad", ["abc", "0", "-512", "4096.5", "4 GiB", "1e3"])
def test_a_bad_cap_is_ignored_with_a_log_line_naming_it(caplog, bad):
    caplog.set_level(logging.INFO, logger="jupyterhub_gpu.memcap")
    assert memcap.apply({gpu_env.MEMORY_LIMIT_MIB: bad, gpu_env.SHARE: "1/4"}) is None
    assert memcap.state is None and hooks() == []
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"jupyterhub-gpu: ignoring the GPU memory cap {bad!r}: not a positive whole number of MiB; no limit is set"
    )


def test_the_unit_in_words():
    assert memcap.unit_text("1/4") == "share 1/4"
    assert memcap.unit_text("mig:1g.10gb") == "MIG 1g.10gb"
    assert memcap.unit_text("") == ""


class Exploding(dict):
    def get(self, key, default=None):
        raise OSError("the environment cannot be read")


def test_apply_never_raises(caplog):
    caplog.set_level(logging.INFO, logger="jupyterhub_gpu.memcap")
    assert memcap.apply(Exploding()) is None
    assert [r.getMessage() for r in caplog.records] == [
        "jupyterhub-gpu: could not apply the GPU memory cap: OSError: the environment cannot be read"
    ]


def test_a_cap_without_tensorflow_imported_waits_for_it_and_pytorch_is_not_installed(caplog):
    caplog.set_level(logging.INFO, logger="jupyterhub_gpu.memcap")
    assert "torch" not in sys.modules
    tensorflow_loaded = "tensorflow" in sys.modules  # another test of this process may have imported it
    state = memcap.apply({gpu_env.MEMORY_LIMIT_MIB: "4096", gpu_env.SHARE: "mig:1g.10gb"})
    assert state is memcap.state and state.cap_mib == 4096 and state.unit == "MIG 1g.10gb"
    assert state.torch == memcap.NOT_INSTALLED and state.torch_gpus is None
    if tensorflow_loaded:
        assert state.tensorflow_gpus == 0 and hooks() == []
    else:
        assert state.tensorflow == memcap.AT_IMPORT and [h.name for h in hooks()] == ["tensorflow"]
        assert caplog.records[-1].getMessage() == (
            "jupyterhub-gpu: GPU memory cap 4096 MiB (MIG 1g.10gb): TensorFlow to be limited at its import;"
            " PyTorch not installed"
        )
    # a second kernel-start call (the extension loaded twice) changes nothing
    assert memcap.apply({gpu_env.MEMORY_LIMIT_MIB: "4096", gpu_env.SHARE: "mig:1g.10gb"}) is state
    assert len(hooks()) == (0 if tensorflow_loaded else 1)
    # another cap (the environment changed) is the one applied, still with one hook
    other = memcap.apply({gpu_env.MEMORY_LIMIT_MIB: "2048", gpu_env.SHARE: "1/8"})
    assert other is memcap.state and other.cap_mib == 2048 and other.unit == "share 1/8"
    assert len(hooks()) == (0 if tensorflow_loaded else 1)
    memcap.reset()
    assert hooks() == [] and memcap.state is None


# -- TensorFlow (the CPU build: no GPU visible) -------------------------------------------------------------

TENSORFLOW_PROBE = """
import json, sys
from jupyterhub_gpu.serverext import memcap
state = memcap.apply()
waiting = state.tensorflow
assert "tensorflow" not in sys.modules  # nothing imported at kernel start
import tensorflow as tf
print(json.dumps({
    "waiting": waiting, "tensorflow": state.tensorflow, "gpus": state.tensorflow_gpus, "lines": state.lines,
    "loader_kept": type(tf.__loader__).__name__ == type(tf.__spec__.loader).__name__ == "SourceFileLoader",
    "hooks_left": [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "_AfterImport"],
    "logical": len(tf.config.list_logical_devices("GPU")),
    "works": float(tf.reduce_sum(tf.constant([1.0, 2.0]))),
}))
"""


def test_tensorflow_is_limited_when_the_notebook_imports_it():
    r = run_python(TENSORFLOW_PROBE, CAP)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["waiting"] == memcap.AT_IMPORT
    assert out["tensorflow"] == "TensorFlow logical device limit set on 0 GPUs (no GPU visible)"
    assert out["gpus"] == 0 and out["logical"] == 0 and out["works"] == 3.0
    assert out["loader_kept"] and out["hooks_left"] == []
    expected = [
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): TensorFlow to be limited at its import;"
        " PyTorch not installed",
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): TensorFlow logical device limit set on 0 GPUs"
        " (no GPU visible)",
    ]
    assert out["lines"] == expected
    assert our_lines(r.stderr) == expected  # logged on the process's stderr (a kernel's: the server's log)


def test_a_changed_cap_before_the_import_is_the_one_tensorflow_gets():
    r = run_python(
        f"""
        import json, sys
        from jupyterhub_gpu.serverext import memcap
        memcap.apply({{{gpu_env.MEMORY_LIMIT_MIB!r}: "2048", {gpu_env.SHARE!r}: "1/8"}})
        state = memcap.apply()
        import tensorflow
        print(json.dumps({{"cap": state.cap_mib, "tensorflow": state.tensorflow, "gpus": state.tensorflow_gpus}}))
        """,
        CAP,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {
        "cap": 4096,
        "tensorflow": "TensorFlow logical device limit set on 0 GPUs (no GPU visible)",
        "gpus": 0,
    }
    assert our_lines(r.stderr)[-1] == (
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): TensorFlow logical device limit set on 0 GPUs"
        " (no GPU visible)"
    )


def test_tensorflow_imported_before_the_cap_is_limited_at_once():
    r = run_python(
        """
        import json, sys
        import tensorflow as tf
        from jupyterhub_gpu.serverext import memcap
        state = memcap.apply()
        print(json.dumps({"tensorflow": state.tensorflow, "gpus": state.tensorflow_gpus,
                          "hooks": [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "_AfterImport"]}))
        """,
        CAP,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {
        "tensorflow": "TensorFlow logical device limit set on 0 GPUs (no GPU visible)",
        "gpus": 0,
        "hooks": [],
    }
    assert our_lines(r.stderr) == [
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): TensorFlow logical device limit set on 0 GPUs"
        " (no GPU visible)",
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): PyTorch not installed",
    ]


def test_tensorflow_on_a_gpu_gets_a_logical_device_of_the_cap_and_memory_growth():
    # one GPU as TensorFlow would list it on a GPU machine (here the CPU device stands in for it), and what
    # TensorFlow's set_logical_device_configuration is asked, recorded
    r = run_python(
        """
        import json, os
        import tensorflow as tf
        from jupyterhub_gpu.serverext import memcap
        (gpu,) = tf.config.list_physical_devices("CPU")
        asked = []
        tf.config.list_physical_devices = lambda kind=None: [gpu]
        tf.config.set_logical_device_configuration = lambda d, c: asked.append([d.name, [v.memory_limit for v in c]])
        state = memcap.apply()
        print(json.dumps({"tensorflow": state.tensorflow, "gpus": state.tensorflow_gpus, "asked": asked,
                          "growth": os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")}))
        """,
        CAP,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {
        "tensorflow": "TensorFlow logical device limit 4096 MiB set on 1 GPU (memory growth on)",
        "gpus": 1,
        "asked": [["/physical_device:CPU:0", [4096]]],
        "growth": "true",
    }
    # a user's own TF_FORCE_GPU_ALLOW_GROWTH stays
    r = run_python(
        """
        import json, os
        import tensorflow as tf
        from jupyterhub_gpu.serverext import memcap
        (gpu,) = tf.config.list_physical_devices("CPU")
        tf.config.list_physical_devices = lambda kind=None: [gpu]
        tf.config.set_logical_device_configuration = lambda d, c: None
        print(json.dumps({"tensorflow": memcap.apply().tensorflow, "growth": os.environ["TF_FORCE_GPU_ALLOW_GROWTH"]}))
        """,
        {**CAP, "TF_FORCE_GPU_ALLOW_GROWTH": "false"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {
        "tensorflow": "TensorFlow logical device limit 4096 MiB set on 1 GPU"
        " (memory growth off: TF_FORCE_GPU_ALLOW_GROWTH is set)",
        "growth": "false",
    }


def test_a_tensorflow_that_cannot_be_limited_is_logged_and_the_kernel_goes_on():
    # what TensorFlow answers on a GPU machine when its runtime started before the cap (no GPU here: the
    # CPU build lists none, so the GPU list and the refusal stand in for the driver's)
    r = run_python(
        """
        import json
        import tensorflow as tf
        from jupyterhub_gpu.serverext import memcap
        (cpu,) = tf.config.list_physical_devices("CPU")
        def refuse(*args, **kwargs):
            raise RuntimeError("Virtual devices cannot be modified after being initialized")
        tf.config.list_physical_devices = lambda kind=None: [cpu]
        tf.config.set_logical_device_configuration = refuse
        state = memcap.apply()
        print(json.dumps({"tensorflow": state.tensorflow, "works": float(tf.constant(2.0) * 2)}))
        """,
        CAP,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"tensorflow": "failed: Virtual devices cannot be modified after being initialized", "works": 4.0}
    assert our_lines(r.stderr)[0] == (
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): could not limit TensorFlow: RuntimeError:"
        " Virtual devices cannot be modified after being initialized"
    )


# -- PyTorch: a stand-in package recording what torch.cuda was asked -----------------------------------------

TORCH_STANDIN = '''
"""A stand-in for PyTorch's CUDA API (tests only): one 16 GiB GPU, lazy CUDA start as in torch.cuda."""
calls = []
_queued = []
_initialized = False
FAIL = False

class _Props:
    total_memory = 16384 * 1024 * 1024

def is_initialized():
    return _initialized

def is_available():
    return True

def _lazy_call(fn):
    if _initialized:
        fn()
    else:
        _queued.append(fn)

def _lazy_init():  # what torch.cuda does at the first CUDA operation
    global _initialized
    for fn in _queued:
        fn()
    _initialized = True

def device_count():
    return 1

def get_device_properties(device):
    if FAIL:
        raise RuntimeError("CUDA driver initialization failed")
    return _Props()

def set_per_process_memory_fraction(fraction, device):
    calls.append((fraction, device))
'''


@pytest.fixture
def torch_standin(tmp_path):
    package = tmp_path / "standin" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from torch import cuda\n")
    (package / "cuda.py").write_text(TORCH_STANDIN)
    return tmp_path / "standin"


def test_pytorch_gets_the_memory_fraction_when_it_starts_cuda(torch_standin):
    r = run_python(
        """
        import json
        from jupyterhub_gpu.serverext import memcap
        state = memcap.apply()
        waiting = state.torch
        import torch
        arranged, calls_at_import = state.torch, list(torch.cuda.calls)
        torch.cuda._lazy_init()
        print(json.dumps({"waiting": waiting, "arranged": arranged, "at_import": calls_at_import,
                          "calls": torch.cuda.calls, "torch": state.torch, "gpus": state.torch_gpus}))
        """,
        {gpu_env.MEMORY_LIMIT_MIB: "4096", gpu_env.SHARE: "1/4"},
        extra_path=torch_standin,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["waiting"] == memcap.AT_IMPORT
    assert out["arranged"] == "PyTorch will be limited when it starts CUDA" and out["at_import"] == []
    assert out["calls"] == [[0.25, 0]]  # 4096 of 16384 MiB on device 0
    assert out["torch"] == "PyTorch memory fraction set for 4096 MiB on 1 GPU" and out["gpus"] == 1
    assert our_lines(r.stderr)[-2:] == [
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): PyTorch will be limited when it starts CUDA",
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): PyTorch memory fraction set for 4096 MiB on 1 GPU",
    ]


def test_a_pytorch_failure_at_cuda_start_is_logged_not_raised_into_the_notebook(torch_standin):
    r = run_python(
        """
        import json
        from jupyterhub_gpu.serverext import memcap
        state = memcap.apply()
        import torch
        torch.cuda.FAIL = True
        torch.cuda._lazy_init()  # PyTorch would raise a queued call's error from the first CUDA operation
        print(json.dumps({"torch": state.torch, "calls": torch.cuda.calls}))
        """,
        CAP,
        extra_path=torch_standin,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"torch": "could not limit PyTorch: RuntimeError: CUDA driver initialization failed", "calls": []}
    assert our_lines(r.stderr)[-1] == (
        "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): could not limit PyTorch: RuntimeError:"
        " CUDA driver initialization failed"
    )


# -- the kernel config the wheel installs ----------------------------------------------------------------------


def test_the_wheel_installs_the_kernel_config_that_loads_the_cap():
    shared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"][
        "shared-data"
    ]
    assert shared["jupyter-config/ipython/ipython_kernel_config.py"] == "etc/ipython/ipython_kernel_config.py"

    def extensions(before: list[str]) -> list[str]:
        config = PyFileConfigLoader(KERNEL_CONFIG.name, str(KERNEL_CONFIG.parent)).load_config()
        return config.IPKernelApp.extensions.get_value(before)

    assert extensions([]) == ["jupyterhub_gpu.serverext.memcap"]
    # appended, so that the extensions other configuration files list stay
    assert extensions(["other"]) == ["other", "jupyterhub_gpu.serverext.memcap"]
    assert callable(memcap.load_ipython_extension)
