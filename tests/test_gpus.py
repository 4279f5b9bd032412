"""The GPU catalog: totals as vLLM and PyTorch log them, each against the log line it cites
(``planner/gpus.py`` names the sources)."""

from __future__ import annotations

import math

import pytest

from planner.gpus import get_gpu

GIB = 1 << 30


def _logged(total_bytes: int) -> float:
    """A total as vLLM's and PyTorch's messages print it: GiB to two decimals."""
    return round(total_bytes / GIB, 2)


@pytest.mark.parametrize(
    ("name", "gmu", "total_gib", "requested_gib"),
    [
        # vLLM 0.29 on an L4: "Free memory on device (21.84/22.03 GiB) on startup. Desired GPU
        # memory utilization is (0.92, 20.27 GiB)"
        ("l4", 0.92, 22.03, 20.27),
        # vLLM on an RTX 5090: "Free memory on device (30.27/31.4 GiB) on startup. Desired GPU
        # memory utilization is (0.92, 28.88 GiB)" (noonghunna/club-3090#1087)
        ("rtx-5090", 0.92, 31.4, 28.88),
    ],
)
def test_totals_match_the_vllm_line_they_come_from(
    name: str, gmu: float, total_gib: float, requested_gib: float
) -> None:
    total = get_gpu(name).memory_bytes
    assert _logged(total) == total_gib
    # vLLM asks for ceil(total * gpu_memory_utilization) bytes and logs it the same way
    assert _logged(math.ceil(total * gmu)) == requested_gib


@pytest.mark.parametrize(
    ("name", "total_gib"),
    [
        ("l40s", 44.53),  # PyTorch "total capacity of 44.53 GiB" (Wan-Video/Wan2.1#205)
        ("rtx-4090", 23.64),  # PyTorch on Linux (ali-vilab/VGen#104); WSL reports 23.99
        ("b200", 178.35),  # vLLM "Free memory on device cuda:0 (41.24/178.35 GiB)"
        ("h200", 139.8),  # vLLM "Free memory on device (137.64/139.8 GiB)"
    ],
)
def test_totals_match_logged_capacity(name: str, total_gib: float) -> None:
    assert _logged(get_gpu(name).memory_bytes) == total_gib


def test_the_4090_keeps_the_linux_total_and_names_the_wsl_one() -> None:
    assert "23.99 GiB" in get_gpu("rtx-4090").source
