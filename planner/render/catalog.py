"""``kvplan models`` and ``kvplan gpus``: the bundled catalogs."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from rich.table import Table

from planner.render._output import console, to_json, write_out
from planner.units import fmt_bytes

if TYPE_CHECKING:
    from planner.deployment import Gpu
    from planner.model_list import ModelRow


def models(rows: list[ModelRow], *, as_json: bool = False) -> None:
    if as_json:
        write_out(to_json([asdict(r) for r in rows]))
        return
    table = Table(title="Bundled catalog (offline) — KV bytes/token for vLLM, TP 1, dtype auto")
    table.add_column("name", overflow="fold")
    table.add_column("layers", justify="right", no_wrap=True)
    table.add_column("KV heads", justify="right", no_wrap=True)
    table.add_column("head", justify="right", no_wrap=True)
    table.add_column("attention", no_wrap=True)
    table.add_column("KV B/token", justify="right", no_wrap=True)
    table.add_column("state/seq", justify="right", no_wrap=True)
    for r in rows:
        table.add_row(
            r.name,
            str(r.num_layers),
            str(r.num_kv_heads),
            str(r.head_dim),
            r.attention_type,
            f"{r.kv_bytes_per_token:,}",
            fmt_bytes(r.state_bytes_per_sequence) if r.state_bytes_per_sequence else "—",
        )
    console().print(table)


def gpus(rows: list[Gpu], *, as_json: bool = False) -> None:
    if as_json:
        write_out(to_json([asdict(g) for g in rows]))
        return
    table = Table(title="GPU catalog — memory as the CUDA driver reports it")
    for col in ("name", "memory", "bytes", "bandwidth", "BF16 dense", "source"):
        table.add_column(col, justify="right" if col not in ("name", "source") else "left")
    for g in rows:
        bandwidth, flops = g.bandwidth_bytes_per_s, g.bf16_flops
        table.add_row(
            g.name,
            fmt_bytes(g.memory_bytes),
            f"{g.memory_bytes:,}",
            "—" if bandwidth is None else f"{bandwidth / 1e12:.2f} TB/s",
            "—" if flops is None else f"{flops / 1e12:,.0f} TFLOP/s",
            g.source,
        )
    console().print(table)
