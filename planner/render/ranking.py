"""``kvplan estimate MODEL --gpu any``: the GPUs that meet the requirement, cheapest first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.ranking import SHOWN
from planner.ranking import as_json as ranking_json
from planner.render._output import Column, console, print_fitted, to_json, user_text, write_out
from planner.render.estimate import wrap_command

if TYPE_CHECKING:
    from planner.ranking import Ranking


def ranking(r: Ranking, *, as_json: bool = False) -> None:
    if as_json:
        write_out(to_json({"gpu_ranking": ranking_json(r)}))
        return
    out = console()
    need = (
        f"{r.concurrency:,} requests of {r.max_model_len:,} tokens at once"
        if r.max_model_len
        else f"{r.concurrency:,} requests at once"
    )
    out.print(f"{user_text(r.model)}: GPUs that run {need}", markup=False)
    if not r.rows:
        out.print(
            f"none of {r.planned:,} GPU x count x layout plans meets it (up to 8 GPUs)",
            markup=False,
        )
        return

    rows = r.rows[:SHOWN]
    columns = [
        Column("GPU", [c.gpu for c in rows], identifier=True),
        Column("count", [str(c.gpus) for c in rows], right=True),
        Column("layout", [_layout(c.tp, c.dp, c.expert_parallel) for c in rows], identifier=True),
        Column("$/hour", [f"{c.usd_per_hour:,.2f}" for c in rows], right=True),
        Column("$/M out", [_money(c.usd_per_million_output_tokens) for c in rows], right=True),
        Column("out tok/s", [f"{c.output_tokens_per_s:,.0f}" for c in rows], right=True),
        Column("at once", [f"{c.worst_case_running:,}" for c in rows], right=True),
        Column("KV tokens", [f"{c.kv_cache_size_tokens:,}" for c in rows], right=True),
    ]
    cheapest = min(r.rows, key=lambda c: c.usd_per_million_output_tokens or float("inf"))
    print_fitted(
        out,
        f"Cheapest first ({r.met:,} of {r.planned:,} plans meet it; best layout per GPU x count)",
        columns,
        (f"{len(r.rows) - len(rows):,} more rows in --json" if len(r.rows) > len(rows) else ""),
    )
    out.print(
        f"per token: {cheapest.gpu} x{cheapest.gpus} "
        f"({_layout(cheapest.tp, cheapest.dp, cheapest.expert_parallel)}) "
        f"at ${_money(cheapest.usd_per_million_output_tokens)} per million output tokens",
        markup=False,
    )

    for line in wrap_command(cheapest.command, out.width - 2):
        out.print(f"  {line}", markup=False, soft_wrap=True)
    sources = "; ".join(r.prices.sources) or r.prices.source
    out.print(
        f"$/M out: {user_text(r.workload)} replayed at saturation on each GPU's roofline. "
        f"Prices ({r.prices.date}): {user_text(sources)}; --prices FILE for yours.",
        markup=False,
    )


def _layout(tp: int, dp: int, ep: bool) -> str:
    text = f"TP {tp}" + (f" x DP {dp}" if dp > 1 else "")
    return text + (" + EP" if ep else "")


def _money(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.2f}" if v >= 1 else f"{v:.3f}"
