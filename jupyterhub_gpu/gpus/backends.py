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
