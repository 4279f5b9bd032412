"""GPU catalog: the memory the CUDA driver reports (what vLLM multiplies by
``gpu_memory_utilization``), not the marketing size, plus spec-sheet bandwidth and dense BF16
matmul rate for the simulator's roofline.

Driver totals come from published cudaDeviceProp / deviceQuery output, PyTorch OOM messages
("GPU 0 has a total capacity of X GiB") and vLLM startup logs; see ``source`` on each entry, the
comments beside them and shared/CALIBRATION.md. They move by about 0.1 GiB with the driver
version, and the 48 GB workstation cards lose about 3 GiB with ECC on; MIG slices report their
slice size. For anything else, pass ``--gpu-memory``.

A GPU is named by its catalog name or alias (``h100``, ``rtx-4090``, ``4090``) or as the drivers
name it (nvidia-smi, NVML, ``torch.cuda.get_device_name``: ``NVIDIA H100 80GB HBM3``, ``Tesla
T4``), in any case, with spaces, dashes or underscores. A short name that fits several entries
(``a100``, ``v100``, ``rtx 6000``) takes the first of :data:`AMBIGUOUS` and says so in a note.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from planner.errors import UsageError
from planner.notes import say
from planner.units import GIB, MIB, fmt_bytes


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One GPU as software sees it: ``memory_bytes`` is the driver's total (what vLLM multiplies
    by ``gpu_memory_utilization``), not the marketing size.

    ``bandwidth_bytes_per_s`` and ``bf16_flops`` feed the simulator's roofline; they are
    ``None`` for a GPU known only by its memory (``--gpu-memory``, a boot log). A catalog entry
    also knows its ``vendor``, ``architecture`` (``hopper``, ``cdna3`` ...), its CUDA
    ``compute_capability`` (NVIDIA) or ROCm ``gfx_target`` (AMD, what torch reports as
    ``gcnArchName``), its dense ``fp8_flops`` (None without fp8 tensor units) and ``sources``:
    (fact, where it comes from) pairs (``planner/data/gpus.json``).
    """

    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: int | None = None
    bf16_flops: int | None = None
    compute_capability: str | None = None
    aliases: tuple[str, ...] = ()
    source: str = ""
    # How the GPUs of one node talk ("nvlink", "xgmi" or "pcie") and how many one node holds;
    # None where unknown. Filled per catalog entry (issue 28); read by the budget's non-torch
    # term (issue 23) and the layout checks (issue 22).
    interconnect: Literal["nvlink", "xgmi", "pcie"] | None = None
    node_gpus: int | None = None
    vendor: Literal["nvidia", "amd"] | None = None
    architecture: str | None = None
    gfx_target: str | None = None
    fp8_flops: int | None = None
    # "HBM3", "GDDR6X" ... as the spec sheet names it: the simulator's achieved share of the
    # datasheet bandwidth differs between HBM and GDDR parts (planner/simulate/clock.py).
    memory_type: str | None = None
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def is_a100(self) -> bool:
        """vLLM's batch defaults treat A100 apart from other >= 70 GiB GPUs (it checks the
        device name, as here: "a100-80gb" and "NVIDIA A100-SXM4-80GB" both are)."""
        return "a100" in self.name.lower()

    @property
    def cuda_capability(self) -> tuple[int, int] | None:
        """An NVIDIA GPU's compute capability as (major, minor); None for AMD or a GPU known
        only by its memory."""
        if self.gfx_target or self.vendor == "amd":
            return None
        cc = re.fullmatch(r"(\d+)(?:\.(\d+))?", self.compute_capability or "")
        return (int(cc[1]), int(cc[2] or 0)) if cc else None

    @property
    def has_native_fp8(self) -> bool | None:
        """Whether vLLM computes in fp8 on this GPU, as its platforms decide (``supports_fp8``):
        NVIDIA from compute capability 8.9 (Ada, Hopper, Blackwell; ``platforms/cuda.py``), AMD
        on gfx94x (MI300-class), gfx95x (MI350-class) and gfx12x (RDNA4) (``platforms/rocm.py``).
        None when neither is known (a GPU known only by its memory)."""
        if self.gfx_target:
            return any(self.gfx_target.startswith(g) for g in ("gfx94", "gfx95", "gfx12"))
        cc = self.cuda_capability
        return None if cc is None else cc >= (8, 9)

    @property
    def fp8_format(self) -> str | None:
        """The fp8 e4m3 flavour vLLM stores and computes with (``current_platform.fp8_dtype()``):
        ``float8_e4m3fnuz`` on gfx94x (MI300X/MI325X: no negative zero, exponent bias 8, so
        vLLM doubles the scales of e4m3fn checkpoints), ``float8_e4m3fn`` elsewhere; None for a
        GPU known only by its memory. Both take one byte per element, so KV bytes do not change.
        """
        if self.gfx_target:
            return "float8_e4m3fnuz" if self.gfx_target.startswith("gfx94") else "float8_e4m3fn"
        return "float8_e4m3fn" if self.compute_capability else None

    @property
    def arch_label(self) -> str:
        """``compute capability 8.6`` or ``gfx1100``: how a note names the GPU's architecture."""
        if self.gfx_target:
            return self.gfx_target
        return f"compute capability {self.compute_capability}"

    def with_memory(self, memory_bytes: int, source: str) -> Gpu:
        """This GPU with another total (``--gpu-memory`` over ``--gpu``): a custom size keeps
        the name (so an A100 stays an A100) but loses no roofline figures."""
        if memory_bytes <= 0:
            raise UsageError("--gpu-memory must be positive")
        return replace(self, memory_bytes=memory_bytes, source=source)


