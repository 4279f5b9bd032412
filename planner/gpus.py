"""GPU catalog: the memory the CUDA driver reports (what vLLM multiplies by
``gpu_memory_utilization``), not the marketing size, plus spec-sheet bandwidth and dense BF16
matmul rate for the simulator's roofline.

Driver totals come from published PyTorch OOM messages ("GPU 0 has a total capacity of X GiB")
and vLLM startup logs; see ``source`` on each entry and shared/CALIBRATION.md.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from planner.errors import UsageError

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class GPU:
    """One GPU model as software sees it."""

    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: int
    bf16_flops: int
    compute_capability: str
    aliases: tuple[str, ...] = ()
    source: str = ""

    @property
    def is_a100(self) -> bool:
        """vLLM's batch defaults treat A100 apart from other >= 70 GiB GPUs."""
        return self.name.startswith("a100")


def _gib(x: float) -> int:
    return round(x * GIB)


def _tb(x: float) -> int:
    return round(x * 10**12)


GPUS: tuple[GPU, ...] = (
    GPU(
        "h200",
        _gib(139.81),
        _tb(4.8),
        _tb(989),
        "9.0",
        ("h200-sxm", "h200-141gb"),
        "nvidia-smi 143,771 MiB (CALIBRATION.md); driver total ~0.5 GiB below",
    ),
    GPU(
        "h100",
        _gib(79.18),
        _tb(3.35),
        _tb(989),
        "9.0",
        ("h100-sxm", "h100-80gb", "h100-sxm5"),
        "vLLM log: total 79.18 GiB (CALIBRATION.md)",
    ),
    GPU("h100-pcie", _gib(79.18), _tb(2.0), _tb(756), "9.0", (), "same 80 GB part as SXM"),
    GPU(
        "h100-nvl", _gib(93.10), _tb(3.9), _tb(835), "9.0", ("h100-94gb",), "nvidia-smi 95,830 MiB"
    ),
    GPU("h20", _gib(95.08), _tb(4.0), _tb(148), "9.0", (), "nvidia-smi 97,871 MiB"),
    GPU(
        "a100-40gb",
        _gib(39.38),
        _tb(1.555),
        _tb(312),
        "8.0",
        ("a100", "a100-40g"),
        "vLLM log: 39.38 GiB (CALIBRATION.md)",
    ),
    GPU(
        "a100-80gb",
        _gib(79.15),
        _tb(2.039),
        _tb(312),
        "8.0",
        ("a100-80g",),
        "PyTorch OOM: total capacity of 79.15 GiB",
    ),
    GPU("l40s", _gib(44.39), _tb(0.864), _tb(362), "8.9", (), "PyTorch OOM: 44.39 GiB"),
    GPU("l4", _gib(22.03), _tb(0.3), _tb(121), "8.9", (), "PyTorch OOM: 22.03 GiB"),
    GPU("a10", _gib(22.06), _tb(0.6), _tb(125), "8.6", (), "nvidia-smi 23,028 MiB"),
    GPU("a10g", _gib(22.06), _tb(0.6), _tb(70), "8.6", (), "PyTorch OOM: 22.06 GiB"),
    GPU(
        "rtx-3090",
        _gib(23.58),
        _tb(0.936),
        _tb(71),
        "8.6",
        ("3090",),
        "vLLM log: 23.58 GiB (CALIBRATION.md)",
    ),
    GPU(
        "rtx-4090",
        _gib(23.65),
        _tb(1.008),
        _tb(165),
        "8.9",
        ("4090",),
        "PyTorch OOM: total capacity of 23.65 GiB",
    ),
    GPU(
        "rtx-5090",
        _gib(31.36),
        _tb(1.792),
        _tb(209),
        "12.0",
        ("5090",),
        "PyTorch OOM: total capacity of 31.36 GiB",
    ),
    GPU(
        "rtx-6000-ada",
        _gib(47.50),
        _tb(0.96),
        _tb(364),
        "8.9",
        ("rtx6000-ada", "6000-ada"),
        "nvidia-smi 49,140 MiB",
    ),
    GPU(
        "a6000",
        _gib(47.54),
        _tb(0.768),
        _tb(155),
        "8.6",
        ("rtx-a6000",),
        "PyTorch OOM: total capacity of 47.54 GiB",
    ),
    GPU("t4", _gib(14.75), _tb(0.32), _tb(65), "7.5", (), "PyTorch OOM: 14.75 GiB"),
    GPU("v100-16gb", _gib(15.77), _tb(0.9), _tb(125), "7.0", ("v100",), "PyTorch OOM: 15.77 GiB"),
    GPU("v100-32gb", _gib(31.74), _tb(0.9), _tb(125), "7.0", (), "PyTorch OOM: 31.74 GiB"),
    GPU("b200", _gib(178.35), _tb(8.0), _tb(2250), "10.0", (), "nvidia-smi 183,359 MiB"),
    GPU("mi300x", _gib(191.98), _tb(5.3), _tb(1307), "gfx942", (), "ROCm PyTorch OOM: 191.98 GiB"),
)


def _key(name: str) -> str:
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = re.sub(r"^(nvidia|amd|geforce|instinct)-", "", key)
    return re.sub(r"^(nvidia|amd|geforce|instinct)-", "", key)


def get_gpu(name: str) -> GPU:
    """The catalog GPU called ``name`` (case- and dash-insensitive), else a UsageError listing
    close matches."""
    key = _key(name)
    for gpu in GPUS:
        if (
            key == gpu.name
            or key in gpu.aliases
            or key.replace("-", "") == gpu.name.replace("-", "")
        ):
            return gpu
    names = [g.name for g in GPUS] + [a for g in GPUS for a in g.aliases]
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UsageError(
        f"unknown GPU {name!r}{hint} Use --gpu-memory 24GiB for a GPU not in the catalog "
        "(`kvplan gpus` lists it)"
    )
