"""The GPU memory cap of a shared GPU or a MIG slice, applied inside each kernel.

A server on a time-sliced share of a GPU sees the whole physical GPU: nothing in hardware stops one
notebook from taking all of its memory and failing its neighbours' kernels. The spawner writes the
share's cap in MiB into the server's environment (:func:`jupyterhub_gpu.env.memory_limit_from_env`;
for a MIG slice its own memory, which the hardware enforces anyway) and every IPython kernel of the
server runs :func:`apply` when it starts: ``jupyter-config/ipython/ipython_kernel_config.py``, which
the wheel installs as ``<sys.prefix>/etc/ipython/ipython_kernel_config.py``, loads this module as an
IPython extension.

:func:`apply` configures the frameworks the notebook uses, each only if it is installed, and lazily:
importing TensorFlow takes seconds and memory, so nothing is imported at kernel start. An import hook
(a :data:`sys.meta_path` finder) waits for the notebook's own ``import tensorflow`` (or ``import
torch``) and configures the framework the moment its import finishes, before it has touched a GPU:

- TensorFlow: one logical device of ``memory_limit=cap`` MiB on each visible GPU
  (``tf.config.set_logical_device_configuration``), with memory growth (the share's memory is taken
  as it is used, not all at once) through ``TF_FORCE_GPU_ALLOW_GROWTH=true``: TensorFlow ignores
  ``set_memory_growth`` on a GPU with a logical device configuration, while its allocator reads that
  variable for every device, virtual ones too. A value the user set stays. Past the cap TensorFlow
  raises its own ``ResourceExhaustedError`` (out of memory).
- PyTorch: ``torch.cuda.set_per_process_memory_fraction(cap / total, device)`` on each visible GPU,
  queued to run when PyTorch starts CUDA (``torch.cuda._lazy_call``), so that an ``import torch``
  alone does not create a CUDA context. Past the cap PyTorch raises ``torch.cuda.OutOfMemoryError``.

Each step writes one line to the kernel's own stderr (the server's log, not the notebook), e.g.
``jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): TensorFlow logical device limit set on 0 GPUs
(no GPU visible)``; :data:`state` keeps what was done, for a look from the notebook. Nothing here ever
raises into the kernel: a failure is logged and the kernel goes on without the cap.

The cap is advisory for everything else (JAX, CuPy, a plain CUDA program): docs/images.md says how
each of those is capped by hand. Inside the user's server: imports only the pure core.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from jupyterhub_gpu import env as gpu_env

log = logging.getLogger("jupyterhub_gpu.memcap")
log.setLevel(logging.INFO)

PREFIX = "jupyterhub-gpu: "
#: A framework's state before it is configured.
NOT_INSTALLED = "not installed"
AT_IMPORT = "to be limited at its import"
#: TensorFlow's own switch that makes its GPU allocators grow (virtual devices too); read at its runtime's start.
TF_ALLOW_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"


@dataclass
class CapState:
    """What :func:`apply` found and did in this process."""

    #: the cap in MiB
    cap_mib: int
    #: "share 1/4", "MIG 1g.10gb", or "" (a cap without a share text)
    unit: str
    #: what was done for each framework: :data:`NOT_INSTALLED`, :data:`AT_IMPORT`, or the result
    tensorflow: str = ""
    torch: str = ""
    #: how many GPUs each framework was limited on (None: not configured yet)
    tensorflow_gpus: int | None = None
    torch_gpus: int | None = None
    #: every line logged, in order
    lines: list[str] = field(default_factory=list)


#: What :func:`apply` did in this process (None: no cap, or not applied).
state: CapState | None = None
_lock = threading.Lock()
_hooks: list[_AfterImport] = []


def unit_text(share: str) -> str:
    """The unit of :func:`jupyterhub_gpu.env.share_from_env` in words: "share 1/4", "MIG 1g.10gb", or ""."""
    share = share.strip()
    if share.startswith("mig:"):
        return f"MIG {share[4:]}"
    return f"share {share}" if share else ""


def _stream():
    """The kernel process's real stderr: the server's log, never the notebook's output.

    ipykernel points fd 2 at a pipe whose output it forwards to the notebook as well; its own log
    writes to the copy of the original fd 2 that it keeps, and so does this one.
    """
    fd = getattr(sys.stderr, "_original_stdstream_copy", None)
    if isinstance(fd, int):
        try:
            return os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace")
        except OSError:
            pass
    return sys.__stderr__ or sys.stderr


def _ensure_handler() -> None:
    """A handler of our own where nothing is configured (a kernel); else (tests, an app) the root's."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(_stream())
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False