def custom_gpu(memory_bytes: int, *, name: str = "custom", source: str = "--gpu-memory") -> Gpu:
    """A GPU known only by its total memory."""
    if memory_bytes <= 0:
        raise UsageError("--gpu-memory must be positive")
    return Gpu(name=name, memory_bytes=memory_bytes, source=source)


_DATA = Path(__file__).parent / "data" / "gpus.json"
_MEMORY = re.compile(r"(\d+(?:\.\d+)?) (MiB|GiB)")
# Which facts each group of sources in gpus.json vouches for.
_SOURCE_FACTS = {
    "memory": ("memory_bytes",),
    "specs": ("bandwidth_bytes_per_s", "bf16_flops", "fp8_flops", "memory_type"),
    "architecture": ("vendor", "architecture", "compute_capability", "gfx_target"),
    "node": ("interconnect", "node_gpus"),
}


def _memory_bytes(text: str) -> int:
    """``"143156 MiB"`` (exact) or ``"79.18 GiB"`` (a total as a log prints it) -> bytes."""
    m = _MEMORY.fullmatch(text)
    if m is None:
        raise ValueError(f"gpus.json: memory {text!r} is not 'N MiB' or 'X GiB'")
    if m[2] == "MiB":
        return int(m[1]) * MIB
    return round(float(m[1]) * GIB)


def _rate(x: object) -> int | None:
    """TB/s or TFLOP/s from gpus.json -> per second (None stays None)."""
    if x is None:
        return None
    if not isinstance(x, int | float):
        raise ValueError(f"gpus.json: {x!r} is not a number")
    return round(x * 10**12)


def _entry(row: dict[str, Any]) -> Gpu:
    sources: dict[str, str] = row["sources"]
    facts = tuple((f, sources[group]) for group, names in _SOURCE_FACTS.items() for f in names)
    return Gpu(
        name=row["name"],
        memory_bytes=_memory_bytes(row["memory"]),
        bandwidth_bytes_per_s=_rate(row["bandwidth_tb_s"]),
        bf16_flops=_rate(row["bf16_tflops"]),
        compute_capability=row["compute_capability"],
        aliases=tuple(row["aliases"]),
        source=sources["memory"],
        interconnect=row["interconnect"],
        node_gpus=row["node_gpus"],
        vendor=row["vendor"],
        architecture=row["architecture"],
        gfx_target=row["gfx_target"],
        fp8_flops=_rate(row["fp8_tflops"]),
        memory_type=row["memory_type"],
        sources=facts,
    )


