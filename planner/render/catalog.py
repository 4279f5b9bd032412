"""``kvplan models`` and ``kvplan gpus``: the bundled catalogs."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from planner.render._output import Column, console, print_fitted, to_json, write_out
from planner.units import fmt_bytes

if TYPE_CHECKING:
    from planner.gpus import Gpu
    from planner.model_list import ModelRow


def models(rows: list[ModelRow], *, as_json: bool = False) -> None:
    if as_json:
        write_out(to_json([asdict(r) for r in rows]))
        return
    columns = [
        Column("name", [r.name for r in rows], identifier=True),
        Column("KV B/token", [f"{r.kv_bytes_per_token:,}" for r in rows], right=True),
        Column("attention", [r.attention_type for r in rows]),
        Column("layers", [str(r.num_layers) for r in rows], right=True),
        Column("KV heads", [str(r.num_kv_heads) for r in rows], right=True),
        Column("head", [str(r.head_dim) for r in rows], right=True),
        Column(
            "state/seq",
            [
                fmt_bytes(r.state_bytes_per_sequence) if r.state_bytes_per_sequence else "—"
                for r in rows
            ],
            right=True,
        ),
    ]
    print_fitted(
        console(),
        "Bundled catalog (offline): KV bytes per token for vLLM, TP 1, dtype auto",
        columns,
        "--json has every field.",
    )


def _gpu_json(g: Gpu) -> dict[str, object]:
    """One entry as ``kvplan gpus --json`` gives it: every field, ``sources`` as fact -> source,
    and what vLLM decides from the architecture (``has_native_fp8``, ``fp8_format``)."""
    out = asdict(g)
    out["sources"] = dict(g.sources)
    out["has_native_fp8"] = g.has_native_fp8
    out["fp8_format"] = g.fp8_format
    return out


def _tflops(x: int | None) -> str:
    return "—" if x is None else f"{x / 1e12:,.0f} TFLOP/s"


def gpus(rows: list[Gpu], *, as_json: bool = False) -> None:
    if as_json:
        write_out(to_json([_gpu_json(g) for g in rows]))
        return
    columns = [
        Column("name", [g.name for g in rows], identifier=True),
        Column("memory", [fmt_bytes(g.memory_bytes) for g in rows], right=True),
        Column("bytes", [f"{g.memory_bytes:,}" for g in rows], right=True),
        Column(
            "bandwidth",
            [
                "—"
                if g.bandwidth_bytes_per_s is None
                else f"{g.bandwidth_bytes_per_s / 1e12:.2f} TB/s"
                for g in rows
            ],
            right=True,
        ),
        Column("BF16 dense", [_tflops(g.bf16_flops) for g in rows], right=True),
        Column("FP8 dense", [_tflops(g.fp8_flops) for g in rows], right=True),
        Column("arch", [g.gfx_target or g.compute_capability or "—" for g in rows]),
        Column("link", [g.interconnect or "—" for g in rows]),
        Column("source", [g.source for g in rows]),
    ]
    print_fitted(
        console(),
        "GPU catalog: memory as the CUDA or ROCm driver reports it",
        columns,
        "--gpu also takes nvidia-smi, rocm-smi and torch names; --json has every field and "
        "the source of each.",
    )
