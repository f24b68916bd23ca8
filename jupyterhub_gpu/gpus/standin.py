"""The state of the stand-in NVIDIA driver: the GPUs that ``tools/nvml-sim`` reports, and their load.

On a machine without a GPU (CI, a trial of a lab server), ``make nvml-sim`` builds a stand-in
``libnvidia-ml.so.1`` from ``tools/nvml-sim/nvml_sim.c``; pynvml loads it as it loads the real
library, so the project's NVML code (:mod:`jupyterhub_gpu.gpus.nvml`) runs on it unchanged. Its GPUs and
their load are what this module writes into a state file::

    root/
      lib/libnvidia-ml.so.1             the stand-in library
      bin/nvidia-container-runtime-hook the stand-in container hook (Docker; tools/nvml-sim/)
      state/nvml.state                  the GPUs and their load (this module writes it)
      dev/nvidia<minor>, dev/nvidia-caps/nvidia-cap<cap>   the "device nodes" of the host

A process on the host reads it with ``LD_LIBRARY_PATH=root/lib``, ``JUPYTERHUB_GPU_NVML_STATE=root/state/nvml.state``
and ``JUPYTERHUB_GPU_NVML_DEV_DIR=root/dev`` (:meth:`StandIn.environment`); a container given GPUs by the
stand-in hook sees the library in ``/usr/lib``, the state in ``/run/nvidia-sim`` and device nodes for its
own GPUs only, as the real driver's container hook arranges. Every GPU is named "Simulated ...": every
label stays true.

A process's pid is the host's, as the real driver reports it (also inside a container).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import uuid as uuidlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from jupyterhub_gpu.env import NVML_DEV_DIR, NVML_STATE

#: The machine-wide root of the stand-in driver for Docker (the hook on dockerd's PATH finds the rest from it).
DEFAULT_ROOT = Path("/var/lib/jupyterhub-gpu-sim")
_NAME = re.compile(r"^Simulated [^\r\n=]{1,80}$")
_UUID = re.compile(r"^(GPU|MIG)-[A-Za-z0-9-]{1,80}$")


class StandInError(ValueError):
    """A state the stand-in driver cannot hold (a GPU not named "Simulated ...", a bad number)."""


def sim_uuid(kind: str, *parts) -> str:
    """A stable uuid for a stand-in device (``GPU-…`` or ``MIG-…``)."""
    return f"{kind}-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, 'jupyterhub-gpu-nvml-sim/' + '/'.join(map(str, parts)))}"


@dataclass(frozen=True)
class SimProcess:
    """A compute process on a GPU or a MIG device: its host pid, memory and SM utilization."""

    pid: int
    used_mib: int = 0
    sm: int = 0


@dataclass(frozen=True)
class SimMIG:
    """A MIG device of a stand-in GPU, in slot ``slot`` of its parent."""

    slot: int
    profile: str  # "1g.10gb"
    total_mib: int
    uuid: str = ""
    cap: int = 0
    used_mib: int | None = None
    processes: tuple[SimProcess, ...] = ()


@dataclass(frozen=True)
class SimGPU:
    """One GPU of the stand-in driver and its load (``used_mib`` None: the sum of its processes)."""

    index: int
    model: str = "T4"
    total_mib: int = 15360
    util: int = 0
    mem_util: int = 0
    used_mib: int | None = None
    temp: int | None = None
    power_mw: int | None = None
    mig: str = "none"  # none (not MIG-capable), off, on
    migs: tuple[SimMIG, ...] = ()
    processes: tuple[SimProcess, ...] = ()
    uuid: str = ""

    @property
    def name(self) -> str:
        return f"Simulated {self.model}"

    def with_uuid(self) -> SimGPU:
        gpu_uuid = self.uuid or sim_uuid("GPU", self.index, self.model)
        migs = tuple(
            replace(
                m,
                uuid=m.uuid or sim_uuid("MIG", gpu_uuid, m.slot, m.profile),
                cap=m.cap or 10 * (self.index + 1) + m.slot + 1,
            )
            for m in self.migs
        )
        return replace(self, uuid=gpu_uuid, migs=migs)


def _int(value, what: str, low: int = 0, high: int = 2**40) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StandInError(f"{what} must be an integer from {low} to {high}, got {value!r}")
    return value


def render(gpus: list[SimGPU], driver: str = "550.54.15") -> str:
    """The state file's text for ``gpus`` (validated: a bad figure raises :class:`StandInError`)."""
    lines = [
        "# the stand-in NVIDIA driver's state (jupyterhub_gpu/gpus/standin.py; tools/nvml-sim/nvml_sim.c)",
        f"driver version={driver} cuda=12040",
    ]
    seen: set[str] = set()
    minors: set[int] = set()
    for g in (g.with_uuid() for g in gpus):
        if not _NAME.match(g.name):
            raise StandInError(f"a stand-in GPU's model must be a short name, got {g.model!r}")
        if not _UUID.match(g.uuid) or g.uuid in seen:
            raise StandInError(f"stand-in GPU uuid {g.uuid!r} is not a unique 'GPU-…' uuid")
        if g.mig not in ("none", "off", "on"):
            raise StandInError(f"mig must be none, off or on, got {g.mig!r}")
        _int(g.index, "index", 0, 255)
        if g.index in minors:
            raise StandInError(f"two stand-in GPUs have index {g.index}")
        minors.add(g.index)
        seen.add(g.uuid)
        fields = {
            "index": g.index,
            "uuid": g.uuid,
            "minor": g.index,
            "total_mib": _int(g.total_mib, "total_mib", 1),
            "util": _int(g.util, "util", 0, 100),
            "mem_util": _int(g.mem_util, "mem_util", 0, 100),
            "mig": g.mig,
        }
        if g.used_mib is not None:
            fields["used_mib"] = _int(g.used_mib, "used_mib", 0, g.total_mib)
        if g.temp is not None:
            fields["temp"] = _int(g.temp, "temp", 0, 150)
        if g.power_mw is not None:
            fields["power_mw"] = _int(g.power_mw, "power_mw", 0, 10**7)
        lines.append("gpu " + " ".join(f"{k}={v}" for k, v in fields.items()) + f" name={g.name}")
        lines += _process_lines(g.uuid, g.processes)
        for m in g.migs:
            if g.mig != "on":
                raise StandInError(f"GPU {g.index} has MIG devices but mig={g.mig!r} (say mig='on')")
            name = f"{g.name} MIG {m.profile}"
            if m.uuid in seen:
                raise StandInError(f"stand-in MIG uuid {m.uuid!r} is listed twice")
            seen.add(m.uuid)
            used = "" if m.used_mib is None else f" used_mib={_int(m.used_mib, 'used_mib', 0, m.total_mib)}"
            lines.append(
                f"mig parent={g.uuid} slot={_int(m.slot, 'slot', 0, 6)} uuid={m.uuid} cap={m.cap}"
                f" total_mib={_int(m.total_mib, 'total_mib', 1)}{used} name={name}"
            )
            lines += _process_lines(m.uuid, m.processes)
    return "\n".join(lines) + "\n"


