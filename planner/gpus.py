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
import re
from dataclasses import dataclass
from pathlib import Path

from planner.deployment import Gpu, custom_gpu
from planner.errors import UsageError
from planner.notes import say
from planner.units import GIB, MIB, fmt_bytes


def _row(
    name: str,
    memory_bytes: int,
    bandwidth_bytes_per_s: int,
    bf16_flops: int,
    compute_capability: str,
    aliases: tuple[str, ...] = (),
    source: str = "",
) -> Gpu:
    return Gpu(
        name=name,
        memory_bytes=memory_bytes,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        bf16_flops=bf16_flops,
        compute_capability=compute_capability,
        aliases=aliases,
        source=source,
    )


def _gib(x: float) -> int:
    return round(x * GIB)


def _tb(x: float) -> int:
    return round(x * 10**12)


# Sources. Each total is what CUDA reports (torch.cuda.mem_get_info / get_device_properties,
# the number vLLM logs as "Free memory on device (free/TOTAL GiB)" or, before V1,
# "total_gpu_memory (TOTAL GiB)"), rounded to two decimals in those logs: a total taken from a
# log is that figure in GiB, so it is exact to +-0.005 GiB. Where logs disagree by driver or OS
# the entry keeps the Linux value and its source names the other. Entries with no public vLLM
# or PyTorch figure found keep their deviceQuery / cudaDeviceProp total.
GPUS: tuple[Gpu, ...] = (
    # vLLM logs "Free memory on device (137.64/139.8 GiB)" and "(139.21/139.81 GiB)" on H200s
    # (driver-dependent); 143,156 MiB is 139.80 GiB. nvidia-smi says 143,771 MiB
    # (shared/CALIBRATION.md), which includes memory CUDA never offers.
    _row(
        "h200",
        143156 * MIB,
        _tb(4.8),
        _tb(989),
        "9.0",
        ("h200-sxm", "h200-141gb"),
        "cudaDeviceProp 143156 MiB; vLLM log total_gpu_memory 139.81 GiB",
    ),
    # shared/CALIBRATION.md (llm-d empirical vLLM results on H100 80GB HBM3): 79.18 GiB.
    _row(
        "h100",
        _gib(79.18),
        _tb(3.35),
        _tb(989),
        "9.0",
        ("h100-sxm", "h100-80gb", "h100-sxm5"),
        "vLLM log 79.18 GiB (CALIBRATION.md); deviceQuery 81079-81106 MiB",
    ),
    # no public log found: cudaDeviceProp.
    _row("h100-pcie", 81008 * MIB, _tb(2.0), _tb(756), "9.0", (), "cudaDeviceProp 81008 MiB"),
    # no vLLM log found: PyTorch OOM messages.
    _row(
        "h100-nvl",
        _gib(93.10),
        _tb(3.9),
        _tb(835),
        "9.0",
        ("h100-94gb",),
        "PyTorch OOM: total capacity 93.09-93.11 GiB",
    ),
    # no public log found: cudaDeviceProp.
    _row("h20", 97285 * MIB, _tb(4.0), _tb(148), "9.0", (), "cudaDeviceProp 97285 MiB"),
    # shared/CALIBRATION.md: 39.38 GiB.
    _row(
        "a100-40gb",
        _gib(39.38),
        _tb(1.555),
        _tb(312),
        "8.0",
        ("a100-40g",),
        "vLLM log 39.38 GiB (CALIBRATION.md); deviceQuery 40339 MiB",
    ),
    # Logs disagree by driver, so the deviceQuery total stays: vLLM logs 79.32 GiB on 2x A100
    # 80GB (https://github.com/vllm-project/vllm-omni/issues/276), PyTorch 79.25 GiB
    # (https://github.com/HiDream-ai/VAREdit/issues/6), 79.15 GiB is 81,051 MiB.
    _row(
        "a100-80gb",
        81051 * MIB,
        _tb(2.039),
        _tb(312),
        "8.0",
        ("a100-80g",),
        "deviceQuery 81051 MiB (84,987,740,160 B)",
    ),
    # PyTorch on an L40S: "GPU 0 has a total capacity of 44.53 GiB"
    # (https://github.com/Wan-Video/Wan2.1/issues/205); a vLLM V1 start-up line reads
    # "Free memory on device (28.56/44.53 GiB)". cudaDeviceProp had 45,589 MiB (44.52 GiB).
    _row(
        "l40s",
        _gib(44.53),
        _tb(0.864),
        _tb(362),
        "8.9",
        (),
        "vLLM/PyTorch 44.53 GiB (ECC on); cudaDeviceProp 45589 MiB on older drivers",
    ),
    # vLLM 0.29 on 1x NVIDIA L4: "Free memory on device (21.84/22.03 GiB) on startup. Desired
    # GPU memory utilization is (0.92, 20.27 GiB)" (public lab notes "Lab 00 - hello-gpu:
    # findings", found by exact search; no URL in the index), and PyTorch "total capacity of
    # 22.03 GiB" on GCP g2 and Modal L4s; issue 12 quotes the same 22.03. deviceQuery on an
    # older driver had 22,518 MiB (21.99 GiB).
    _row(
        "l4",
        _gib(22.03),
        _tb(0.3),
        _tb(121),
        "8.9",
        (),
        "vLLM log 22.03 GiB (v0.29); deviceQuery 22518 MiB on older drivers",
    ),
    # vLLM runs on A10 report PyTorch "total capacity of 22.18 GiB"
    # (https://github.com/OpenBMB/MiniCPM-V/issues/640, one cloud host); deviceQuery kept.
    _row(
        "a10",
        22516 * MIB,
        _tb(0.6),
        _tb(125),
        "8.6",
        (),
        "deviceQuery 22516 MiB (23,609,475,072 B)",
    ),
    # no public log found: cudaDeviceProp.
    _row("a10g", 22587 * MIB, _tb(0.6), _tb(70), "8.6", (), "cudaDeviceProp 22587 MiB"),
    # shared/CALIBRATION.md: 23.58 GiB; a newer driver logs "(22.93/23.56 GiB)" on 8x RTX 3090
    # (https://github.com/wtdcode/vllm-backport/issues/34).
    _row(
        "rtx-3090",
        _gib(23.58),
        _tb(0.936),
        _tb(71),
        "8.6",
        ("3090",),
        "vLLM log 23.58 GiB (CALIBRATION.md); cudaDeviceProp 24238-24268 MiB",
    ),
    # Linux: PyTorch "total capacity of 23.64 GiB" (https://github.com/ali-vilab/VGen/issues/104,
    # https://github.com/3DTopia/Phidias-Diffusion/issues/8). Windows/WSL drivers report more:
    # vLLM "Free memory on device cuda:0 (22.45/23.99 GiB)" on a 4090 under Windows
    # (https://github.com/noonghunna/qwen36-27b-single-3090/issues/9).
    _row(
        "rtx-4090",
        24207 * MIB,
        _tb(1.008),
        _tb(165),
        "8.9",
        ("4090",),
        "trtexec 24207 MiB; PyTorch 23.64 GiB (Linux); WSL/Windows drivers report 23.99 GiB",
    ),
    # vLLM on 2x RTX 5090: "Free memory on device (30.27/31.4 GiB) on startup. Desired GPU
    # memory utilization is (0.92, 28.88 GiB)"
    # (https://github.com/noonghunna/club-3090/issues/1087); PyTorch elsewhere "total capacity
    # of 31.37 GiB" (https://github.com/Wan-Video/Wan2.1/issues/465). deviceQuery had
    # 32,109 MiB (31.36 GiB). 31.396 GiB is a total both figures of that line round to
    # (31.40 would ask for 28.89).
    _row(
        "rtx-5090",
        _gib(31.396),
        _tb(1.792),
        _tb(209),
        "12.0",
        ("5090",),
        "vLLM log 31.4 GiB; PyTorch 31.37 GiB; deviceQuery 32109 MiB",
    ),
    # no public log found: cudaDeviceProp.
    _row(
        "rtx-6000-ada",
        48622 * MIB,
        _tb(0.96),
        _tb(364),
        "8.9",
        ("rtx6000-ada", "6000-ada"),
        "cudaDeviceProp 48622 MiB (ECC off; about 44.4 GiB with ECC on)",
    ),
    # no public log found: cudaDeviceProp.
    _row(
        "a6000",
        48676 * MIB,
        _tb(0.768),
        _tb(155),
        "8.6",
        ("rtx-a6000",),
        "cudaDeviceProp 48676 MiB",
    ),
    # no public log found: cudaDeviceProp.
    _row("t4", 15109 * MIB, _tb(0.32), _tb(65), "7.5", (), "cudaDeviceProp 15109 MiB (ECC on)"),
    # no public log found: deviceQuery.
    _row(
        "v100-16gb",
        16160 * MIB,
        _tb(0.9),
        _tb(125),
        "7.0",
        (),
        "deviceQuery 16160 MiB (16,945,512,448 B)",
    ),
    # no public log found: deviceQuery.
    _row(
        "v100-32gb",
        32510 * MIB,
        _tb(0.9),
        _tb(125),
        "7.0",
        (),
        "deviceQuery 32510 MiB (34,089,730,048 B)",
    ),
    # vLLM logs "Free memory on device cuda:0 (41.24/178.35 GiB)" (found by exact search, no
    # URL in the index): 182,631 MiB is 178.35 GiB, so the total stands.
    _row("b200", 182631 * MIB, _tb(8.0), _tb(2250), "10.0", (), "cudaDeviceProp 182631 MiB"),
    # no public log found: ROCm total_memory.
    _row(
        "mi300x",
        196592 * MIB,
        _tb(5.3),
        _tb(1307),
        "gfx942",
        (),
        "ROCm total_memory 196592 MiB (206,141,652,992 B)",
    ),
)