def _load() -> tuple[tuple[Gpu, ...], dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    data = json.loads(_DATA.read_text(encoding="utf-8"))
    rows: list[dict[str, Any]] = data["gpus"]
    gpus = tuple(_entry(row) for row in rows)
    devices = {row["name"]: tuple(row["device_names"]) for row in rows if row["device_names"]}
    ambiguous = {short: tuple(names) for short, names in data["ambiguous"].items()}
    return gpus, devices, ambiguous


# The catalog, from planner/data/gpus.json: one row per GPU with the memory the driver reports
# (see the module docstring), the spec-sheet rates, the architecture and the node, each group
# with its source. A total taken from a vLLM or PyTorch log is that figure in GiB ("79.18
# GiB", exact to +-0.005 GiB: those logs round to two decimals); one from cudaDeviceProp,
# deviceQuery or ROCm is exact in MiB. Where logs disagree by driver or OS the entry keeps the
# Linux value and its source names the other; an entry with no public figure says so and
# names what it was derived from.
#
# DEVICE_NAMES: what the drivers call each entry (nvidia-smi, NVML, torch.cuda.get_device_name,
# rocm-smi, vLLM's ROCm names), spelled as :func:`_key` reads them: "NVIDIA A100-SXM4-80GB" is
# "a100-sxm4-80gb". Names that are already an entry's name or alias ("NVIDIA L4", "Tesla T4",
# "AMD Instinct MI300X", "AMD Radeon RX 7900 XTX") need no row there.
#
# AMBIGUOUS: short names that fit more than one entry, and the entries they fit, the one used
# first: the A100 most clouds rent today is the 80 GB one, the V100 the 16 GB one, and "RTX
# 6000" is the Ada card more often than the RTX A6000.
GPUS, DEVICE_NAMES, AMBIGUOUS = _load()

# Leading words the drivers put before the model ("NVIDIA GeForce RTX 4090", "Tesla T4",
# "AMD Radeon RX 7900 XTX").
_VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct", "radeon"})


def _key(name: str) -> str:
    """``name`` as the catalog spells it: lower case, words joined by dashes, vendor words
    dropped (``NVIDIA GeForce RTX_4090`` is ``rtx-4090``)."""
    words = re.findall(r"[a-z0-9]+", name.lower())
    while words and words[0] in _VENDOR_WORDS:
        words.pop(0)
    return "-".join(words)


def _compact(key: str) -> str:
    return key.replace("-", "")


def _spellings() -> dict[str, str]:
    """Every spelling of one entry (name, alias, driver name) -> the entry's name."""
    out = {g.name: g.name for g in GPUS}
    out.update({alias: g.name for g in GPUS for alias in g.aliases})
    out.update({dev: name for name, devs in DEVICE_NAMES.items() for dev in devs})
    return out


_BY_NAME: dict[str, Gpu] = {g.name: g for g in GPUS}
_INDEX: dict[str, Gpu] = {_compact(s): _BY_NAME[name] for s, name in _spellings().items()}
_AMBIGUOUS_INDEX: dict[str, tuple[Gpu, ...]] = {
    _compact(short): tuple(_BY_NAME[n] for n in names) for short, names in AMBIGUOUS.items()
}


@dataclass(frozen=True, kw_only=True)
class GpuMatch:
    """A GPU name read against the catalog.

    Attributes:
        gpu: the entry it names.
        note: "" for a name that fits one entry; for a short name that fits several, one line
            saying which was picked and what else matches, e.g. ``a100 is ambiguous; using
            a100-80gb (79.15 GiB); a100-40gb also matches``.
    """

    gpu: Gpu
    note: str = ""


def lookup_gpu(
    name: str, *, memory_bytes: int | None = None, memory_hint: str = "--gpu-memory 24GiB"
) -> GpuMatch:
    """The catalog entry ``name`` names: a catalog name or alias, or a driver's name for it
    (``NVIDIA H100 80GB HBM3``), case-, space-, dash- and underscore-insensitive.

    A short name that fits several entries (:data:`AMBIGUOUS`) picks its first one, or with
    ``memory_bytes`` (a ``--gpu-memory`` total, a detected one) the one closest to it, and the
    match carries a note saying so.

    Raises:
        UsageError: an unknown name, with the closest spellings and ``memory_hint`` (how to
            plan for a GPU outside the catalog: ``--gpu-memory 24GiB``, ``gpu_memory: 24GiB``).
    """
    key = _compact(_key(name))
    gpu = _INDEX.get(key)
    if gpu is not None:
        return GpuMatch(gpu=gpu)
    fits = _AMBIGUOUS_INDEX.get(key)
    if fits is None:
        raise UsageError(_unknown(name, memory_hint))
    if memory_bytes is not None:  # stable: the default wins a tie
        fits = tuple(sorted(fits, key=lambda g: abs(g.memory_bytes - memory_bytes)))
    pick, others = fits[0], ", ".join(g.name for g in fits[1:])
    why = "nearest the given total" if memory_bytes is not None else fmt_bytes(pick.memory_bytes)
    verb = "also matches" if len(fits) == 2 else "also match"
    note = f"{name.strip()} is ambiguous; using {pick.name} ({why}); {others} {verb}"
    return GpuMatch(gpu=pick, note=note)


def _unknown(name: str, memory_hint: str) -> str:
    size = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:g|gb|gib|gi)\s*", name, re.IGNORECASE)
    if size:  # `--gpu 24gb`: a size, not a GPU; no nearest-name guess
        flag = memory_hint.rsplit(" ", 1)[0]
        return (
            f"GPU {name.strip()!r} is a memory size, not a GPU name: give it as {flag} "
            f"{size.group(1)}GiB (or name a catalog GPU: `kvplan gpus`)"
        )
    spellings = _spellings()
    close = difflib.get_close_matches(_key(name), list(spellings), n=8, cutoff=0.5)
    names = list(dict.fromkeys(spellings[c] for c in close))[:3]
    hint = f"; did you mean {', '.join(names)}?" if names else ""
    return (
        f"unknown GPU {name.strip()!r}{hint} (`kvplan gpus` lists them; {memory_hint} plans "
        "for any other GPU)"
    )


