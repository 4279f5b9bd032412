"""``kvplan simulate``: one run in detail or several side by side, and the ``--plot`` image."""

from __future__ import annotations

import io
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from planner.errors import UsageError, one_line
from planner.render._output import (
    console,
    outcome_words,
    print_wrapped,
    to_json,
    user_text,
    warnings_,
    write_out,
)
from planner.secrets import redact
from planner.units import fmt_bytes

if TYPE_CHECKING:
    from planner.simulate import SettingRun, SimReport


SPARK = "▁▂▃▄▅▆▇█"


_HANG = " " * 14  # under the value column of the one-run view


def sparkline(timeline: list[tuple[float, float]], width: int = 48) -> str:
    """Usage (0..1) over time as ``width`` block characters, each the peak of its time slice."""
    if not timeline:
        return ""
    end = timeline[-1][0] or 1.0
    cells: list[float | None] = [None] * width
    for t, u in timeline:
        i = min(width - 1, int(t / end * width))
        current = cells[i]
        cells[i] = u if current is None else max(current, u)
    out, last = [], 0.0
    for c in cells:
        last = last if c is None else c
        out.append(SPARK[min(len(SPARK) - 1, int(last * len(SPARK)))])
    return "".join(out)


def _ms(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:,.1f} ms"
    return f"{seconds:,.2f} s" if seconds < 10 else f"{seconds:,.0f} s"


def calibration_dict(profile: Any) -> dict[str, Any]:
    """A fitted :class:`planner.simulate.clock.Profile` as the report's ``calibration``."""
    return asdict(profile)


def simulate_dict(report: SimReport) -> dict[str, Any]:
    """The report as JSON-ready data (integer bytes; per-request finish steps left out)."""
    data = asdict(report)
    for run in data["runs"]:
        if run.get("refused") is None:  # vLLM takes the settings: the key is left out
            run.pop("refused", None)
        result = run["result"]
        for one in [result, *result.get("ranks", ())]:
            one.pop("finish_steps", None)
            one["timeline"] = [list(p) for p in one["timeline"]]
            if one.get("cpu_blocks"):  # the CPU tier's hit rates (properties) beside its hits
                q = one["prefix_query_tokens"]
                hits, cpu = one["prefix_hit_tokens"], one["cpu_hit_tokens"]
                one["gpu_hit_rate"] = (hits - cpu) / q if q else 0.0
                one["cpu_hit_rate"] = cpu / q if q else 0.0
            else:  # no CPU tier: its keys are left out
                one.pop("cpu_blocks", None)
                one.pop("cpu_hit_tokens", None)
        for one in result.get("ranks", ()):
            one.pop("ranks", None)
        if not result.get("ranks"):
            result.pop("ranks", None)  # one rank: nothing to add
    data["best_label"] = report.runs[report.best].label if report.best is not None else None
    return data


def simulate(report: SimReport, *, as_json: bool = False) -> None:
    """Print a simulation: one run in detail, or several side by side with the best marked."""
    warnings_(report.warnings)
    if as_json:
        write_out(to_json(simulate_dict(report)))
        return
    out = console()
    seed = f", seed {report.seed}" if report.seed is not None else ""
    print_wrapped(
        out,
        f"{one_line(report.model)} on {report.gpu} (TP {report.tensor_parallel_size}) · "
        f"workload {one_line(report.workload)} ({one_line(report.workload_source)}: "
        f"{report.requests:,} requests{seed})",
        style="bold",
    )
    print_wrapped(out, f"KV pool: {one_line(report.pool)}")
    roof = report.roofline
    if report.timing.startswith("step-time model"):
        eff = getattr(roof, "memory_efficiency", 1.0)
        comp = getattr(roof, "compute_efficiency", 1.0)
        terms = (
            f"{eff:.0%} of {roof.bandwidth_bytes_per_s / 1e9:,.0f} GB/s, "
            f"{comp:.0%} of {roof.flops_per_s / 1e12:,.0f} TFLOPS bf16, "
            f"{getattr(roof, 'overhead_s', 0.0) * 1e3:.2f} ms a step + "
            f"{getattr(roof, 'seq_overhead_s', 0.0) * 1e6:.0f} us a sequence, "
            f"+ {getattr(roof, 'layer_floor_s', 0.0) * 1e3:.2f} ms of small kernels"
        )
        if getattr(roof, "interconnect", ""):
            terms += f", TP all-reduces over {roof.interconnect}"  # type: ignore[attr-defined]
        if getattr(roof, "experts", 0):
            terms += ", routed experts read as tokens pick them"
        where = "fitted" if report.timing != "step-time model" else "defaults"
        print_wrapped(
            out,
            f"Times are a step-time model ({where}), not a measurement: {report.gpu} {terms}; "
            f"{fmt_bytes(roof.weight_bytes)} of weights per rank "
            f"(~{report.params.active / 1e9:.1f} B active params).",
        )
        if report.expected_error:
            e = report.expected_error
            print_wrapped(
                out,
                f"Expected error against real vLLM runs: output tok/s "
                f"±{e.get('output_throughput', 0):.0%}, TPOT ±{e.get('tpot', 0):.0%}, TTFT "
                f"±{e.get('ttft', 0):.0%} (held-out public benchmarks; fit yours with "
                "--calibrate RESULT.json).",
            )
    else:
        print_wrapped(
            out,
            f"Times are {one_line(report.timing)} by tokens per step: interpolated linearly "
            "between rows, extrapolated from the last two.",
        )
    cal = report.calibration
    if cal:
        fit = cal.get("fit", {})
        shown = " · ".join(f"{k} {v:.2f}" for k, v in fit.items())
        on = cal.get("fitted_on", {})
        print_wrapped(
            out,
            f"Calibrated on {user_text(str(on.get('result', '')))}: decode x"
            f"{on.get('decode_multiplier', 1):.2f}, prefill x{on.get('prefill_multiplier', 1):.2f}"
            f" of the defaults; predicted / measured after the fit: {shown}.",
        )
    if len(report.runs) == 1:
        _simulate_one(out, report.runs[0])
    else:
        _simulate_table(out, report)
    for note in report.notes:
        print_wrapped(out, f"note: {one_line(note)}", style="dim")


