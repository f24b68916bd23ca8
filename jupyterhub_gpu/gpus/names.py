"""GPU names: the one tokenizer, model matching, MIG slices and memory sizes read from names.

A profile's ``gpu_model`` ("A100", "A100 MIG 1g.10gb", "T4") is matched against
device names ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"),
Kubernetes node products ("NVIDIA-A100-SXM4-40GB") and the published profiles
that the advice compares, all with the words of :func:`words`.
"""

from __future__ import annotations

import re

#: What separates the words of a GPU name: anything but letters, digits and dots ("1g.5gb" is one word).
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9.]+")
#: A MIG slice, ``<compute slices>g.<memory GB>gb`` ("1g.5gb", "3G.20GB").
MIG_SLICE = re.compile(r"(\d+)g\.(\d+)gb", re.IGNORECASE)
_GB = re.compile(r"(\d+)gb")

#: Memory per GPU of models whose name does not say it (the smaller variant where there are two).
KNOWN_GPU_MEMORY_GB = {
    "t4": 16,
    "p100": 16,
    "v100": 16,
    "a10": 24,
    "a30": 24,
    "l4": 24,
    "a40": 48,
    "l40": 48,
    "l40s": 48,
    "a6000": 48,
    "a100": 40,
    "a800": 40,
    "h100": 80,
    "h800": 80,
    "h200": 141,
    "k80": 12,
    "3090": 24,
    "4090": 24,
}
#: How many compute slices ("Ng" of a MIG profile "Ng.Mgb") a whole GPU of a model has.
MIG_SLICES = {"a30": 4}
MIG_SLICES_DEFAULT = 7
MIG_CAPABLE = {"a100", "a800", "a30", "h100", "h800", "h200"}
#: Words of a device name that say nothing of its model family.
_NOISE = {"nvidia", "tesla", "geforce", "rtx", "simulated", "mig", "sxm", "sxm2", "sxm4", "sxm5", "pcie", "nvl"}


def words(text: str | None) -> list[str]:
    """The words of a GPU name, as written: ``"NVIDIA A100-SXM4-40GB"`` -> ``["NVIDIA", "A100", "SXM4", "40GB"]``."""
    return [w for w in _WORD_SPLIT.split(text or "") if w]


def tokens(text: str | None) -> list[str]:
    """The words of a GPU name, case-folded, for comparing names."""
    return words((text or "").casefold())


def model_matches(gpu_model: str, device_name: str) -> bool:
    """Whether a profile's ``gpu_model`` names this device.

    The model's words must appear in the device name as consecutive words, so
    "A100" matches "NVIDIA A100-SXM4-40GB" but "L4" does not match "NVIDIA L40S".
    A MIG instance ("NVIDIA A100-SXM4-40GB MIG 1g.5gb") matches only a model that
    asks for MIG or names a slice ("MIG", "1g.5gb"): an "A100" profile means a
    whole A100, never a slice of one.
    """
    want = tokens(gpu_model)
    have = tokens(device_name)
    if not want:
        return False
    if "mig" in have and "mig" not in want and not any(MIG_SLICE.fullmatch(t) for t in want):
        return False
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


def mig_request(gpu_model: str) -> tuple[str | None, str]:
    """``(MIG slice, product words)`` a profile's ``gpu_model`` asks for.

    ``"A100"`` -> ``(None, "A100")``: whole GPUs; ``"A100 MIG 1g.10gb"`` ->
    ``("1g.10gb", "A100")``: that slice, on the product named by the other words
    (without the word "MIG"), if any.
    """
    found = words(gpu_model)
    slices = [w for w in found if MIG_SLICE.fullmatch(w)]
    if not slices:
        return None, " ".join(found)
    rest = [w for w in found if not MIG_SLICE.fullmatch(w) and w.casefold() != "mig"]
    return slices[0].lower(), " ".join(rest)


def memory_from_name(*names: str) -> int | None:
    """GPU memory (MiB) a model or profile name states: a MIG slice (``1g.5gb``), ``40GB``, or a known model."""
    for name in names:
        for token in tokens(name):
            if m := MIG_SLICE.fullmatch(token):
                return int(m.group(2)) * 1024
    for name in names:
        found = tokens(name)
        for i, token in enumerate(found):
            if m := _GB.fullmatch(token):
                return int(m.group(1)) * 1024
            if token.isdigit() and i + 1 < len(found) and found[i + 1] == "gb":
                return int(token) * 1024
    for name in names:
        for token in tokens(name):
            if token in KNOWN_GPU_MEMORY_GB:
                return KNOWN_GPU_MEMORY_GB[token] * 1024
    return None


def gpu_family(gpu_model: str) -> tuple[str, int | None, int]:
    """``(model, slice, slices of a whole GPU)``: ``("a100", 1, 7)`` for a 1g.5gb MIG slice, ``("t4", None, 1)``."""
    found = [t for t in tokens(gpu_model) if t not in _NOISE and not _GB.fullmatch(t)]
    slice_units = None
    rest = []
    for t in found:
        if m := MIG_SLICE.fullmatch(t):
            slice_units = int(m.group(1))
        else:
            rest.append(t)
    model = " ".join(rest)
    whole = MIG_SLICES.get(model, MIG_SLICES_DEFAULT) if model in MIG_CAPABLE else 1
    return model, slice_units, whole