def get_gpu(name: str) -> Gpu:
    """The catalog GPU called ``name`` (:func:`lookup_gpu`); the note of an ambiguous short
    name goes to :func:`planner.notes.say` (stderr in the CLI)."""
    match = lookup_gpu(name)
    say(match.note)
    return match.gpu


def resolve_gpu(
    name: str | None,
    memory_bytes: int | None,
    *,
    source: str = "--gpu-memory",
    memory_hint: str = "--gpu-memory 24GiB",
    where: str = "",
) -> Gpu | None:
    """The GPU the user named: a catalog GPU (:func:`lookup_gpu`), a total memory
    (``--gpu-memory``), or both (the catalog GPU with that total: an A100 stays an A100). None
    when neither is given.

    An ambiguous short name's note goes to :func:`planner.notes.say`, after ``where`` (a plans
    file's ``file:line: ``); with a total, the short name picks the entry nearest it.
    """
    gpu = None
    if name:
        match = lookup_gpu(name, memory_bytes=memory_bytes, memory_hint=memory_hint)
        if match.note:
            say(where + match.note)
        gpu = match.gpu
    if memory_bytes is None:
        return gpu
    if gpu is not None:
        return gpu.with_memory(memory_bytes, source)
    return custom_gpu(memory_bytes, source=source)


def _detected(name: str, total_bytes: int, source: str) -> Gpu:
    """A detected GPU: its catalog entry (read by :func:`lookup_gpu`, so the roofline figures
    come with it) with the measured total, else a GPU known by that name and total only."""
    try:
        match = lookup_gpu(name, memory_bytes=total_bytes)
    except UsageError:
        return Gpu(name=name, memory_bytes=total_bytes, source=source)
    return match.gpu.with_memory(total_bytes, f"{source} ({name})")


def detect_gpu() -> Gpu | None:
    """The local GPU through NVML (nvidia-ml-py), else torch when a CUDA driver is present: the
    catalog entry of the name the driver reports, with the total it measures."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        if isinstance(name, bytes):  # nvidia-ml-py before 11.515
            name = name.decode()
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        reserved = int(getattr(info, "reserved", 0) or 0)
        return _detected(str(name), int(info.total) - reserved, "detected via NVML")
    except Exception:  # no NVML, no driver, no GPU
        pass
    if not Path("/proc/driver/nvidia/gpus").exists():
        return None
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]  # slow: only with a driver

        if torch.cuda.is_available():
            _free, total = torch.cuda.mem_get_info()
            return _detected(
                torch.cuda.get_device_name(0),
                int(total),
                "detected via torch.cuda.mem_get_info",
            )
    except Exception:
        return None
    return None