def _say(current: CapState | None, text: str, level: int = logging.INFO) -> str:
    line = PREFIX + text
    if current is not None:
        current.lines.append(line)
    try:
        log.log(level, "%s", line)
    except Exception:  # a closed stream must not break the kernel
        pass
    return line


def _head(current: CapState) -> str:
    unit = f" ({current.unit})" if current.unit else ""
    return f"GPU memory cap {current.cap_mib} MiB{unit}"


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


# -- TensorFlow ---------------------------------------------------------------------------------------


def configure_tensorflow(tf, cap_mib: int) -> tuple[int, str]:
    """Limit TensorFlow to ``cap_mib`` on each visible GPU; ``(GPUs limited, what was set)``.

    Before TensorFlow's runtime starts (it reads the configuration and the variable then). Raises what
    TensorFlow raises (its runtime already running: ``RuntimeError``).
    """
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return 0, "TensorFlow logical device limit set on 0 GPUs (no GPU visible)"
    for gpu in gpus:
        tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=cap_mib)])
    growth = os.environ.setdefault(TF_ALLOW_GROWTH, "true").strip().lower() == "true"
    how = "memory growth on" if growth else f"memory growth off: {TF_ALLOW_GROWTH} is set"
    return len(gpus), f"TensorFlow logical device limit {cap_mib} MiB set on {_gpus(len(gpus))} ({how})"


def _tensorflow_imported(module) -> None:
    current = state
    if current is None:
        return
    try:
        n, text = configure_tensorflow(module, current.cap_mib)
        current.tensorflow, current.tensorflow_gpus = text, n
        _say(current, f"{_head(current)}: {text}")
    except Exception as e:
        current.tensorflow = f"failed: {e}"
        _say(current, f"{_head(current)}: could not limit TensorFlow: {type(e).__name__}: {e}", logging.WARNING)


# -- PyTorch -------------------------------------------------------------------------------------------


def configure_torch(torch, cap_mib: int, on_done: Callable[[int, str], None]) -> str:
    """Limit PyTorch to ``cap_mib`` on each visible GPU when it starts CUDA; what was arranged.

    ``on_done(GPUs limited, text)`` is called once the fraction is set (at once when CUDA already runs).
    A failure inside the queued call is logged, never raised: PyTorch would raise it from the notebook's
    first CUDA operation.
    """
    cuda = torch.cuda

    def limit() -> None:
        try:
            n = cuda.device_count()
            for device in range(n):
                total = cuda.get_device_properties(device).total_memory / (1024 * 1024)
                cuda.set_per_process_memory_fraction(min(1.0, cap_mib / total), device)
            on_done(n, f"PyTorch memory fraction set for {cap_mib} MiB on {_gpus(n)}")
        except Exception as e:
            on_done(0, f"could not limit PyTorch: {type(e).__name__}: {e}")

    lazy_call = getattr(cuda, "_lazy_call", None)
    if callable(lazy_call) and not cuda.is_initialized():
        lazy_call(limit)
        return "PyTorch will be limited when it starts CUDA"
    if not cuda.is_available():
        on_done(0, "PyTorch memory fraction set on 0 GPUs (no GPU visible)")
        return "PyTorch: no GPU visible"
    limit()
    return "PyTorch limited"


