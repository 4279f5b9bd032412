"""Two views of every result: a rich table on stdout, or ``--json``. GiB/MiB appear only here."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.errors import one_line
from planner.gpus import GPU
from planner.memory import KVEstimate
from planner.models import ModelRow
from planner.recommend import Plan, Report
from planner.secrets import RedactingStream
from planner.units import GIB, fmt_bytes

if TYPE_CHECKING:  # only for annotations: estimate need not import the check/diagnose parsers
    from planner.diagnose import Diagnosis, Finding
    from planner.plans import Check, CheckReport, DeploymentResult
    from planner.simulate import SettingRun, SimReport


def _user(text: object) -> str:
    """Text that came from the user's files or flags, safe to print: one line without control
    characters (:func:`planner.errors.one_line`), and rich markup in it shown, not applied."""
    return escape(one_line(str(text)))


def console() -> Console:
    """stdout, with any Hugging Face token redacted (:mod:`planner.secrets`)."""
    return Console(file=RedactingStream(sys.stdout), highlight=False)  # type: ignore[arg-type]


def err_console() -> Console:
    """stderr for warnings and `Error:` lines, redacted like :func:`console`."""
    return Console(file=RedactingStream(sys.stderr), highlight=False)  # type: ignore[arg-type]


def to_json(obj: Any) -> str:
    """Stable, indented JSON with integer bytes (dataclasses via ``asdict``). Non-finite floats
    become ``null``: ``NaN`` and ``Infinity`` are not JSON, and jq and browsers reject them."""
    return json.dumps(_finite(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def estimate_dict(est: KVEstimate) -> dict[str, Any]:
    data = asdict(est)
    data["pp_layers"] = list(est.pp_layers)
    data["mha_savings"] = round(est.mha_savings, 4)
    return data


def warnings_(messages: list[str]) -> None:
    out = err_console()
    for message in messages:
        out.print(f"[yellow]Warning:[/] {_user(message)}", soft_wrap=True)


def estimate(est: KVEstimate, *, as_json: bool = False) -> None:
    """Print an estimate: header, per-kind table, totals, vLLM layout, batch examples."""
    warnings_(est.warnings)
    if as_json:
        console().file.write(to_json(estimate_dict(est)))
        return
    out = console()
    out.print(f"[bold]{_user(est.model)}[/]  ({_user(est.source)})")
    heads = (
        f"{est.num_attention_heads} heads / {est.num_kv_heads} KV heads"
        if est.num_attention_heads
        else "no attention"
    )
    out.print(
        f"{_user(est.model_type)} · {est.attention_type} · {est.num_layers} layers · {heads} · "
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
        out.print(f"[dim]note: {_user(note)}[/]", soft_wrap=True)
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


# --------------------------------------------------------------------------- plans


def report_dict(rep: Report) -> dict[str, Any]:
    """The JSON of ``kvplan estimate``: the estimate's keys, plus the plan's when a GPU is set."""
    data = estimate_dict(rep.estimate)
    if rep.gpu_table:
        data["gpus"] = [asdict(r) for r in rep.gpu_table]
    p = rep.plan
    if p is None:
        return data
    cap = p.vllm
    data.update(
        gpu={"name": p.gpu.name, "memory_bytes": p.gpu.memory_bytes, "source": p.gpu.source},
        gpu_memory_utilization=cap.gpu_memory_utilization,
        requested_bytes=cap.requested_bytes,
        weights_bytes=p.weights.bytes_per_rank,
        weights_total_bytes=p.weights.total_bytes,
        weights_source=p.weights.source,
        parameter_count=p.weights.parameter_count,
        activation_peak_bytes=cap.activation_peak_bytes,
        non_torch_bytes=cap.non_torch_bytes,
        cuda_graph_bytes=cap.cuda_graph_bytes,
        headroom_bytes=cap.headroom_bytes,
        available_kv_bytes=cap.available_kv_bytes,
        num_gpu_blocks=cap.num_gpu_blocks,
        kv_cache_size_tokens=cap.kv_cache_size_tokens,
        max_concurrency=round(cap.max_concurrency, 4),
        estimated_max_model_len=cap.estimated_max_model_len,
        fits=cap.fits,
        error=cap.error,
        mamba_max_num_seqs=cap.mamba_max_num_seqs,
        vllm_log=cap.log_lines,
        recommended=asdict(p.recommended) if p.recommended else None,
        grid=[asdict(c) for c in p.grid],
        alternatives=[asdict(a) for a in p.alternatives],
        engines=[asdict(e) for e in p.engines],
        block_sizes=[asdict(b) for b in p.block_sizes],
        prefix_sharing=asdict(p.prefix_sharing) if p.prefix_sharing else None,
        naive_vs_paged=asdict(p.naive_vs_paged),
        commands=p.commands,
        plan_notes=p.notes,
        estimates_note=(
            "weights are exact only from safetensors headers; activation, non-torch and "
            "CUDA-graph terms are estimates calibrated on measured vLLM startups — "
            "`kvplan verify --gpu` measures them"
        ),
    )
    return data


def report(rep: Report, *, as_json: bool = False, show_grid: bool = False) -> None:
    """Print ``kvplan estimate``: the KV estimate, then the plan or the GPU table."""
    if as_json:
        warnings_(rep.estimate.warnings)
        console().file.write(to_json(report_dict(rep)))
        return
    estimate(rep.estimate)
    if rep.gpu_table:
        _gpu_table(rep)
    if rep.plan is not None:
        _plan(rep.plan, show_grid)


def _gpu_table(rep: Report) -> None:
    est = rep.estimate
    out = console()
    table = Table(
        title=f"vLLM on common GPUs (TP {est.tensor_parallel_size}, gpu_memory_utilization "
        f"default, max_model_len {est.max_model_len:,}) — name one with --gpu",
        title_justify="left",
    )
    for col in ("GPU", "memory", "weights", "KV available", "KV tokens", "concurrency"):
        table.add_column(col, justify="left" if col == "GPU" else "right", no_wrap=True)
    for r in rep.gpu_table:
        table.add_row(
            r.name,
            fmt_bytes(r.memory_bytes),
            fmt_bytes(r.weights_bytes),
            fmt_bytes(r.available_kv_bytes) if r.available_kv_bytes > 0 else "none",
            f"{r.kv_cache_size_tokens:,}" if r.fits else "does not fit",
            f"{r.max_concurrency:.2f}x" if r.fits else "—",
        )
    out.print(table)


BAR_CHARS = {
    "weights": "█",
    "activation": "▓",
    "overhead": "▒",
    "KV cache": "░",
    "not requested": "·",
}


def _bar(parts: list[tuple[str, int]], total: int, width: int = 64) -> str:
    """A memory bar readable without colour: one character per segment kind. It never grows
    past ``width``: parts that add up to more than ``total`` (a budget overrun) are cut."""
    out, used = [], 0
    for label, size in parts:
        share = (2 * width * max(size, 0) + total) // (2 * total) if total > 0 else 0  # rounded
        n = min(share, width - used)
        out.append(BAR_CHARS[label] * n)
        used += n
    return "".join(out)


def _plan(p: Plan, show_grid: bool) -> None:
    out = console()
    cap = p.vllm
    out.print()
    if p.gpu.memory_bytes:
        out.print(
            f"[bold]vLLM on {p.gpu.name}[/] — {fmt_bytes(p.gpu.memory_bytes)} as the driver "
            f"reports it; gpu_memory_utilization {cap.gpu_memory_utilization} → "
            f"{fmt_bytes(cap.requested_bytes)} requested"
        )
        free = p.gpu.memory_bytes - cap.requested_bytes
        parts = [
            ("weights", cap.weights_bytes),
            ("activation", cap.activation_peak_bytes),
            ("overhead", cap.non_torch_bytes + cap.cuda_graph_bytes + cap.headroom_bytes),
            ("KV cache", max(cap.available_kv_bytes, 0)),
            ("not requested", free),
        ]
        out.print("  [" + _bar(parts, p.gpu.memory_bytes) + "]", markup=False)
        out.print("   " + "  ".join(f"{c} {label}" for label, c in BAR_CHARS.items()), markup=False)
        legend = Table(box=None, show_header=False, pad_edge=False)
        legend.add_column()
        legend.add_column(justify="right")
        legend.add_column()
        rows = [
            ("weights", cap.weights_bytes, f"{p.weights.source}: {p.weights.detail}"),
            (
                "activation peak",
                cap.activation_peak_bytes,
                f"estimate, profile run of {cap.max_num_batched_tokens:,} tokens",
            ),
            ("non-torch", cap.non_torch_bytes, "estimate (cuBLAS/NCCL)"),
            (
                "CUDA graphs",
                cap.cuda_graph_bytes,
                "estimate (--cuda-graph-memory, --enforce-eager)",
            ),
        ]
        if cap.headroom_bytes:
            rows.append(("headroom", cap.headroom_bytes, "--headroom"))
        rows.append(("KV cache", cap.available_kv_bytes, "what is left for blocks"))
        for label, size, why in rows:
            legend.add_row(f"  {label}", fmt_bytes(size), f"[dim]{_user(why)}[/]")
        out.print(legend)
    else:
        out.print(f"[bold]vLLM with --kv-cache-memory {fmt_bytes(cap.available_kv_bytes)}[/]")
    out.print("[bold]vLLM would log:[/]")
    for line in cap.log_lines:
        out.print(f"  {line}", soft_wrap=True, markup=False)
    out.print(
        f"  ({cap.num_gpu_blocks:,} blocks of {fmt_bytes(cap.bytes_per_block)}; "
        f"{cap.blocks_per_request:,} blocks per request)"
    )
    if cap.mamba_max_num_seqs is not None:
        out.print(
            f"  Mamba layers: max_num_seqs may not exceed {cap.mamba_max_num_seqs:,} "
            "(one state block per decoding sequence)"
        )
    if show_grid:
        _grid(p)
    rec = p.recommended
    if rec:
        out.print(
            f"[bold]Recommended:[/] max_model_len {rec.max_model_len:,}, max_num_seqs "
            f"{rec.max_num_seqs} — {rec.reason}"
        )
    for alt in p.alternatives:
        verdict = f"{alt.max_concurrency:.2f}x concurrency" if alt.fits else "still does not fit"
        out.print(f"  with {alt.change}: {verdict} ({alt.num_gpu_blocks:,} blocks)")
    if p.engines:
        table = Table(title="Other engines on this GPU", title_justify="left")
        for col in ("engine", "setting", "KV memory", "KV tokens", "requests at max length"):
            table.add_column(col, justify="left" if col in ("engine", "setting") else "right")
        for e in p.engines:
            table.add_row(
                e.engine,
                e.setting,
                fmt_bytes(max(e.available_kv_bytes, 0)),
                f"{e.max_total_tokens:,}",
                f"{e.max_concurrency:.2f}",
            )
        out.print(table)
    nv = p.naive_vs_paged
    out.print(
        f"Naive contiguous cache for {nv.sequences} sequences: {fmt_bytes(nv.naive_bytes)}; "
        f"paged at {nv.avg_tokens:,} tokens each: {fmt_bytes(nv.paged_bytes)} "
        f"({nv.waste_pct:.0f}% of the naive cache would be empty)"
    )
    bs = ", ".join(
        f"{b.block_size}: {b.fragmentation_pct:.2f}% waste, {b.block_table_entries:,} table entries"
        for b in p.block_sizes
    )
    out.print(f"Block size trade-off (at {nv.avg_tokens:,} tokens/request): {bs}")
    if p.prefix_sharing:
        ps = p.prefix_sharing
        out.print(
            f"Prefix sharing: {ps.requests} requests × {ps.shared_prefix_tokens:,}-token "
            f"prefix → {ps.blocks_saved:,} blocks ({fmt_bytes(ps.bytes_saved)}) saved"
        )
    out.print("[bold]Commands:[/]")
    for name, command in p.commands.items():
        out.print(f"  {name:7} {command}", soft_wrap=True, markup=False)
    for note in p.notes:
        out.print(f"[dim]note: {_user(note)}[/]", soft_wrap=True)
    out.print(
        "[dim]Weights are exact only from safetensors headers; activation, non-torch and "
        "CUDA-graph figures are estimates — `kvplan verify --gpu` measures them.[/]"
    )


def _grid(p: Plan) -> None:
    seqs = sorted({c.max_num_seqs for c in p.grid})
    table = Table(
        title="max_model_len × max_num_seqs: KV usage at full concurrency (✗ = does not fit)",
        title_justify="left",
    )
    table.add_column("max_model_len", justify="right")
    for s in seqs:
        table.add_column(f"{s} seqs", justify="right")
    for length in sorted({c.max_model_len for c in p.grid}):
        row = [f"{length:,}"]
        for s in seqs:
            cell = next(c for c in p.grid if c.max_model_len == length and c.max_num_seqs == s)
            row.append(
                f"{cell.kv_usage:.0%}"
                if cell.fits
                else f"✗ {cell.kv_usage:.0%}"
                if cell.kv_usage != float("inf")
                else "✗"
            )
        table.add_row(*row)
    console().print(table)


def gpus(rows: list[GPU], *, as_json: bool = False) -> None:
    if as_json:
        console().file.write(to_json([asdict(g) for g in rows]))
        return
    table = Table(title="GPU catalog — memory as the CUDA driver reports it")
    for col in ("name", "memory", "bytes", "bandwidth", "BF16 dense", "source"):
        table.add_column(col, justify="right" if col not in ("name", "source") else "left")
    for g in rows:
        table.add_row(
            g.name,
            fmt_bytes(g.memory_bytes),
            f"{g.memory_bytes:,}",
            f"{g.bandwidth_bytes_per_s / 1e12:.2f} TB/s",
            f"{g.bf16_flops / 1e12:,.0f} TFLOP/s",
            g.source,
        )
    console().print(table)


# --------------------------------------------------------------------------- kvplan check

CHECK_FORMATS = ("table", "json", "markdown", "junit")
_STATUS = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}
_MD_STATUS = {"pass": "✅ pass", "fail": "❌ fail", "error": "⚠️ error"}


def _check_text(c: Check, r: DeploymentResult) -> str:
    """One check as a sentence with its numbers."""
    ok = "✓" if c.passed else "✗"
    length = r.settings.get("max_model_len")
    if c.name == "weights":
        return (
            f"{ok} weights {fmt_bytes(int(c.actual))} per GPU > the "
            f"{fmt_bytes(int(c.required))} the engine may use"
        )
    if c.name == "max_model_len" and c.unit == "bytes":
        return (
            f"{ok} one {length:,}-token request needs {fmt_bytes(int(c.required))} of KV, "
            f"{fmt_bytes(max(int(c.actual), 0))} available"
        )
    if c.name == "max_model_len":
        return f"{ok} {c.actual:.2f} requests of {length:,} tokens fit (at least 1)"
    if c.name == "min_concurrency":
        sign = "≥" if c.passed else "<"
        return f"{ok} concurrency {c.actual:.2f}x {sign} {c.required:g}x required"
    if c.name == "min_kv_tokens":
        sign = "≥" if c.passed else "<"
        return f"{ok} KV cache {int(c.actual):,} tokens {sign} {int(c.required):,} required"
    seqs = r.settings.get("max_num_seqs")
    sign = "≤" if c.passed else ">"
    usage = f"{c.actual:.0%}" if c.actual != float("inf") else "∞"
    return f"{ok} KV usage at {seqs} × {length:,} tokens {usage} {sign} {c.required:.0%} allowed"


def _limiting(r: DeploymentResult) -> Check | None:
    return next((c for c in r.checks if c.name == r.limiting), None)


def _summary(r: DeploymentResult) -> str:
    """The limiting check, then any other that failed (or the error), in one line."""
    if r.status == "error":
        return f"error: {r.error}"
    c = _limiting(r)
    if c is None:
        return ""
    others = [x for x in r.checks if not x.passed and x is not c]
    return "; ".join(_check_text(x, r) for x in (c, *others))


def _margin(r: DeploymentResult) -> str:
    if r.margin is None or r.margin == float("inf"):
        return "—"
    return f"{r.margin:+.0%}"


def _where(r: DeploymentResult) -> str:
    tp = r.settings.get("tp", 1) * r.settings.get("pp", 1)
    gpus = f" ×{tp}" if tp > 1 else ""
    return f"{r.gpu}{gpus}"


def check_dict(rep: CheckReport) -> dict[str, Any]:
    """JSON of ``kvplan check``: integer bytes, floats rounded, infinities as null."""

    def clean(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, 4) if value == value and abs(value) != float("inf") else None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return {
        "file": rep.file,
        "exit_code": rep.exit_code,
        "counts": rep.counts,
        "deployments": [clean(asdict(r)) for r in rep.results],
        "problems": [asdict(p) for p in rep.problems],
    }


def check_markdown(rep: CheckReport) -> str:
    """A job-summary / PR-comment table (GitHub-flavoured markdown)."""
    counts = rep.counts
    fits = counts["passed"]
    lines = [
        f"### kvplan check: {fits} of {counts['deployments']} deployments fit (`{rep.file}`)",
        "",
        "| result | deployment | model | engine | GPU | limiting | margin | numbers |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cell(text: Any) -> str:
        return one_line(str(text)).replace("|", "\\|").replace("`", "'")

    for r in rep.results:
        row = [
            _MD_STATUS[r.status],
            f"`{cell(r.name)}`",
            cell(r.model),
            r.engine,
            cell(_where(r)),
            cell(r.limiting or "—"),
            _margin(r),
            cell(_summary(r)),
        ]
        lines.append("| " + " | ".join(row) + " |")
    fixes = [r for r in rep.results if r.fix]
    if fixes:
        lines.append("")
        for r in fixes:
            lines.append(f"- **{cell(r.name)}** — fix: {cell(r.fix)}")
    if rep.problems:
        lines.append("")
        lines.append("**Invalid plans file** (exit 2):")
        for p in sorted(rep.problems, key=lambda p: p.line):
            lines.append(f"- `{cell(p.file)}:{p.line}` {cell(p.where)}: {cell(p.message)}")
    lines.append("")
    lines.append(
        "<sub>vLLM figures use vLLM 0.33's formulas; activation, non-torch and CUDA-graph "
        "terms are estimates (`kvplan verify` measures them).</sub>"
    )
    return "\n".join(lines) + "\n"


def check_junit(rep: CheckReport) -> str:
    """JUnit XML: one testcase per deployment; a failure carries the numbers and the fix, an
    unplannable deployment or an invalid entry is an error."""
    import xml.etree.ElementTree as ET

    counts = rep.counts
    errors = counts["errors"] + len(rep.problems)
    attrs = {
        "name": "kvplan check",
        "tests": str(len(rep.results) + len(rep.problems)),
        "failures": str(counts["failed"]),
        "errors": str(errors),
    }
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", {**attrs, "name": rep.file, "skipped": "0"})
    for r in rep.results:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"kvplan.{r.engine}",
                "name": r.name,
                "file": rep.file,
                "line": str(r.line),
            },
        )
        if r.status == "error":
            error = ET.SubElement(case, "error", {"type": "PlanError", "message": r.error or ""})
            error.text = r.error
            continue
        body = [f"{r.model} on {_where(r)} ({r.engine})"]
        body += [_check_text(c, r) for c in r.checks]
        if r.figures is not None:
            f = r.figures
            body.append(
                f"{f.source} figures: KV cache {fmt_bytes(max(f.available_kv_bytes, 0))}, "
                f"{f.kv_cache_size_tokens:,} tokens, {f.max_concurrency:.2f}x concurrency "
                f"({f.setting})"
            )
        if r.fix:
            body.append(f"fix: {r.fix}")
        if r.status == "fail":
            message = _summary(r) + (f"; fix: {r.fix}" if r.fix else "")
            failure = ET.SubElement(case, "failure", {"type": "DoesNotFit", "message": message})
            failure.text = "\n".join(body)
        else:
            ET.SubElement(case, "system-out").text = "\n".join(body)
    for p in sorted(rep.problems, key=lambda p: p.line):
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": "kvplan.plans", "name": p.where, "file": p.file, "line": str(p.line)},
        )
        ET.SubElement(case, "error", {"type": "InvalidPlan", "message": str(p)}).text = str(p)
    for element in root.iter():  # XML 1.0 has no control characters, even escaped
        element.attrib.update({k: one_line(v) for k, v in element.attrib.items()})
        if element.text:
            element.text = "\n".join(one_line(line) for line in element.text.split("\n"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _check_table(rep: CheckReport, out: Console) -> None:
    counts = rep.counts
    table = Table(
        title=f"kvplan check {_user(rep.file)}: {counts['passed']} of {counts['deployments']} "
        "deployments fit",
        title_justify="left",
    )
    for col in ("result", "deployment", "model", "engine", "GPU", "limiting", "margin"):
        table.add_column(col, justify="right" if col == "margin" else "left", overflow="fold")
    for r in rep.results:
        style = {"pass": "green", "fail": "red", "error": "yellow"}[r.status]
        table.add_row(
            f"[{style}]{_STATUS[r.status]}[/]",
            _user(r.name),
            _user(r.model),
            r.engine,
            _user(_where(r)),
            r.limiting or "—",
            _margin(r),
        )
    out.print(table)
    for r in rep.results:
        out.print(
            f"[bold]{_user(r.name)}[/]: {_user(_summary(r))}", soft_wrap=True, highlight=False
        )
        if r.fix:
            out.print(f"  fix: {r.fix}", soft_wrap=True, highlight=False, markup=False)
    out.print(
        "[dim]vLLM figures use vLLM 0.33's formulas; SGLang/TRT-LLM rows use those engines' "
        "budgets. --format json gives every figure.[/]"
    )


def check(rep: CheckReport, *, fmt: str = "table", output: str | None = None) -> None:
    """Print (or write with ``-o``) a :class:`CheckReport`; invalid entries also
    go to stderr as ``Error:`` lines, whatever the format."""
    import io

    if fmt == "json":
        text = to_json(check_dict(rep))
    elif fmt == "markdown":
        text = check_markdown(rep)
    elif fmt == "junit":
        text = check_junit(rep)
    elif not rep.results:  # every entry is invalid: the Error lines say it all
        text = ""
    elif output is None:
        _check_table(rep, console())
        text = ""
    else:
        buf = io.StringIO()
        _check_table(rep, Console(file=buf, width=120, no_color=True, highlight=False))
        text = buf.getvalue()
    if output is not None:
        from planner.files import write_atomic

        write_atomic(output, text, flag="-o")
    elif text:
        console().file.write(text)
    err = err_console()
    for problem in sorted(rep.problems, key=lambda p: p.line):
        err.print(f"Error: {one_line(str(problem))}", markup=False, soft_wrap=True)


# --------------------------------------------------------------------------- kvplan diagnose


def _size(n: float | None, unit: str) -> str:
    if n is None:
        return "—"
    if unit == "bytes":
        return f"{n / GIB:,.2f} GiB"
    if unit == "x":
        return f"{n:.2f}x"
    return f"{int(n):,}"


def _signed(n: float | None, unit: str) -> str:
    if n is None:
        return ""
    if unit == "bytes":
        return "0.00 GiB" if abs(n) < GIB / 200 else f"{n / GIB:+,.2f} GiB"
    if unit == "x":
        return f"{n:+.2f}x"
    return f"{int(n):+,}"


def finding_text(f: Finding) -> str:
    """One finding as a sentence with its numbers."""
    d = f.data
    if f.kind in ("budget", "matches"):
        source = "blocks × the plan's block size" if d["available_implied_by_blocks"] else "log"
        head = (
            f"Available KV cache: {source} {_size(d['log_available_bytes'], 'bytes')}, plan "
            f"{_size(d['plan_available_bytes'], 'bytes')} "
            f"({_signed(d['difference_bytes'], 'bytes')})"
        )
        if f.kind == "matches":
            return head + ": the plan matches the log within its 0.01 GiB rounding."
        if d["term_log_bytes"] is None:
            why = (
                f"The log does not state {d['term']}; together they account for "
                f"{_signed(d['share_bytes'], 'bytes')} (DEBUG logging prints the breakdown)"
            )
        else:
            term = d["term"][:1].upper() + d["term"][1:]
            why = (
                f"{term} explains it: log {_size(d['term_log_bytes'], 'bytes')} vs plan "
                f"{_size(d['term_plan_bytes'], 'bytes')} gives {_signed(d['share_bytes'], 'bytes')}"
                " of KV cache"
            )
        return f"{head}. {why}."
    if f.kind == "layout-matches":
        return (
            f"Layout matches: with the log's KV memory the plan's blocks hold "
            f"{d['expected_tokens_low']:,}–{d['expected_tokens_high']:,} tokens; the log has "
            f"{d['log_tokens']:,}."
        )
    if f.kind == "layout":
        return (
            f"Layout differs: the log stores {d['log_tokens']:,} tokens in its KV memory, "
            f"{d['log_bytes_per_token']:,.0f} B/token; the plan's layout needs "
            f"{d['plan_bytes_per_token']:,.0f} B/token (×{d['ratio']}; plan has "
            f"{d['kv_heads_per_rank']} KV heads per rank) and would hold "
            f"{d['expected_tokens_low']:,}–{d['expected_tokens_high']:,}."
        )
    if f.kind == "startup-max-len":
        need = _size(d["needed_bytes"], "bytes")
        have = _size(d["available_bytes"], "bytes")
        plan_est = d["plan_estimated_max_model_len"]
        return (
            f"vLLM refused max_model_len {d['max_model_len'] or '?'}: one request needs {need} "
            f"of KV, {have} available; vLLM's estimated maximum model length is "
            f"{d['estimated_max_model_len'] or '?'}"
            + (f" (the plan's: {plan_est:,})" if plan_est else "")
            + "."
        )
    if f.kind == "startup-no-memory":
        return "vLLM found no memory for KV blocks: weights and activations fill the budget."
    if f.kind in ("oom", "oom-fragmentation"):
        spare = ", ".join(
            f"{_size(d[k], 'bytes')} {label}"
            for k, label in (
                ("free_bytes", "free"),
                ("reserved_unallocated_bytes", "reserved but unallocated"),
            )
            if d[k] is not None
        )
        head = f"CUDA OOM allocating {_size(d['tried_bytes'], 'bytes')}" + (
            f" while {spare}" if spare else ""
        )
        if f.kind == "oom-fragmentation":
            return head + ": memory looks free, so fragmentation or a wrong KV-head count."
        return head + ": the budget is too tight."
    if f.kind == "kv-pinned":
        peak = d["peak_pct"]
        return (
            f"KV usage pinned near 100 %: {d['high_samples']} of {d['samples']} stat lines "
            f"≥ 95 %"
            + (f", peak {peak:.1f} %" if peak is not None else "")
            + f", {d['preemptions']:,} preemptions, up to {d['max_waiting']} requests waiting: "
            + ("requests queue and are preempted." if d["preemptions"] else "requests queue.")
        )
    if f.kind == "kv-low":
        return (
            f"KV usage never above {d['peak_pct']:.1f} % in {d['samples']} stat lines: the cache "
            "is larger than the load needs."
        )
    if f.kind == "prefix-off":
        return (
            "Prefix caching is off: requests that share a system prompt recompute it, which "
            "shows as high TTFT."
        )
    if f.kind == "prefix-low-hit":
        return (
            f"Prefix cache hit rate {d['mean_hit_pct']:.1f} % over {d['samples']} stat lines: "
            "requests share little; with a shared system prompt, high TTFT follows."
        )
    return str(d.get("message", f.kind))


def diagnose_dict(dg: Diagnosis) -> dict[str, Any]:
    """JSON of ``kvplan diagnose``; runtime samples are summarised, not listed."""
    data = asdict(dg)
    log = data["log"]
    for key in ("kv_usage_pct", "prefix_hit_pct"):
        samples = log.pop(key)
        log[key.removesuffix("_pct") + "_samples"] = len(samples)
        log[key.removesuffix("_pct") + "_peak_pct"] = max(samples) if samples else None
    for term, t in zip(data["terms"], dg.terms, strict=True):
        term["diff"] = t.diff
    for finding, f in zip(data["findings"], dg.findings, strict=True):
        finding["text"] = finding_text(f)
    return data


def diagnose(dg: Diagnosis, *, as_json: bool = False) -> None:
    """Print ``kvplan diagnose``: what the log says, the plan beside it, the findings."""
    if as_json:
        console().file.write(to_json(diagnose_dict(dg)))
        return
    out = console()
    log = dg.log
    kind = (
        f"vLLM {log.engine}" + (f" (v{log.version})" if log.version else "")
        if log.engine
        else "vLLM"
    )
    runtime = (
        f", {len(log.kv_usage_pct)} runtime stat lines, {log.preemptions:,} preemptions"
        if log.kv_usage_pct or log.preemptions
        else ""
    )
    out.print(f"[bold]{_user(dg.file)}[/]: {kind} log, {log.recognised} lines recognised{runtime}")
    if dg.settings:
        parts = []
        for key, value in dg.settings.items():
            where = dg.sources.get(key, "")
            shown = fmt_bytes(value) if key == "gpu_memory_bytes" else value
            parts.append(f"{key} {shown}" + (f" ({where})" if where else ""))
        out.print("Plan settings: " + " · ".join(parts), soft_wrap=True, markup=False)
    if dg.terms:
        table = Table(title="Log vs plan, per GPU rank", title_justify="left")
        table.add_column("term")
        for col in ("log", "plan", "log − plan"):
            table.add_column(col, justify="right")
        table.add_column("note")
        for t in dg.terms:
            table.add_row(
                t.name, _size(t.log, t.unit), _size(t.plan, t.unit), _signed(t.diff, t.unit), t.note
            )
        out.print(table)
    for note in dg.notes:
        out.print(f"[dim]note: {_user(note)}[/]", soft_wrap=True)
    if dg.findings:
        out.print("[bold]Findings:[/]")
    mark = {"info": "·", "warning": "!", "error": "✗"}
    for f in dg.findings:
        where = f" (line {', '.join(str(n) for n in f.lines if n)})" if any(f.lines) else ""
        out.print(f"  {mark[f.severity]} {finding_text(f)}{where}", soft_wrap=True, markup=False)
        for fix in f.fix:
            out.print(f"      → {fix}", soft_wrap=True, markup=False)
    if not dg.findings and not dg.terms:
        out.print("Nothing to compare: the log has no startup figures and no runtime problems.")
    out.print(
        "[dim]Logged sizes are GiB rounded to 0.01; plan terms for activation, non-torch and "
        "CUDA graphs are estimates.[/]"
    )


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
        f"[bold]{_user(report.model)}[/] on {report.gpu} (TP {report.tensor_parallel_size}) · "
        f"workload {_user(report.workload)} ({_user(report.workload_source)}: "
        f"{report.requests:,} requests{seed})",
        soft_wrap=True,
    )
    out.print(f"KV pool: {_user(report.pool)}", soft_wrap=True)
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
        out.print(f"[dim]note: {_user(note)}[/]", soft_wrap=True)


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
        out.print(f"[bold]★ {_user(report.best_reason)}[/]", soft_wrap=True)


def simulate_plot(report: SimReport, path: str) -> bytes:
    """Usage over time for every run, and the runs' throughput and preemptions, as the bytes of
    an image in the format ``path``'s suffix names (PNG by default)."""
    import io

    from planner.errors import UsageError

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
    return buf.getvalue()


