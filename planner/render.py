"""Two views of every result: a rich table on stdout, or ``--json``. GiB/MiB appear only here."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from planner.memory import KVEstimate
from planner.models import ModelRow

if TYPE_CHECKING:  # annotations only: estimate need not import the simulator
    from planner.simulate import SettingRun, SimReport

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def console() -> Console:
    return Console(highlight=False)


def err_console() -> Console:
    return Console(stderr=True, highlight=False)


def fmt_bytes(n: int) -> str:
    """Binary units, named as such: ``16.00 GiB``, ``128.0 KiB``, ``576 B``."""
    if n >= GIB:
        return f"{n / GIB:,.2f} GiB"
    if n >= MIB:
        return f"{n / MIB:,.2f} MiB"
    if n >= KIB:
        return f"{n / KIB:,.1f} KiB"
    return f"{n:,} B"


def to_json(obj: Any) -> str:
    """Stable, indented JSON with integer bytes (dataclasses via ``asdict``)."""
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def estimate_dict(est: KVEstimate) -> dict[str, Any]:
    data = asdict(est)
    data["pp_layers"] = list(est.pp_layers)
    data["mha_savings"] = round(est.mha_savings, 4)
    return data


def warnings_(messages: list[str]) -> None:
    out = err_console()
    for message in messages:
        out.print(f"[yellow]Warning:[/] {message}", soft_wrap=True)


def estimate(est: KVEstimate, *, as_json: bool = False) -> None:
    """Print an estimate: header, per-kind table, totals, vLLM layout, batch examples."""
    warnings_(est.warnings)
    if as_json:
        console().file.write(to_json(estimate_dict(est)))
        return
    out = console()
    out.print(f"[bold]{est.model}[/]  ({est.source})")
    heads = (
        f"{est.num_attention_heads} heads / {est.num_kv_heads} KV heads"
        if est.num_attention_heads
        else "no attention"
    )
    out.print(
        f"{est.model_type} · {est.attention_type} · {est.num_layers} layers · {heads} · "
        f"head {est.head_dim} · weights {est.model_dtype}"
    )
    pp = (
        f" · PP {est.pipeline_parallel_size} (stage {est.pp_stage}: layers "
        f"{est.pp_layers[0]}–{est.pp_layers[1] - 1})"
        if est.pipeline_parallel_size > 1
        else ""
    )
    out.print(
        f"engine {est.engine} · TP {est.tensor_parallel_size}{pp} · KV dtype "
        f"{est.kv_cache_dtype} ({est.kv_dtype_bytes} B) · block {est.block_size} · "
        f"max_model_len {est.max_model_len:,}"
    )

    table = Table(title="Cache per GPU rank, by layer kind", title_justify="left")
    table.add_column("kind")
    table.add_column("layers", justify="right")
    table.add_column("window", justify="right")
    table.add_column("B/token/layer", justify="right")
    table.add_column("state/layer", justify="right")
    table.add_column("B/token", justify="right")
    for g in est.layer_groups:
        table.add_row(
            g.kind,
            str(g.num_layers),
            f"{g.window:,}" if g.window else "—",
            f"{g.bytes_per_token:,}" if g.bytes_per_token else "—",
            fmt_bytes(g.state_bytes_per_sequence) if g.state_bytes_per_sequence else "—",
            f"{g.bytes_per_token * g.num_layers:,}" if g.bytes_per_token else "—",
        )
    out.print(table)

    out.print(
        f"KV bytes per token:  {est.kv_bytes_per_token:,} B ({fmt_bytes(est.kv_bytes_per_token)})"
        + _savings(est)
    )
    if est.state_bytes_per_sequence:
        out.print(
            f"State per sequence:  {est.state_bytes_per_sequence:,} B "
            f"({fmt_bytes(est.state_bytes_per_sequence)}), independent of length"
        )
    out.print(
        f"KV per sequence at {est.max_model_len:,} tokens: {est.kv_bytes_per_sequence:,} B "
        f"({fmt_bytes(est.kv_bytes_per_sequence)}) with window caps and block rounding"
    )
    if est.request_bytes != est.kv_bytes_per_sequence:
        out.print(
            f"One request in all (KV + state pages): {est.request_bytes:,} B "
            f"({fmt_bytes(est.request_bytes)})"
        )
    if est.vllm is not None:
        _vllm_layout(out, est)

    examples = Table(title=f"KV for {est.max_model_len:,} tokens × batch", title_justify="left")
    examples.add_column("batch", justify="right")
    examples.add_column("tokens", justify="right")
    examples.add_column("KV + state (per rank)", justify="right")
    examples.add_column("bytes", justify="right")
    for ex in est.examples:
        examples.add_row(
            str(ex.batch), f"{ex.tokens:,}", fmt_bytes(ex.total_bytes), f"{ex.total_bytes:,}"
        )
    if est.examples:
        out.print(examples)
    for note in est.notes:
        out.print(f"[dim]note: {note}[/]", soft_wrap=True)
    out.print("[dim]Sizes in binary units (1 GiB = 2^30 bytes). --json gives every figure.[/]")


def _savings(est: KVEstimate) -> str:
    if not est.mha_bytes_per_token or est.mha_bytes_per_token == est.kv_bytes_per_token:
        return ""
    return (
        f"; {est.mha_savings:.1f}× smaller than MHA of the same width "
        f"({fmt_bytes(est.mha_bytes_per_token)}/token)"
    )


def _vllm_layout(out: Console, est: KVEstimate) -> None:
    layout = est.vllm
    assert layout is not None
    table = Table(title="vLLM KV-cache groups (one block table each)", title_justify="left")
    table.add_column("group", justify="right")
    table.add_column("kind")
    table.add_column("layers", justify="right")
    table.add_column("block", justify="right")
    table.add_column("page/layer", justify="right")
    table.add_column("blocks/request", justify="right")
    for i, g in enumerate(layout.groups):
        table.add_row(
            str(i),
            g.kind + (f" (W={g.window:,})" if g.window else ""),
            str(g.num_layers),
            str(g.block_size),
            fmt_bytes(g.page_size_bytes),
            f"{g.blocks_per_request:,}",
        )
    out.print(table)
    per_block = f"{fmt_bytes(layout.bytes_per_block)} per block ({layout.bytes_per_block:,} B)"
    out.print(
        f"vLLM: {per_block}, "
        f"{layout.blocks_per_request:,} blocks per {est.max_model_len:,}-token request; "
        f"max_num_batched_tokens {layout.max_num_batched_tokens:,} "
        f"({layout.max_in_flight_tokens:,} tokens in flight)"
    )


def models(rows: list[ModelRow], *, as_json: bool = False) -> None:
    if as_json:
        console().file.write(to_json([asdict(r) for r in rows]))
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


# --------------------------------------------------------------------------- simulate

SPARK = "▁▂▃▄▅▆▇█"


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


def simulate_dict(report: SimReport) -> dict[str, Any]:
    """The report as JSON-ready data (integer bytes; per-request finish steps left out)."""
    data = asdict(report)
    for run in data["runs"]:
        run["result"].pop("finish_steps", None)
        run["result"]["timeline"] = [list(p) for p in run["result"]["timeline"]]
    data["best_label"] = report.runs[report.best].label if report.best is not None else None
    return data


def simulate(report: SimReport, *, as_json: bool = False) -> None:
    """Print a simulation: one run in detail, or several side by side with the best marked."""
    warnings_(report.warnings)
    if as_json:
        console().file.write(to_json(simulate_dict(report)))
        return
    out = console()
    seed = f", seed {report.seed}" if report.seed is not None else ""
    out.print(
        f"[bold]{report.model}[/] on {report.gpu} (TP {report.tensor_parallel_size}) · workload "
        f"{report.workload} ({report.workload_source}: {report.requests:,} requests{seed})",
        soft_wrap=True,
    )
    out.print(f"KV pool: {report.pool}", soft_wrap=True)
    roof = report.roofline
    out.print(
        f"Times are a roofline model, not a measurement: {report.gpu} "
        f"{roof.bandwidth_bytes_per_s / 1e9:,.0f} GB/s, "
        f"{roof.flops_per_s / 1e12:,.0f} TFLOPS bf16; "
        f"{fmt_bytes(roof.weight_bytes)} of weights read per step "
        f"(~{report.params.active / 1e9:.1f} B active params).",
        soft_wrap=True,
    )
    if len(report.runs) == 1:
        _simulate_one(out, report.runs[0])
    else:
        _simulate_table(out, report)
    for note in report.notes:
        out.print(f"[dim]note: {note}[/]", soft_wrap=True)


def _simulate_one(out: Console, run: SettingRun) -> None:
    r = run.result
    out.print(
        f"KV cache      {run.num_gpu_blocks:,} blocks × {run.block_size} tokens "
        f"({fmt_bytes(run.bytes_per_block)} each) = {fmt_bytes(run.kv_cache_bytes)} · dtype "
        f"{run.kv_cache_dtype} · max_num_seqs {run.max_num_seqs:,} · max_num_batched_tokens "
        f"{run.max_num_batched_tokens:,} · prefix caching {'on' if run.prefix_caching else 'off'}",
        soft_wrap=True,
    )
    out.print(
        f"KV usage      p50 {r.usage_p50:.0%} · p90 {r.usage_p90:.0%} · max {r.usage_max:.0%} "
        f"({r.peak_blocks:,} of {r.usable_blocks:,} usable blocks)",
        soft_wrap=True,
    )
    out.print(f"over time     {sparkline(r.timeline)}  0 – {r.duration_s:,.1f} s")
    out.print(
        f"requests      {r.completed:,} completed · {r.rejected_too_long:,} rejected (too long) · "
        f"{r.preemptions:,} preemptions ({r.preempted_requests:,} requests, "
        f"{r.recomputed_tokens:,} tokens recomputed)",
        soft_wrap=True,
    )
    out.print(f"concurrency   mean {r.mean_concurrency:,.1f} · max {r.max_concurrency:,}")
    out.print(
        f"throughput    {r.output_tokens_per_s:,.0f} output tok/s · {r.total_tokens_per_s:,.0f} "
        f"total tok/s over {r.duration_s:,.1f} s ({r.steps:,} steps)"
    )
    out.print(
        f"TTFT          p50 {_ms(r.ttft_s.p50)} · p90 {_ms(r.ttft_s.p90)} · p99 {_ms(r.ttft_s.p99)}"
    )
    out.print(
        f"TPOT          p50 {_ms(r.tpot_s.p50)} · p90 {_ms(r.tpot_s.p90)} · p99 {_ms(r.tpot_s.p99)}"
    )
    out.print(f"fragmentation {r.fragmentation:.1%} of allocated token slots unused")
    if run.prefix_caching:
        out.print(
            f"prefix cache  {r.prefix_hit_rate:.1%} hit rate ({r.prefix_hit_tokens:,} of "
            f"{r.prefix_query_tokens:,} prompt tokens) · {r.prefix_blocks_saved:,} blocks reused",
            soft_wrap=True,
        )


def _simulate_table(out: Console, report: SimReport) -> None:
    """Metrics down, settings across: fits a terminal for the usual two to four settings."""
    single_axis = len(report.axes) == 1
    table = Table(title="Settings compared (times from the roofline model)", title_justify="left")
    table.add_column(report.axes[0] if single_axis else "setting", no_wrap=True)
    for i, run in enumerate(report.runs):
        name = run.values[report.axes[0]] if single_axis else run.label
        table.add_column(name + (" ★" if i == report.best else ""), justify="right")
    runs = [run.result for run in report.runs]

    def row(label: str, cells: list[str]) -> None:
        table.add_row(label, *cells)

    row("KV blocks", [f"{run.num_gpu_blocks:,}" for run in report.runs])
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
        out.print(f"[bold]★ {report.best_reason}[/]", soft_wrap=True)


def simulate_plot(report: SimReport, path: str) -> None:
    """Usage over time for every run, and the runs' throughput and preemptions, to ``path``
    (written to a temporary file, then renamed)."""
    import io

    from planner.errors import UsageError
    from planner.workload import write_atomic

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
            label=run.label,
        )
    ax1.set_xlabel("time (s, roofline model)")
    ax1.set_ylabel("KV cache usage (%)")
    ax1.set_ylim(0, 105)
    ax1.set_title(f"{report.model} · {report.workload} · {report.gpu}")
    if len(report.runs) > 1:
        ax1.legend(fontsize="small")
    labels = [run.label for run in report.runs]
    ax2.bar(range(len(labels)), [run.result.output_tokens_per_s for run in report.runs])
    ax2.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize="small")
    ax2.set_ylabel("output tokens/s (roofline)")
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
    write_atomic(path, buf.getvalue())
