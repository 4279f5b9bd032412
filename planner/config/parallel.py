"""The parallel sub-config: vLLM's ParallelConfig rules for DP, EP, EPLB and DCP
(``vllm/config/parallel.py``); whether a layout fits a machine is :mod:`planner.cluster`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.errors import SettingError, UsageError
from planner.model.specs import Engine
from planner.units import MAX_COUNT

if TYPE_CHECKING:
    from planner.deployment import ServeSettings


def check_parallel(s: ServeSettings) -> None:
    """vLLM's ParallelConfig rules for DP, EP, EPLB and DCP (``vllm/config/parallel.py``)."""
    r = s.num_redundant_experts
    if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= MAX_COUNT:
        raise SettingError(
            f"--num-redundant-experts must be a whole number >= 0, got {r!r}",
            rule="whole",
            value=r,
        )
    if r and not s.enable_expert_parallel:
        raise UsageError(
            "--num-redundant-experts needs --enable-expert-parallel (vLLM's EPLB runs only "
            "with expert parallelism)"
        )
    if s.tp % s.dcp:
        raise UsageError(
            f"--decode-context-parallel-size {s.dcp} must divide --tp {s.tp} "
            "(DCP reuses the TP ranks)"
        )
    if s.engine is not Engine.VLLM and (
        s.dcp > 1 or s.speculative is not None or s.num_redundant_experts
    ):
        raise UsageError(
            "--decode-context-parallel-size, --speculative-config and EPLB are sized for "
            "vLLM only; drop them or use --engine vllm"
        )
