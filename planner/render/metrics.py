"""``kvplan diagnose --metrics``: a running server's figures per DP rank and for the cluster,
the pool against the plan, and the findings in the log diagnosis' words."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from planner.diagnose.kinds import (
    count_text,
    pct_text,
    secs_text,
)
from planner.diagnose.kinds import finding_text as log_finding_text
from planner.errors import one_line
from planner.render._output import (
    Column,
    console,
    fitted_table,
    outcome_words,
    to_json,
    wrap_line,
    write_out,
)
from planner.units import fmt_bytes

if TYPE_CHECKING:
    from planner.diagnose import Finding
    from planner.diagnose.metrics import MetricsDiagnosis
    from planner.diagnose.metrics.series import Quantiles, RankMetrics


def finding_text(f: Finding) -> str:
    """One finding as a sentence with its numbers, worded for scrapes (its kind's text:
    :mod:`planner.diagnose.kinds`)."""
    return log_finding_text(f, "scrape")


MARK = {"info": "·", "warning": "!", "error": "✗"}


def _quantiles_dict(q: Quantiles | None) -> dict[str, Any] | None:
    return None if q is None else asdict(q)


def _buckets(b: dict[float, float]) -> list[list[Any]]:
    """Cumulative buckets as ``[[le, count], ...]`` (``le`` as Prometheus writes it)."""
    return [["+Inf" if k == math.inf else repr(k), v] for k, v in sorted(b.items())]


def rank_dict(r: RankMetrics) -> dict[str, Any]:
    data = asdict(r)
    for key in ("ttft", "tpot", "e2e", "queue", "prompt", "output"):
        data[key] = _quantiles_dict(getattr(r, key))
    data["prompt_buckets"] = _buckets(r.prompt_buckets)
    data["output_buckets"] = _buckets(r.output_buckets)
    for finding, f in zip(data["findings"], r.findings, strict=True):
        finding["text"] = finding_text(f)
    return data


def metrics_dict(dg: MetricsDiagnosis) -> dict[str, Any]:
    """JSON of ``kvplan diagnose --metrics``."""
    data = asdict(dg)
    data["ranks"] = [rank_dict(r) for r in dg.ranks]
    data["cluster"] = rank_dict(dg.cluster)
    for term, t in zip(data["terms"], dg.terms, strict=True):
        term["diff"] = t.diff
    for finding, f in zip(data["findings"], dg.findings, strict=True):
        finding["text"] = finding_text(f)
    return data


def lines(dg: MetricsDiagnosis, width: int = 80) -> list[str]:
    """The report as plain lines (what the console prints, and ``--watch`` redraws)."""
    out: list[str] = []
    scrapes = f"{dg.scrapes} scrape{'s' if dg.scrapes != 1 else ''}"
    window = f" over {dg.window_s:,.0f} s" if dg.window_s else ""
    names = {"v0": "V0 names", "unknown": "names unknown"}.get(dg.names, f"vllm:{dg.names}")
    engines = len(dg.ranks)
    out.append(
        f"{one_line(dg.source)}: vLLM metrics ({names}), {scrapes}{window}, "
        f"{engines} engine{'s' if engines != 1 else ''}"
        + (f", model {one_line(dg.model)}" if dg.model else "")
    )
    if dg.settings and dg.terms:
        parts = []
        for key, value in dg.settings.items():
            shown = fmt_bytes(value) if key == "gpu_memory_bytes" else value
            where = dg.sources.get(key, "")
            parts.append(f"{key} {shown}" + (f" ({where})" if where else ""))
        out.append("Plan settings: " + " · ".join(parts))
    if dg.outcome is not None:
        words = outcome_words(dg.outcome, dg.worst_case_running, dg.max_num_seqs, dg.max_model_len)
        each = f", each of {engines} DP ranks" if engines > 1 else ""
        mark = "✗" if dg.outcome == "wont_start" else "✓"
        reason = (
            f": {dg.outcome_reason}" if dg.outcome == "wont_start" and dg.outcome_reason else ""
        )
        out.append(f"{mark} Verdict (the plan for these settings{each}): {words}{reason}")
    if dg.terms:
        rows, _ = fitted_table(
            [
                Column("pool, per DP rank", [t.name for t in dg.terms], identifier=True),
                Column("server", [count_text(t.log) for t in dg.terms], right=True),
                Column("plan", [count_text(t.plan) for t in dg.terms], right=True),
                Column(
                    "server − plan",
                    [f"{t.diff:+,.0f}" if t.diff is not None else "" for t in dg.terms],
                    right=True,
                ),
            ],
            width,
        )
        out += rows
    ranks = [*dg.ranks, dg.cluster] if engines > 1 else [dg.cluster]
    columns = [
        Column("rank", [r.engine for r in ranks], identifier=True),
        Column("KV p50", [pct_text(r.kv_usage_p50_pct) for r in ranks], right=True),
        Column("KV p90", [pct_text(r.kv_usage_p90_pct) for r in ranks], right=True),
        Column("KV max", [pct_text(r.kv_usage_max_pct) for r in ranks], right=True),
        Column("running", [count_text(r.running_max) for r in ranks], right=True),
        Column("waiting", [count_text(r.waiting_max) for r in ranks], right=True),
        Column("preempt", [count_text(r.preemptions) for r in ranks], right=True),
        Column("prefix hit", [pct_text(r.prefix_hit_pct) for r in ranks], right=True),
        Column("TTFT p90", [secs_text(r.ttft.p90 if r.ttft else None) for r in ranks], right=True),
        Column("TPOT p90", [secs_text(r.tpot.p90 if r.tpot else None) for r in ranks], right=True),
    ]
    rows, dropped = fitted_table(columns, width)
    out.append(
        "Per DP rank and the cluster (running, waiting: the most in a scrape)"
        if engines > 1
        else "The server (running, waiting: the most in a scrape)"
    )
    out += rows
    if dropped:
        out.append(f"not shown at this width: {', '.join(dropped)}; --json has every field.")
    for note in dg.notes:
        out.append(f"note: {one_line(note)}")
    shown = [*dg.findings, *dg.cluster.findings]
    if shown:
        out.append("Findings" + (" (the cluster):" if engines > 1 else ":"))
    out += _finding_lines(shown)
    if engines > 1:
        for r in dg.ranks:
            own = [f for f in r.findings if f.severity != "info"]
            if own:
                out.append(f"Findings, DP rank {r.engine}:")
                out += _finding_lines(own)
    return [part for line in out for part in wrap_line(line, width)]  # every word whole


def _finding_lines(findings: list[Finding]) -> list[str]:
    out = []
    for f in findings:
        out.append(f"  {MARK[f.severity]} {finding_text(f)}")
        out += [f"      → {fix}" for fix in f.fix]
        out += [f"      note: {caveat}" for caveat in f.caveats]
    return out


def diagnose_metrics(dg: MetricsDiagnosis, *, as_json: bool = False) -> None:
    """Print ``kvplan diagnose --metrics``."""
    if as_json:
        write_out(to_json(metrics_dict(dg)))
        return
    out = console()
    for line in lines(dg, out.width):
        out.print(line, markup=False, soft_wrap=True, highlight=False)


def live_view(dg: MetricsDiagnosis, width: int) -> Any:
    """The report as one renderable for ``rich.live.Live``."""
    from rich.text import Text

    return Text("\n".join(lines(dg, width)))