def _simulate_one(out: Console, run: SettingRun) -> None:
    r = run.result
    dp = len(r.ranks) if r.ranks else 1
    if dp > 1:
        print_wrapped(
            out,
            f"{f'DP {dp}':13} {dp} engines, each with the pool and max_num_seqs below; requests "
            "dispatched as vLLM's load balancer does; usage and max concurrency are the fullest "
            "rank's, counts and throughput the cluster's",
            hang=_HANG,
        )
    print_wrapped(
        out,
        f"KV cache      {run.num_gpu_blocks:,} blocks × {run.block_size} tokens "
        f"({fmt_bytes(run.bytes_per_block)} each) = {fmt_bytes(run.kv_cache_bytes)} · dtype "
        f"{run.kv_cache_dtype} · max_num_seqs {run.max_num_seqs:,} · max_num_batched_tokens "
        f"{run.max_num_batched_tokens:,} · prefix caching {'on' if run.prefix_caching else 'off'}",
        hang=_HANG,
    )
    worst = outcome_words(run.outcome, run.worst_case_running, run.max_num_seqs, run.max_model_len)
    print_wrapped(out, f"worst case    {worst}", hang=_HANG)
    print_wrapped(
        out,
        f"KV usage      p50 {r.usage_p50:.0%} · p90 {r.usage_p90:.0%} · max {r.usage_max:.0%} "
        f"({r.peak_blocks:,} of {r.usable_blocks:,} usable blocks)",
        hang=_HANG,
    )
    out.print(f"over time     {sparkline(r.timeline)}  0 – {r.duration_s:,.1f} s")
    print_wrapped(
        out,
        f"requests      {r.completed:,} completed · {r.rejected_too_long:,} rejected (too long) · "
        f"{r.preemptions:,} preemptions ({r.preempted_requests:,} requests, "
        f"{r.recomputed_tokens:,} tokens recomputed)",
        hang=_HANG,
    )
    if dp > 1:
        out.print(
            f"concurrency   mean {r.mean_concurrency:,.1f} over {dp} ranks · max "
            f"{r.max_concurrency:,} on one rank"
        )
    else:
        out.print(f"concurrency   mean {r.mean_concurrency:,.1f} · max {r.max_concurrency:,}")
    out.print(
        f"throughput    {r.output_tokens_per_s:,.0f} output tok/s · {r.total_tokens_per_s:,.0f} "
        f"total tok/s over {r.duration_s:,.1f} s ({r.steps:,} steps)"
    )
    b = r.bench
    if b is not None:
        print_wrapped(
            out,
            f"requests/s    {b.request_throughput:,.2f} · output {b.output_throughput:,.0f} "
            f"tok/s · total {b.total_token_throughput:,.0f} tok/s (vllm bench serve's)",
            hang=" " * 14,
        )
        for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2el")):
            mean, median, p99 = (
                getattr(b, f"{q}_{key}_ms") / 1000 for q in ("mean", "median", "p99")
            )
            out.print(f"{name:<13} mean {_ms(mean)} · median {_ms(median)} · p99 {_ms(p99)}")
    else:  # a result built by hand
        for name, p in (("TTFT", r.ttft_s), ("TPOT", r.tpot_s)):
            out.print(f"{name:<13} p50 {_ms(p.p50)} · p90 {_ms(p.p90)} · p99 {_ms(p.p99)}")
    out.print(f"fragmentation {r.fragmentation:.1%} of allocated token slots unused")
    if run.prefix_caching:
        print_wrapped(
            out,
            f"prefix cache  {r.prefix_hit_rate:.1%} hit rate ({r.prefix_hit_tokens:,} of "
            f"{r.prefix_query_tokens:,} prompt tokens) · {r.prefix_blocks_saved:,} blocks reused",
            hang=_HANG,
        )
        if r.cpu_blocks:
            print_wrapped(
                out,
                f"CPU KV tier   {r.cpu_blocks:,} blocks · hits GPU {r.gpu_hit_rate:.1%} · CPU "
                f"{r.cpu_hit_rate:.1%} ({r.cpu_hit_tokens:,} tokens loaded)",
                hang=_HANG,
            )


