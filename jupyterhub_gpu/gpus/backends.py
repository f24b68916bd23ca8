"""GPU backends: the reader protocol every backend's reader follows, and the registry of backends by name.

A backend is one way a lab has GPUs: ``nvml`` (the driver library lists and reads them), ``static`` (the
admin lists them; NVML reads them), ``simulated`` (the demo's and the tests' GPUs, always named
"Simulated ..."). Each is one :class:`GPUBackend` subclass in one module of this package, and defining the
class registers it under its :attr:`~GPUBackend.name`. Every side asks the registry by name, never with an
``if`` of its own:

- the hub's allocator lists a host's GPUs with :meth:`GPUBackend.inventory` (``gpu_backend`` and the option
  named by :attr:`~GPUBackend.option`);
- the spawner tells the server which reader to open (:attr:`~GPUBackend.reader`, in ``JUPYTERHUB_GPU_READER``)
  and asks its container engine for the GPUs with :meth:`GPUBackend.device_requests`;
- the server extension opens that reader with :meth:`GPUBackend.open_reader`;
- on Kubernetes, a pod asks the cluster's device plugin for the extended resource
  :meth:`GPUBackend.pod_resource` names (NVIDIA's by default), and no sidecar may ask for one of
  :attr:`~GPUBackend.resource_domains`;
- the doctor checks the inventory with :meth:`GPUBackend.inventory_fix`, :attr:`~GPUBackend.reads_mig_mode`
  and :attr:`~GPUBackend.host_check`; a :attr:`~GPUBackend.simulated` backend is reported as such.

The registry finds the backends of this package by importing its modules once, on the first look-up, so a
new backend is one new module here (docs/architecture.md, "Adding a GPU backend").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

from jupyterhub_gpu.gpus.device import GPUDevice, GPUReading, InventoryError
from jupyterhub_gpu.gpus.names import mig_request

#: NVIDIA's device plugin on Kubernetes, every backend's default there: a whole GPU, a MIG slice (the "mixed"
#: strategy: ``nvidia.com/mig-1g.10gb``), and the GPU Operator's time-sliced replica with
#: ``renameByDefault: true`` (the default of ``GPUKubeSpawner.gpu_shared_resource``).
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SHARED_RESOURCE = "nvidia.com/gpu.shared"


@runtime_checkable
class GPUReader(Protocol):
    """What the server's sampler reads: the server's units, a reading of each, and a close at the end."""

    #: the units this reader reads (whole GPUs, MIG slices, shares), as the spawner assigned them
    devices: list[GPUDevice]

    def read(self) -> list[GPUReading]:
        """One reading per unit: utilization, memory, processes (what the reader knows of them)."""
        ...

    def close(self) -> None:
        """Release what the reader holds (the driver library, a shared state file)."""
        ...


class UnknownBackend(InventoryError):
    """A backend name no module of ``jupyterhub_gpu.gpus`` registers."""


class GPUBackend:
    """One way of having GPUs. A subclass with a :attr:`name` registers itself (see the module's docstring)."""

    #: What ``gpu_backend`` says (lower case), and what the doctor's messages call it.
    name: ClassVar[str] = ""
    #: Whether its GPUs are simulated: every label the hub, the form, the Lab and the doctor show says so.
    simulated: ClassVar[bool] = False
    #: The spawner option that lists this backend's GPUs ("static_gpus"), or None where it finds them itself.
    option: ClassVar[str | None] = None
    #: The backend whose reader a server of this backend opens (``JUPYTERHUB_GPU_READER``); "" for its own.
    reader: ClassVar[str] = ""
    #: What a reader's failure to open is reported as in the Lab: "<label> is unavailable: ...".
    label: ClassVar[str] = ""
    #: The doctor: the backend reads each GPU's MIG mode, so no MIG instance listed means MIG is off everywhere.
    reads_mig_mode: ClassVar[bool] = False
    #: The doctor: the backend whose listing of this host the inventory is compared with (by UUID), or None.
    host_check: ClassVar[str | None] = None
    #: Kubernetes: the domains of the extended resources its device plugin advertises. A node's resources of
    #: them are counted as GPUs, and a pod's sidecars and init containers lose any they ask for.
    resource_domains: ClassVar[tuple[str, ...]] = ("nvidia.com/",)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name:
            register(cls)

    # -- the hub ---------------------------------------------------------------------------
    def inventory(self, spec: Any = None) -> list[GPUDevice]:
        """The GPUs of this host; ``spec`` is the value of :attr:`option` (None where it has none)."""
        raise InventoryError(f"the GPU backend {self.name!r} lists no GPUs on a host")

    def device_requests(self, device_ids: list[str]) -> list[dict]:
        """Docker ``DeviceRequests`` that give a container exactly these GPUs (``[]`` for none)."""
        return []

    # -- Kubernetes ------------------------------------------------------------------------
    def pod_resource(
        self, gpu_model: str, *, share: int | None = None, mig: str | None = None, shared_resource: str = ""
    ) -> tuple[str, str]:
        """``(extended resource, product words)`` one unit of a profile asks a pod's device plugin for; the words
        are what a node's product must match ("" for any node).

        NVIDIA's device plugin by default: a MIG profile (``mig: "1g.10gb"``) asks for ``nvidia.com/mig-1g.10gb``
        on nodes of ``gpu_model``'s product; a time-sliced share (``gpu_share: 4``) for one replica of
        ``shared_resource`` (``nvidia.com/gpu.shared`` when empty); a ``gpu_model`` that names a slice
        (``"A100 MIG 1g.10gb"``) for that slice; anything else for whole GPUs (``nvidia.com/gpu``).
        """
        if mig:
            # the GPU's words, without a "MIG" of its own ("A100 MIG" with mig "1g.10gb": A100 nodes)
            rest = [w for w in mig_request(gpu_model)[1].split() if w.casefold() != "mig"]
            return MIG_RESOURCE_PREFIX + mig, " ".join(rest)
        mig_slice, words = mig_request(gpu_model)
        if share:
            return shared_resource or SHARED_RESOURCE, words
        return (GPU_RESOURCE if mig_slice is None else MIG_RESOURCE_PREFIX + mig_slice), words

    # -- the server ------------------------------------------------------------------------
    def open_reader(self, devices: list[GPUDevice], activity: Callable[[], Any], env: Mapping[str, str]) -> GPUReader:
        """A reader of ``devices`` for a server; ``activity`` gives the server's kernel activity
        (:class:`~jupyterhub_gpu.gpus.simulated.KernelActivity`), ``env`` its environment."""
        raise InventoryError(f"the GPU backend {self.name!r} has no reader of its own")

    # -- the doctor ------------------------------------------------------------------------
    def inventory_fix(self, spawner_class: str) -> str:
        """What the doctor tells an admin whose inventory of this backend cannot be read."""
        return f"correct c.{spawner_class}.{self.option}" if self.option else f"check the {self.name} GPU backend"


_BACKENDS: dict[str, GPUBackend] = {}
_discovered = False


def register(cls: type[GPUBackend]) -> None:
    """Register a backend class under its name; a second class of the same name is refused."""
    name = cls.name.strip().lower()
    if not name or name != cls.name:
        raise ValueError(f"a GPU backend's name must be lower case without spaces, got {cls.name!r}")
    old = _BACKENDS.get(name)
    if old is not None and (type(old).__module__, type(old).__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(
            f"the GPU backend {name!r} is registered twice: {type(old).__module__}.{type(old).__qualname__}"
            f" and {cls.__module__}.{cls.__qualname__}"
        )
    _BACKENDS[name] = cls()


def _discover() -> None:
    """Import every module of this package once, so that each backend class has registered itself."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    package = __name__.rsplit(".", 1)[0]
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        importlib.import_module(f"{package}.{module.name}")


def backend_names() -> tuple[str, ...]:
    """The registered backends' names, sorted."""
    _discover()
    return tuple(sorted(_BACKENDS))


def get_backend(name: str) -> GPUBackend:
    """The backend of this name (any case), or :class:`UnknownBackend` naming the known ones."""
    _discover()
    key = name.lower() if isinstance(name, str) else name
    backend = _BACKENDS.get(key)
    if backend is None:
        raise UnknownBackend(f"gpu_backend must be one of {', '.join(backend_names())}, got {name!r}")
    return backend


def reader_backend(name: str) -> GPUBackend:
    """The backend whose reader a server of backend ``name`` opens."""
    backend = get_backend(name)
    return get_backend(backend.reader) if backend.reader else backend


def reader_name(name: str) -> str:
    """What ``JUPYTERHUB_GPU_READER`` says for a server of backend ``name``: its reader's backend."""
    return reader_backend(name).name
