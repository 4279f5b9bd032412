"""GPU catalog: the memory the CUDA driver reports (what vLLM multiplies by
``gpu_memory_utilization``), not the marketing size, plus spec-sheet bandwidth and dense BF16
matmul rate for the simulator's roofline.

Driver totals come from published cudaDeviceProp / deviceQuery output, PyTorch OOM messages
("GPU 0 has a total capacity of X GiB") and vLLM startup logs; see ``source`` on each entry and
shared/CALIBRATION.md. They move by about 0.1 GiB with the driver version, and the 48 GB
workstation cards lose about 3 GiB with ECC on; MIG slices report their slice size. For anything
else, pass ``--gpu-memory``.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from planner.deployment import Gpu, custom_gpu
from planner.errors import UsageError
from planner.units import GIB, MIB


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
        ("a100", "a100-40g"),
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
        ("v100",),
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


def _key(name: str) -> str:
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = re.sub(r"^(nvidia|amd|geforce|instinct)-", "", key)
    return re.sub(r"^(nvidia|amd|geforce|instinct)-", "", key)


def get_gpu(name: str) -> Gpu:
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


def resolve_gpu(
    name: str | None, memory_bytes: int | None, *, source: str = "--gpu-memory"
) -> Gpu | None:
    """The GPU the user named: a catalog GPU, a total memory (``--gpu-memory``), or both (the
    catalog GPU with that total: an A100 stays an A100). None when neither is given."""
    gpu = get_gpu(name) if name else None
    if memory_bytes is None:
        return gpu
    if gpu is not None:
        return gpu.with_memory(memory_bytes, source)
    return custom_gpu(memory_bytes, source=source)


def detect_gpu() -> Gpu | None:
    """The local GPU through NVML (nvidia-ml-py), else torch when a CUDA driver is present."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        reserved = int(getattr(info, "reserved", 0) or 0)
        return Gpu(
            name=str(name), memory_bytes=int(info.total) - reserved, source="detected via NVML"
        )
    except Exception:  # no NVML, no driver, no GPU
        pass
    if not Path("/proc/driver/nvidia/gpus").exists():
        return None
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]  # slow: only with a driver

        if torch.cuda.is_available():
            _free, total = torch.cuda.mem_get_info()
            return Gpu(
                name=torch.cuda.get_device_name(0),
                memory_bytes=int(total),
                source="detected via torch.cuda.mem_get_info",
            )
    except Exception:
        return None
    return None