def _simulate_table(out: Console, report: SimReport) -> None:
    """Metrics down, settings across: fits a terminal for the usual two to four settings."""
    single_axis = len(report.axes) == 1
    title = f"Settings compared (times from the {_timing_short(report)})"
    table = Table(title=title, title_justify="left")
    table.add_column(report.axes[0] if single_axis else "setting", no_wrap=True)
    for i, run in enumerate(report.runs):
        name = run.values[report.axes[0]] if single_axis else run.label
        mark = " ★" if i == report.best else " ✗" if run.refused else ""
        table.add_column(name + mark, justify="right")
    runs = [run.result for run in report.runs]

    def row(label: str, cells: list[str]) -> None:
        table.add_row(label, *cells)

    row("KV blocks", [f"{run.num_gpu_blocks:,}" for run in report.runs])
    row(
        "worst case",
        [
            outcome_words(run.outcome, run.worst_case_running, run.max_num_seqs, short=True)
            for run in report.runs
        ],
    )
    row("KV usage p50", [f"{r.usage_p50:.0%}" for r in runs])
    row("KV usage p90", [f"{r.usage_p90:.0%}" for r in runs])
    row("KV usage max", [f"{r.usage_max:.0%}" for r in runs])
    row("peak blocks", [f"{r.peak_blocks:,}" for r in runs])
    row("usage over time", [sparkline(r.timeline, 16) for r in runs])
    row("preemptions", [f"{r.preemptions:,}" for r in runs])
    row("concurrency mean", [f"{r.mean_concurrency:,.1f}" for r in runs])
    row("completed", [f"{r.completed:,}" for r in runs])
    row("output tok/s", [f"{r.output_tokens_per_s:,.0f}" for r in runs])
    row("TTFT p50 / p90", [f"{_ms(r.ttft_s.p50)} / {_ms(r.ttft_s.p90)}" for r in runs])
    row("TPOT p50 / p90", [f"{_ms(r.tpot_s.p50)} / {_ms(r.tpot_s.p90)}" for r in runs])
    row("fragmentation", [f"{r.fragmentation:.1%}" for r in runs])
    row(
        "prefix hit rate",
        [
            f"{run.result.prefix_hit_rate:.1%}" if run.prefix_caching else "off"
            for run in report.runs
        ],
    )
    row("blocks reused", [f"{r.prefix_blocks_saved:,}" for r in runs])
    out.print(table)
    if report.best is not None:
        print_wrapped(out, f"★ {one_line(report.best_reason)}", style="bold")


def _timing_short(report: SimReport) -> str:
    return "step-time model" if report.timing.startswith("step-time") else "measured step times"


def simulate_plot(report: SimReport, path: str) -> bytes:
    """Usage over time for every run, and the runs' throughput and preemptions, as the bytes of
    an image in the format ``path``'s suffix names (PNG by default)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'kvplan[plot]'") from None

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    for run in report.runs:
        tl = run.result.timeline
        ax1.step(
            [0.0] + [t for t, _ in tl],
            [0.0] + [u * 100 for _, u in tl],
            where="pre",
            label=redact(run.label),
        )
    ax1.set_xlabel(f"time (s, {_timing_short(report)})")
    ax1.set_ylabel("KV cache usage (%)")
    ax1.set_ylim(0, 105)
    ax1.set_title(redact(f"{report.model} · {report.workload} · {report.gpu}"))
    if len(report.runs) > 1:
        ax1.legend(fontsize="small")
    labels = [redact(run.label) for run in report.runs]
    ax2.bar(range(len(labels)), [run.result.output_tokens_per_s for run in report.runs])
    ax2.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize="small")
    ax2.set_ylabel(f"output tokens/s ({_timing_short(report)})")
    for i, run in enumerate(report.runs):
        ax2.annotate(
            f"{run.result.preemptions:,} preempt.",
            (i, run.result.output_tokens_per_s),
            ha="center",
            va="bottom",
            fontsize="x-small",
        )
    fig.tight_layout()
    buf = io.BytesIO()
    fmt = path.rsplit(".", 1)[-1].lower() if "." in path else "png"
    try:
        fig.savefig(buf, format=fmt, dpi=110)
    except ValueError as exc:
        raise UsageError(f"--plot {path}: {exc}") from None
    finally:
        plt.close(fig)
    return buf.getvalue()
