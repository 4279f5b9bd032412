"""Two views of every result: a rich table on stdout, or ``--json``. GiB/MiB appear only here."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from planner.memory import KVEstimate
from planner.models import ModelRow

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
        f"[bold]{result.model}[/] on {result.device} · vLLM plan · TP "
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
        out.print(f"[red]Planned run failed:[/] {run.error}", soft_wrap=True)
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
        out.print(f"[dim]note: {note}[/]", soft_wrap=True)
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
        out.print(f"{check.model}: {check.status}: {check.reason}", soft_wrap=True)
        return
    out.print(
        f"[bold]{check.model}[/] ({check.model_type}) built small in transformers: "
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
        out.print(f"[dim]shrunk: {changes}[/]", soft_wrap=True)
    for line in check.storage_excess:
        out.print(f"[yellow]storage:[/] {line}", soft_wrap=True)
    for line in check.mismatches:
        out.print(f"[red]mismatch:[/] {line}", soft_wrap=True)
    out.print("[green]OK[/]" if check.status == "ok" else "[red]MISMATCH[/]")