# --------------------------------------------------------------------------- kvplan verify
# The results come from probes/ (torch); render reads their fields and never imports torch.


@contextlib.contextmanager
def trial_progress(*, enabled: bool = True) -> Iterator[Callable[[Any], None]]:
    """A progress line on stderr while the probe runs; yields the per-trial callback."""
    if not enabled:
        yield lambda trial: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err_console(),
        transient=True,
    ) as progress:
        task = progress.add_task("probing: weights, profile step, planned run", total=None)
        count = 0

        def on_trial(trial: Any) -> None:
            nonlocal count
            count += 1
            outcome = "fits" if trial.fits else "out of memory"
            progress.update(
                task,
                description=f"bisecting the frontier: trial {count}, "
                f"{trial.num_blocks:,} blocks {outcome}",
            )

        yield on_trial


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2f}%"


def verify(result: Any, *, as_json: bool = False) -> None:
    """Print a probe result: budget, predicted vs measured, planned run, frontier, verdict."""
    if as_json:
        console().file.write(to_json(asdict(result)))
        return
    out = console()
    mem = result.memory
    out.print(
        f"[bold]{_user(result.model)}[/] on {result.device} · vLLM plan · TP "
        f"{result.tensor_parallel_size} · KV {result.kv_cache_dtype} · block "
        f"{result.block_size} · max_model_len {result.max_model_len:,} · "
        f"{result.max_num_seqs:,} seqs · {result.max_num_batched_tokens:,} batched tokens"
    )
    out.print(
        f"Budget {fmt_bytes(mem.budget_bytes)} ({mem.budget_bytes:,} B): weights "
        f"{fmt_bytes(mem.weights_bytes)} ({result.weights_mode}), activation peak "
        f"{fmt_bytes(mem.activation_bytes)}, non-torch {fmt_bytes(mem.non_torch_bytes)} "
        f"-> KV {fmt_bytes(max(0, mem.available_kv_bytes))}"
    )
    out.print(
        f"Paged pool: {result.pool_bytes_per_block:,} B per block (plan "
        f"{result.bytes_per_block:,} B), {result.blocks_per_request:,} blocks per "
        f"{result.max_model_len:,}-token request; prediction from {result.prediction_source}"
    )
    table = Table(title="Plan vs allocator", title_justify="left")
    table.add_column("figure")
    table.add_column("predicted", justify="right")
    table.add_column("measured", justify="right")
    table.add_column("error", justify="right")
    p, m, e = result.predicted, result.measured, result.error_pct
    table.add_row(
        "num_gpu_blocks",
        f"{p.num_gpu_blocks:,}",
        f"{m.num_gpu_blocks:,}",
        _pct(e["num_gpu_blocks"]),
    )
    table.add_row(
        "kv_cache_size_tokens",
        f"{p.kv_cache_size_tokens:,}",
        f"{m.kv_cache_size_tokens:,}",
        _pct(e["kv_cache_size_tokens"]),
    )
    table.add_row(
        f"max_concurrency @ {result.max_model_len:,}",
        f"{p.max_concurrency:.2f}x",
        f"{m.max_concurrency:.2f}x",
        _pct(e["max_concurrency"]),
    )
    table.add_row(
        "peak_bytes",
        f"{fmt_bytes(p.peak_bytes)} ({p.peak_bytes:,})",
        f"{fmt_bytes(m.peak_bytes)} ({m.peak_bytes:,})",
        _pct(e["peak_bytes"]),
    )
    out.print(table)
    run = result.planned_run
    if run.ran:
        out.print(
            f"Planned run: {p.num_gpu_blocks:,} blocks, {run.num_sequences:,} sequences "
            f"({run.full_length_sequences:,} at {result.max_model_len:,} tokens), "
            f"{run.decode_steps} decode steps, peak {fmt_bytes(mem.planned_run_peak_bytes or 0)}"
        )
    else:
        out.print(f"[red]Planned run failed:[/] {_user(run.error)}", soft_wrap=True)
    ooms = sum(1 for t in result.trials if not t.fits)
    back = (
        "memory back to baseline after every trial"
        if result.oom_recovered
        else ("[red]memory did NOT return to baseline[/]")
    )
    out.print(
        f"Frontier: {m.num_gpu_blocks:,} blocks after {len(result.trials)} trials "
        f"({ooms} out of memory); {back}"
    )
    headroom = mem.activation_bytes // result.bytes_per_block if result.bytes_per_block else 0
    if m.num_gpu_blocks > p.num_gpu_blocks:
        out.print(
            f"[dim]The frontier is {m.num_gpu_blocks - p.num_gpu_blocks:,} blocks above the plan: "
            f"one decode step uses less than the activation headroom ({headroom:,} blocks) "
            "vLLM keeps for a full prefill step.[/]",
            soft_wrap=True,
        )
    for note in result.page_mismatches + result.notes:
        out.print(f"[dim]note: {_user(note)}[/]", soft_wrap=True)
    floor = p.num_gpu_blocks * (1 - result.tolerance_pct / 100)
    verdict = "[green]PASS[/]" if result.passed else "[red]FAIL[/]"
    out.print(
        f"{verdict}: measured frontier {m.num_gpu_blocks:,} vs plan {p.num_gpu_blocks:,} blocks "
        f"(fails below {floor:,.1f}, tolerance {result.tolerance_pct:g}%)"
    )
    laps = " · ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in result.timings_s.items())
    out.print(f"[dim]Time: {laps}. Sizes in binary units (1 GiB = 2^30 bytes).[/]")


