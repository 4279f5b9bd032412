"""``kvplan diagnose --metrics``: a running server's figures per DP rank and for the cluster,
the pool against the plan, and the findings in the log diagnosis' words."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

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

MARK = {"info": "·", "warning": "!", "error": "✗"}


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f} %"


def _secs(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x * 1000:,.0f} ms" if x < 1 else f"{x:,.2f} s"


def _n(x: float | None) -> str:
    return "—" if x is None else f"{round(x):,}"


def _quantile_text(q: dict[str, Any] | None, show: Any) -> str:
    if q is None:
        return ""
    p99 = ("≥ " if q["p99_capped"] else "") + show(q["p99"])
    return f"p50 {show(q['p50'])}, p90 {show(q['p90'])}, p99 {p99} ({q['count']:,})"


def _per(d: dict[str, Any]) -> str:
    """The preemption rate in words: "37 preemptions (37.0 per 1,000 requests, 0.12/s)"."""
    pre = d.get("preemptions")
    if pre is None:
        return "preemptions not exported"
    rates = []
    if d.get("preemptions_per_1k_requests") is not None:
        rates.append(f"{d['preemptions_per_1k_requests']:,.1f} per 1,000 requests")
    if d.get("preemptions_per_s") is not None:
        rates.append(f"{d['preemptions_per_s']:,.3g}/s")
    return f"{pre:,} preemptions" + (f" ({', '.join(rates)})" if rates else "")


def finding_text(f: Finding) -> str:
    """One finding as a sentence with its numbers; the kinds a log diagnosis also has are
    worded for scrapes, the plan's (budget, matches) as :mod:`planner.render.diagnose` words
    them."""
    d = f.data
    scrapes = f"{d.get('samples', 0)} scrape{'s' if d.get('samples', 0) != 1 else ''}"
    if f.kind == "kv-usage":
        where = {
            "above": "above the 80–90 % target",
            "on-target": "on the 80–90 % target",
            "below": "below the 80–90 % target",
        }[d["band"]]
        return (
            f"KV cache usage p50 {_pct(d['p50_pct'])}, p90 {_pct(d['p90_pct'])}, max "
            f"{_pct(d['max_pct'])} over {scrapes}: {where}."
        )
    if f.kind == "kv-pinned":
        return (
            f"KV usage at the top: p90 {_pct(d['p90_pct'])}, peak {_pct(d['peak_pct'])} over "
            f"{scrapes}, {_per(d)}, up to {d['max_waiting']:,} requests waiting: "
            + (
                "requests queue and are preempted."
                if d["preemptions"]
                else "requests queue for blocks."
            )
        )
    if f.kind == "kv-low":
        return (
            f"KV usage never above {d['peak_pct']:.1f} % in {scrapes}: the cache is larger "
            "than the load needs."
        )
    if f.kind == "starved-max-num-seqs":
        source = {"observed": " (as observed)", "plan": " (vLLM's default)"}.get(
            d["max_num_seqs_source"], ""
        )
        return (
            f"Starved by max_num_seqs: up to {d['waiting_max']:,} requests wait in "
            f"{d['waiting_scrapes']} of {d['scrapes']} scrape(s) while "
            f"{_n(d['running_max_while_waiting'])} run, the limit of max_num_seqs "
            f"{d['max_num_seqs']:,}{source}, with KV at "
            f"{_pct(d['kv_usage_max_pct_while_waiting'])}: the pool has room for more."
        )
    if f.kind == "starved-token-budget":
        return (
            f"Requests wait with room in the pool: up to {d['waiting_max']:,} waiting in "
            f"{d['waiting_scrapes']} of {d['scrapes']} scrape(s), "
            f"{_n(d['running_max_while_waiting'])} running"
            + (f" of max_num_seqs {d['max_num_seqs']:,}" if d["max_num_seqs"] else "")
            + f", KV at {_pct(d['kv_usage_max_pct_while_waiting'])}: the per-step token "
            "budget admits them slowly"
            + (
                ""
                if d["max_num_seqs"]
                else " (or max_num_seqs, unknown here: pass --max-num-seqs or --gpu)"
            )
            + "."
        )
    if f.kind == "prefix-low-hit":
        return (
            f"Prefix cache hit rate {d['mean_hit_pct']:.1f} % over {scrapes}: requests share "
            "little; with a shared system prompt, high TTFT follows."
        )
    if f.kind == "prefix-off":
        return (
            "Prefix caching is off (cache_config_info): requests that share a system prompt "
            "recompute it, which shows as high TTFT."
        )
    if f.kind == "latency":
        parts = []
        for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("queue_s", "queue")):
            text = _quantile_text(d[key], _secs)
            if text:
                parts.append(f"{label} {text}")
        return "Latency: " + "; ".join(parts) + "."
    if f.kind == "lengths":
        parts = []
        for key, label in (("prompt", "prompt"), ("output", "output")):
            q = d[key]
            if q is not None:
                mean = f", mean {q['mean']:,.0f}" if q["mean"] is not None else ""
                parts.append(f"{label} {_quantile_text(q, _n)}{mean}")
        return "Request lengths (tokens): " + "; ".join(parts) + "."
    from planner.render.diagnose import finding_text as log_text

    # the plan's checks, worded for a scrape: it states blocks, not the budget's terms
    return (
        log_text(f)
        .replace("The log does not state", "The scrape does not state")
        .replace("(DEBUG logging prints the breakdown)", "(the boot log states them)")
    )


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
                Column("server", [_n(t.log) for t in dg.terms], right=True),
                Column("plan", [_n(t.plan) for t in dg.terms], right=True),
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
        Column("KV p50", [_pct(r.kv_usage_p50_pct) for r in ranks], right=True),
        Column("KV p90", [_pct(r.kv_usage_p90_pct) for r in ranks], right=True),
        Column("KV max", [_pct(r.kv_usage_max_pct) for r in ranks], right=True),
        Column("running", [_n(r.running_max) for r in ranks], right=True),
        Column("waiting", [_n(r.waiting_max) for r in ranks], right=True),
        Column("preempt", [_n(r.preemptions) for r in ranks], right=True),
        Column("prefix hit", [_pct(r.prefix_hit_pct) for r in ranks], right=True),
        Column("TTFT p90", [_secs(r.ttft.p90 if r.ttft else None) for r in ranks], right=True),
        Column("TPOT p90", [_secs(r.tpot.p90 if r.tpot else None) for r in ranks], right=True),
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