def _process_lines(uuid: str, processes) -> list[str]:
    return [
        f"process uuid={uuid} pid={_int(p.pid, 'pid', 1, 2**22)} used_mib={_int(p.used_mib, 'used_mib')}"
        f" sm={_int(p.sm, 'sm', 0, 100)}"
        for p in processes
    ]


@dataclass
class StandIn:
    """A stand-in driver's root: its library, hook, state file and the host's device nodes."""

    root: Path = DEFAULT_ROOT
    gpus: list[SimGPU] = field(default_factory=list)

    @property
    def library(self) -> Path:
        return self.root / "lib" / "libnvidia-ml.so.1"

    @property
    def state_file(self) -> Path:
        return self.root / "state" / "nvml.state"

    @property
    def dev_dir(self) -> Path:
        return self.root / "dev"

    def environment(self) -> dict[str, str]:
        """What a process on the host needs to load the stand-in as its NVML (set before it starts)."""
        return {
            "LD_LIBRARY_PATH": str(self.library.parent),
            NVML_STATE: str(self.state_file),
            NVML_DEV_DIR: str(self.dev_dir),
        }

    def write(self, gpus: list[SimGPU] | None = None) -> None:
        """Write the state (atomically: a reader sees the old file or the new one) and the host's device nodes."""
        if gpus is not None:
            self.gpus = list(gpus)
        text = render(self.gpus)
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_file.parent, 0o755)
        fd, tmp = tempfile.mkstemp(dir=self.state_file.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.state_file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        caps = self.dev_dir / "nvidia-caps"
        caps.mkdir(parents=True, exist_ok=True)
        for g in (g.with_uuid() for g in self.gpus):
            (self.dev_dir / f"nvidia{g.index}").touch()
            for m in g.migs:
                (caps / f"nvidia-cap{m.cap}").touch()

    def update(self, index: int, **changes) -> None:
        """Change one GPU's load (``util=80``, ``processes=(SimProcess(1234, 2048, 40),)``) and write the state."""
        self.write([replace(g, **changes) if g.index == index else g for g in self.gpus])

    def uuids(self) -> dict[int, str]:
        return {g.index: g.with_uuid().uuid for g in self.gpus}

    def uuids_in_state(self) -> list[str]:
        """The GPUs' uuids as the state file on disk has them (written by anyone), in its order."""
        found = []
        for line in self.state_file.read_text().splitlines():
            if line.startswith("gpu "):
                found += [t[len("uuid=") :] for t in line.split(" name=")[0].split() if t.startswith("uuid=")]
        return found

    def mig_uuids(self, index: int) -> list[str]:
        return [m.uuid for g in self.gpus if g.index == index for m in g.with_uuid().migs]


def parse_gpus(text: str) -> list[SimGPU]:
    """``"T4x2,A100"`` as stand-in GPUs: a model and how many (memory from the model: A100 40 GiB, else 15 GiB)."""
    gpus: list[SimGPU] = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        model, _, count = part.partition("x")
        if not re.fullmatch(r"[A-Za-z0-9-]{1,20}", model) or not (count == "" or count.isdigit()):
            raise StandInError(f"--gpus: {part!r} is not MODEL or MODELxCOUNT (for example T4x2)")
        n = int(count or 1)
        if not 1 <= n <= 16:
            raise StandInError(f"--gpus: {part!r}: the count must be from 1 to 16")
        memory = 40960 if model.upper().startswith("A100") else 15360
        gpus += [SimGPU(len(gpus) + i, model=model, total_mib=memory) for i in range(n)]
    if not gpus:
        raise StandInError("--gpus names no GPU")
    return gpus


def main(argv: list[str] | None = None) -> int:
    """``python -m jupyterhub_gpu.gpus.standin [--root R] [--gpus T4x2] [--keep]``: write the stand-in's state."""
    parser = argparse.ArgumentParser(prog="python -m jupyterhub_gpu.gpus.standin", description=main.__doc__)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help=f"the stand-in's root (default {DEFAULT_ROOT})")
    parser.add_argument("--gpus", default="T4x4", help="the GPUs, MODELxCOUNT[,...] (default T4x4)")
    parser.add_argument("--keep", action="store_true", help="leave an existing state file as it is")
    args = parser.parse_args(argv)
    standin = StandIn(root=args.root)
    if args.keep and standin.state_file.exists():
        return 0
    try:
        standin.write(parse_gpus(args.gpus))
    except (StandInError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"stand-in NVIDIA driver state: {standin.state_file}")
    return 0


if __name__ == "__main__":  # pragma: no cover - the command line
    raise SystemExit(main())