def _torch_imported(module) -> None:
    current = state
    if current is None:
        return

    def done(n: int, text: str) -> None:
        current.torch, current.torch_gpus = text, n
        failed = text.startswith("could not")
        _say(current, f"{_head(current)}: {text}", logging.WARNING if failed else logging.INFO)

    try:
        arranged = configure_torch(module, current.cap_mib, done)
        if current.torch_gpus is None:
            current.torch = arranged
            _say(current, f"{_head(current)}: {arranged}")
    except Exception as e:
        current.torch = f"failed: {e}"
        _say(current, f"{_head(current)}: could not limit PyTorch: {type(e).__name__}: {e}", logging.WARNING)


# -- the import hook -----------------------------------------------------------------------------------


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``after(module)`` once the top-level module ``name`` has been imported, then leaves.

    It finds the module's spec with the other finders and wraps its loader; the module keeps its own
    loader (``__loader__``, ``__spec__.loader``), so nothing of the framework sees the hook.
    """

    def __init__(self, name: str, after: Callable[[object], None]):
        self.name = name
        self.after = after

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        for finder in list(sys.meta_path):
            if isinstance(finder, _AfterImport) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        self.remove()
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # a namespace package or a legacy loader: nothing to configure at import
        spec.loader = _AfterLoader(spec.loader, self.after)
        return spec

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        if self in _hooks:
            _hooks.remove(self)


class _AfterLoader(importlib.abc.Loader):
    def __init__(self, loader, after):
        self.loader = loader
        self.after = after

    def create_module(self, spec):
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create else None

    def exec_module(self, module):
        module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        try:
            self.after(module)
        except Exception:  # the callbacks log their own failures; this is the last guard
            pass


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _watch(name: str, after: Callable[[object], None]) -> str | None:
    """Configure ``name`` now if it is imported already (None: ``after`` said what it did), else at its import.

    :data:`AT_IMPORT` when the hook waits for the import, :data:`NOT_INSTALLED` when there is nothing to import.
    """
    module = sys.modules.get(name)
    if module is not None:
        after(module)
        return None
    if not _installed(name):
        return NOT_INSTALLED
    if any(h.name == name for h in _hooks):
        return AT_IMPORT  # the callbacks read the current state: one hook a framework
    hook = _AfterImport(name, after)
    _hooks.append(hook)
    sys.meta_path.insert(0, hook)
    return AT_IMPORT


def apply(env: Mapping[str, str] = os.environ) -> CapState | None:
    """Apply this server's GPU memory cap in this process; what was done, or None (no cap). Never raises.

    Without a cap (a whole GPU, no GPU, a server not started by jupyterhub-gpu) nothing changes and
    nothing is logged; a value that is not a positive number of MiB is logged and ignored. A second call
    with the cap already applied changes nothing.
    """
    global state
    try:
        with _lock:
            raw = (env.get(gpu_env.MEMORY_LIMIT_MIB) or "").strip()
            if not raw:
                return None
            _ensure_handler()
            cap = gpu_env.memory_limit_from_env(env)
            if cap is None:
                _say(
                    None,
                    f"ignoring the GPU memory cap {raw!r}: not a positive whole number of MiB; no limit is set",
                    logging.WARNING,
                )
                return None
            if state is not None and state.cap_mib == cap:
                return state
            state = CapState(cap_mib=cap, unit=unit_text(gpu_env.share_from_env(env)))
            current = state
        pending = []
        for label, name, after in (
            ("TensorFlow", "tensorflow", _tensorflow_imported),
            ("PyTorch", "torch", _torch_imported),
        ):
            what = _watch(name, after)
            if what is not None:
                setattr(current, name, what)
                pending.append(f"{label} {what}")
        if pending:
            _say(current, f"{_head(current)}: " + "; ".join(pending))
        return current
    except Exception as e:
        try:
            _say(None, f"could not apply the GPU memory cap: {type(e).__name__}: {e}", logging.WARNING)
        except Exception:
            pass
        return None


def reset() -> None:
    """Forget what :func:`apply` did and remove its import hooks (tests; a configured framework stays so)."""
    global state
    with _lock:
        for hook in list(_hooks):
            hook.remove()
        state = None


# -- as an IPython extension (the kernel config loads it) ---------------------------------------------


def load_ipython_extension(ipython) -> None:
    """Apply the cap in the kernel that loads this extension (``c.IPKernelApp.extensions``)."""
    apply()
