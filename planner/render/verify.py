"""``kvplan verify``: predicted vs measured, the frontier and the verdict; the transformers
cross-check (``--hf-cache``); the progress line while the probe runs.

The results come from probes/ (torch); render reads their fields and never imports torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING

from rich.table import Table

from planner.errors import one_line
from planner.render._output import (
    console,
    err_console,
    print_note,
    print_wrapped,
    to_json,
    user_text,
    write_out,
)
from planner.units import fmt_bytes

if TYPE_CHECKING:  # probes.plan is torch-free, but render needs its types only for annotations
    from probes.plan import CacheCheck, ProbeResult, Trial
    from probes.stepgrid import StepTimesResult


@contextlib.contextmanager
def trial_progress(*, enabled: bool = True) -> Iterator[Callable[[Trial], None]]:
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

        def on_trial(trial: Trial) -> None:
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


def verify(result: ProbeResult, *, as_json: bool = False) -> None:
    """Print a probe result: budget, predicted vs measured, planned run, frontier, verdict."""
    if as_json:
        write_out(to_json(asdict(result)))
        return
    out = console()
    mem = result.memory
    out.print(
        f"[bold]{user_text(result.model)}[/] on {result.device} · vLLM plan · TP "
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
        out.print(f"[red]Planned run failed:[/] {user_text(run.error)}", soft_wrap=True)
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
        print_note(out, note)
    floor = p.num_gpu_blocks * (1 - result.tolerance_pct / 100)
    verdict = "[green]PASS[/]" if result.passed else "[red]FAIL[/]"
    out.print(
        f"{verdict}: measured frontier {m.num_gpu_blocks:,} vs plan {p.num_gpu_blocks:,} blocks "
        f"(fails below {floor:,.1f}, tolerance {result.tolerance_pct:g}%)"
    )
    laps = " · ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in result.timings_s.items())
    out.print(f"[dim]Time: {laps}. Sizes in binary units (1 GiB = 2^30 bytes).[/]")


def hf_cache(check: CacheCheck, *, as_json: bool = False) -> None:
    """Print the transformers cross-check of one model."""
    if as_json:
        write_out(to_json(asdict(check)))
        return
    out = console()
    if check.status in ("skipped", "error"):
        out.print(f"{check.model}: {check.status}: {check.reason}", soft_wrap=True, markup=False)
        return
    out.print(
        f"[bold]{user_text(check.model)}[/] ({user_text(check.model_type)}) built small in "
        "transformers: "
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
        print_wrapped(out, f"shrunk: {one_line(changes)}", style="dim")
    for line in check.storage_excess:
        out.print(f"[yellow]storage:[/] {user_text(line)}", soft_wrap=True)
    for line in check.mismatches:
        out.print(f"[red]mismatch:[/] {user_text(line)}", soft_wrap=True)
    out.print("[green]OK[/]" if check.status == "ok" else "[red]MISMATCH[/]")


@contextlib.contextmanager
def step_progress(*, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A progress line on stderr while ``--step-times`` runs; yields the per-point callback."""
    if not enabled:
        yield lambda label: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err_console(),
        transient=True,
    ) as progress:
        task = progress.add_task("timing steps: weights", total=None)
        yield lambda label: progress.update(task, description=f"timing steps: {label}")


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:,.3f}"


def step_times(result: StepTimesResult, *, as_json: bool = False) -> None:
    """Print ``--step-times``: each measured step against the step-time model's."""
    if as_json:
        write_out(to_json(asdict(result)))
        return
    out = console()
    out.print(
        f"[bold]{user_text(result.model)}[/] on {user_text(result.device_name)} "
        f"({result.device}) · TP {result.tensor_parallel_size} · {result.dtype} · KV "
        f"{result.kv_cache_dtype} · block {result.block_size} · {result.layers_timed} of "
        f"{result.num_layers} layers timed · median of {result.repeats} ({result.timer})"
    )
    against = result.predicted_for or "no GPU"
    table = Table(title=f"Measured vs step-time model ({against})", title_justify="left")
    table.add_column("step")
    table.add_column("batch", justify="right")
    table.add_column("context", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("measured ms", justify="right")
    table.add_column("predicted ms", justify="right")
    table.add_column("pred/meas", justify="right")
    for p in result.points:
        ratio = "n/a" if p.ratio is None else f"{p.ratio:.2f}"
        table.add_row(
            p.kind,
            f"{p.batch:,}",
            f"{p.context:,}",
            f"{p.tokens:,}",
            _ms(p.seconds),
            _ms(p.predicted_s),
            ratio,
        )
    out.print(table)
    if not result.comparable:
        print_note(
            out,
            f"pred/meas is n/a: the steps ran on {result.device_name}, not on the "
            f"{against} the model predicts for; run on that GPU (--gpu) to compare",
            style="yellow",
        )
    for line in result.skipped:
        print_note(out, f"skipped: {line}")
    for note in result.notes:
        print_note(out, note)
    out.print(
        f"Wrote {len(result.points)} steps to {user_text(result.out)} "
        f"(kvplan simulate ... --step-times {user_text(result.out)} replays with them)",
        soft_wrap=True,
    )