def hf_cache(check: Any, *, as_json: bool = False) -> None:
    """Print the transformers cross-check of one model."""
    if as_json:
        console().file.write(to_json(asdict(check)))
        return
    out = console()
    if check.status in ("skipped", "error"):
        out.print(f"{check.model}: {check.status}: {check.reason}", soft_wrap=True, markup=False)
        return
    out.print(
        f"[bold]{_user(check.model)}[/] ({_user(check.model_type)}) built small in transformers: "
        f"{check.num_layers_built} layers, {check.cache_class}"
    )
    table = Table(title="--engine hf vs transformers' cache", title_justify="left")
    table.add_column("figure")
    table.add_column("planner", justify="right")
    table.add_column("cache tensors", justify="right")
    table.add_column("storage held", justify="right")
    table.add_row(
        "bytes per token",
        f"{check.predicted_bytes_per_token:,}",
        f"{check.measured_bytes_per_token:,}",
        "",
    )
    for tokens, predicted in check.predicted_bytes_per_sequence.items():
        table.add_row(
            f"bytes per sequence @ {tokens}",
            f"{predicted:,}",
            f"{check.measured_tensor_bytes[tokens]:,}",
            f"{check.measured_storage_bytes[tokens]:,}",
        )
    out.print(table)
    if check.shrunk:
        changes = ", ".join(f"{k} {old}->{new}" for k, (old, new) in check.shrunk.items())
        out.print(f"[dim]shrunk: {_user(changes)}[/]", soft_wrap=True)
    for line in check.storage_excess:
        out.print(f"[yellow]storage:[/] {_user(line)}", soft_wrap=True)
    for line in check.mismatches:
        out.print(f"[red]mismatch:[/] {_user(line)}", soft_wrap=True)
    out.print("[green]OK[/]" if check.status == "ok" else "[red]MISMATCH[/]")