# What the drivers call each entry (nvidia-smi, NVML, torch.cuda.get_device_name), spelled as
# :func:`_key` reads them: "NVIDIA A100-SXM4-80GB" is "a100-sxm4-80gb". Names that are already
# an entry's name or alias ("NVIDIA L4", "Tesla T4", "NVIDIA GeForce RTX 4090", "NVIDIA RTX
# A6000", "AMD Instinct MI300X") need no row here.
DEVICE_NAMES: dict[str, tuple[str, ...]] = {
    "h100": ("h100-80gb-hbm3", "h100-sxm5-80gb"),
    "h100-pcie": ("h100-80gb-pcie", "h100-pcie-80gb"),
    "a100-40gb": ("a100-sxm4-40gb", "a100-pcie-40gb", "a100-sxm-40gb"),
    "a100-80gb": ("a100-sxm4-80gb", "a100-80gb-pcie", "a100-pcie-80gb", "a100-sxm-80gb"),
    "rtx-6000-ada": ("rtx-6000-ada-generation",),
    "v100-16gb": ("v100-sxm2-16gb", "v100-pcie-16gb"),
    "v100-32gb": ("v100-sxm2-32gb", "v100-pcie-32gb", "v100s-pcie-32gb", "v100s-32gb"),
}

# Short names that fit more than one entry, and the entries they fit, the one used first: the
# A100 most clouds rent today is the 80 GB one, the V100 the 16 GB one, and "RTX 6000" is the
# Ada card more often than the RTX A6000.
AMBIGUOUS: dict[str, tuple[str, ...]] = {
    "a100": ("a100-80gb", "a100-40gb"),
    "a100-sxm4": ("a100-80gb", "a100-40gb"),
    "a100-sxm": ("a100-80gb", "a100-40gb"),
    "a100-pcie": ("a100-80gb", "a100-40gb"),
    "v100": ("v100-16gb", "v100-32gb"),
    "v100-sxm2": ("v100-16gb", "v100-32gb"),
    "v100-pcie": ("v100-16gb", "v100-32gb"),
    "rtx-6000": ("rtx-6000-ada", "a6000"),
}

# Leading words the drivers put before the model ("NVIDIA GeForce RTX 4090", "Tesla T4").
_VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct"})


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


@dataclass(frozen=True)
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
        return GpuMatch(gpu)
    fits = _AMBIGUOUS_INDEX.get(key)
    if fits is None:
        raise UsageError(_unknown(name, memory_hint))
    if memory_bytes is not None:  # stable: the default wins a tie
        fits = tuple(sorted(fits, key=lambda g: abs(g.memory_bytes - memory_bytes)))
    pick, others = fits[0], ", ".join(g.name for g in fits[1:])
    why = "nearest the given total" if memory_bytes is not None else fmt_bytes(pick.memory_bytes)
    verb = "also matches" if len(fits) == 2 else "also match"
    note = f"{name.strip()} is ambiguous; using {pick.name} ({why}); {others} {verb}"
    return GpuMatch(pick, note)


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
