"""``kvplan simulate``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from planner.cli._options import (
    JsonOpt,
    ModelArg,
    OfflineOpt,
    RevisionOpt,
    ServeArgs,
    comma_values,
    serve_options,
    user_errors,
)
from planner.errors import UsageError

WorkloadOpt = Annotated[
    str | None,
    typer.Option(
        "--workload",
        "-w",
        help="JSONL trace (prompt_tokens, output_tokens, arrival_s, prefix_id, prefix_tokens) or "
        "YAML spec (examples/workloads/); or --avg-prompt-tokens/--avg-output-tokens.",
        show_default=False,
    ),
]


def _opt(name: str, help: str) -> Any:
    """An option without a default shown."""
    return typer.Option(name, help=help, show_default=False)


@serve_options("simulate")
def simulate(
    model: ModelArg,
    serve: ServeArgs,
    workload: WorkloadOpt = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="GPU (h100, a100-80gb, l40s, a10g, ...): sizes the pool (an estimate) and "
            "sets the step-time roofline.",
            show_default=False,
        ),
    ] = None,
    num_gpu_blocks: Annotated[
        int | None,
        typer.Option(
            "--num-gpu-blocks",
            help="KV pool in blocks (vLLM's num_gpu_blocks).",
            show_default=False,
        ),
    ] = None,
    compare: Annotated[
        list[str] | None,
        typer.Option(
            "--compare",
            help="KEY=V1,V2 to compare (prefix-caching=on,off, block-size=16,32, ...); repeatable.",
            show_default=False,
        ),
    ] = None,
    step_times: Annotated[
        str | None,
        typer.Option(
            "--step-times",
            help="Measured step times (CSV [context,]tokens,seconds or JSON; see planner/"
            "simulate/steptimes.py) instead of the step-time model for TTFT/TPOT.",
            show_default=False,
        ),
    ] = None,
    avg_prompt_tokens: Annotated[
        int | None,
        _opt(
            "--avg-prompt-tokens",
            "Average prompt length: with --avg-output-tokens, a "
            "vllm bench serve-shaped workload instead of -w (see --dataset).",
        ),
    ] = None,
    avg_output_tokens: Annotated[
        int | None, _opt("--avg-output-tokens", "Average output length.")
    ] = None,
    dataset: Annotated[
        str,
        typer.Option(
            "--dataset",
            help="Lengths around the averages: lognormal (as estimate), random (vllm bench's: "
            "uniform +-range ratio, fixed at 0) or sharegpt (ShareGPT-like).",
        ),
    ] = "lognormal",
    range_ratio: Annotated[
        float,
        typer.Option(
            "--range-ratio", help="--dataset random's spread (vllm's --random-range-ratio)."
        ),
    ] = 0.0,
    request_rate: Annotated[
        float,
        typer.Option(
            "--request-rate", help="Requests per second (inf: all at once, as vllm bench)."
        ),
    ] = float("inf"),
    burstiness: Annotated[
        float,
        typer.Option("--burstiness", help="Gamma shape of the arrival gaps (1: Poisson)."),
    ] = 1.0,
    max_concurrency: Annotated[
        int | None,
        _opt(
            "--max-concurrency",
            "At most this many requests in flight (a closed loop, as "
            "vllm bench serve --max-concurrency); also over -w.",
        ),
    ] = None,
    shared_prefix: Annotated[
        int | None,
        _opt(
            "--shared-prefix",
            "Tokens of a system prompt every request starts with (with --avg-prompt-tokens).",
        ),
    ] = None,
    calibrate: Annotated[
        str | None,
        _opt(
            "--calibrate",
            "A `vllm bench serve --save-result` file: fit the step-time terms "
            "to it, then replay -w (or that run) with them.",
        ),
    ] = None,
    save_profile: Annotated[
        str | None, _opt("--save-profile", "Write the --calibrate fit to this file.")
    ] = None,
    profile_path: Annotated[
        str | None, _opt("--profile", "Step-time terms saved by --calibrate --save-profile.")
    ] = None,
    goal: Annotated[
        str,
        typer.Option("--goal", help="What 'best' means: throughput, ttft, tpot or preemptions."),
    ] = "throughput",
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed", help="Seed for a YAML spec [default: the spec's].", show_default=False
        ),
    ] = None,
    num_requests: Annotated[
        int | None,
        typer.Option(
            "--num-requests",
            help="Requests to draw from a spec (a trace: the first N).",
            show_default=False,
        ),
    ] = None,
    skip_bad_lines: Annotated[
        bool,
        typer.Option("--skip-bad-lines", help="Skip bad trace lines (listed) instead of failing."),
    ] = False,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            help="Draw usage over time and the comparison to a PNG (needs matplotlib).",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", help="Also write the JSON report to this file.", show_default=False
        ),
    ] = None,
    save_trace: Annotated[
        str | None,
        typer.Option(
            "--save-trace",
            help="Write the requests as a JSONL trace (to replay or edit).",
            show_default=False,
        ),
    ] = None,
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Replay a workload over vLLM's paged KV cache: usage, preemptions, concurrency, latency.

    Example: kvplan simulate qwen2.5-7b --gpu l40s -w examples/workloads/chat.yaml --block-size 8,16

    Benchmark-shaped: kvplan simulate llama-3.1-8b --gpu h100 --dataset random
    --avg-prompt-tokens 1024 --avg-output-tokens 128 --max-concurrency 16
    """
    import os

    # numpy (optional: planner.simulate.fast) starts one OpenBLAS thread a core, which spin
    # on the CPU for a while after each call; a replay does no linear algebra (sorting and
    # random draws only), so one thread: ~0.1 s less CPU per run (benchmarks/simulate_rates.py)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from dataclasses import replace

    from planner.deployment import Deployment
    from planner.files import write_all_atomic
    from planner.gpus import get_gpu
    from planner.model.load import load_draft, load_model
    from planner.render import simulate as render
    from planner.render._output import to_json
    from planner.simulate import build_settings, load_workload, simulate_model, trace_lines

    with user_errors():
        from planner.files import check_outputs

        check_outputs(  # before any work: never an input, a device, or one another
            [("--save-trace", save_trace), ("-o", output), ("--plot", plot)],
            inputs=[("the workload (-w)", workload), ("the step times", step_times)],
        )
        axes = serve.axes()  # --block-size 16,32 and the like: the declared --compare axes
        for item in compare or []:
            key, sep, rest = item.partition("=")
            key = key.strip().lower().removeprefix("--").replace("_", "-")
            key = {"enable-prefix-caching": "prefix-caching"}.get(key, key)
            if not sep or not comma_values(rest):
                raise UsageError(
                    f"--compare takes KEY=V1,V2 (e.g. prefix-caching=on,off), got {item!r}"
                )
            if axes.get(key):
                raise UsageError(f"{key} is given twice (as --{key} and in --compare)")
            axes[key] = comma_values(rest)
        prefix = serve.values.get("enable_prefix_caching")  # the declared --enable-prefix-caching
        if not axes.get("prefix-caching") and prefix is not None:
            axes["prefix-caching"] = ["on" if prefix else "off"]
        base = serve.settings()
        variants, varied = build_settings({k: v for k, v in axes.items() if v}, base)
        gpu_ = get_gpu(gpu) if gpu else None
        from planner.status import quiet, status

        quiet(json_)
        shorthand = avg_prompt_tokens is not None or avg_output_tokens is not None
        shorthand = shorthand or dataset != "lognormal"
        if workload is not None and shorthand:
            raise UsageError("give -w FILE or --avg-prompt-tokens/--avg-output-tokens, not both")
        if workload is None and not shorthand and calibrate is None:
            raise UsageError(
                "give a workload: -w FILE, --avg-prompt-tokens N --avg-output-tokens N, or "
                "--calibrate RESULT.json (to replay that run)"
            )
        if workload is not None and (request_rate != float("inf") or shared_prefix):
            raise UsageError(
                "--request-rate and --shared-prefix shape an --avg-prompt-tokens workload; a "
                "-w file has its own arrivals and prefixes"
            )
        if step_times is not None and (calibrate or profile_path):
            raise UsageError("--step-times replaces the step-time model: no --calibrate/--profile")
        if calibrate and profile_path:
            raise UsageError("give --calibrate (fit now) or --profile (a saved fit), not both")
        if save_profile and not calibrate:
            raise UsageError(
                "--save-profile writes a --calibrate fit: give --calibrate RESULT.json"
            )
        load = None
        if workload is not None:
            with status(f"Reading the workload {workload}"):
                load = load_workload(
                    workload, seed=seed, num_requests=num_requests, skip_bad_lines=skip_bad_lines
                )
            if max_concurrency is not None:
                if max_concurrency < 1:
                    raise UsageError(f"--max-concurrency must be at least 1, got {max_concurrency}")
                load = replace(load, max_concurrency=max_concurrency)
        table = None
        if step_times is not None:
            from planner.simulate.steptimes import load_step_times

            table = load_step_times(step_times)
        result = None
        profile_terms: dict[str, float] | None = None
        profile_source = ""
        if calibrate is not None:
            from planner.simulate.calibrate import load_result

            result = load_result(calibrate)
        if profile_path is not None:
            from planner.simulate.clock import load_profile

            profile_terms = load_profile(profile_path).terms
            profile_source = profile_path
        loaded = load_model(model, revision=revision, offline=offline or None)
        base, draft = load_draft(base, offline=offline or None)
        variants = [v.but(speculative=base.speculative) for v in variants] if variants else variants
        dep = Deployment(model=loaded, gpu=gpu_, settings=base, draft=draft)
        # what estimate and check refuse is never replayed: the layout rules first, then a
        # fixed pool that with the weights does not fit the GPU
        from planner.recommend import check_kv_memory
        from planner.report import physical_refusal

        # a single value of a --compare axis (--kv-cache-dtype fp8) is the deployment itself
        single = len(variants) == 1
        checked = (
            Deployment(model=loaded, gpu=gpu_, settings=variants[0], draft=draft) if single else dep
        )
        refusal = physical_refusal(checked)
        if refusal is not None:
            raise refusal.error()
        if base.kv_cache_memory_bytes is not None:
            check_kv_memory(dep)
        limit = base.max_model_len if base.max_model_len and base.max_model_len > 0 else None
        limit = limit or loaded.spec.max_model_len
        if load is None and shorthand:
            from planner.simulate.spec import bench_workload

            load = bench_workload(
                prompt_tokens=avg_prompt_tokens,
                output_tokens=avg_output_tokens,
                dataset=dataset,
                range_ratio=range_ratio,
                num_requests=num_requests or 1000,
                request_rate=request_rate,
                burstiness=burstiness,
                max_concurrency=max_concurrency,
                shared_prefix=shared_prefix or 0,
                max_model_len=limit,
                seed=seed or 0,
            )
        fitted = None
        if result is not None:
            from planner.simulate.calibrate import fit, workload_of
            from planner.simulate.clock import StepModel

            own = workload_of(result, limit)
            with status(f"Fitting the step-time terms to {calibrate}"):
                first = simulate_model(dep, own, num_gpu_blocks=num_gpu_blocks)
                assert isinstance(first.roofline, StepModel)
                defaults = first.roofline.terms()

                def replay(terms: dict[str, float]) -> Any:
                    one = simulate_model(
                        dep,
                        own,
                        num_gpu_blocks=num_gpu_blocks,
                        profile=terms,
                        profile_source=str(calibrate),
                    )
                    return one.runs[0].result.bench

                fitted = fit(result, defaults, replay)
            profile_terms, profile_source = fitted.terms, str(calibrate)
            if load is None:
                load = own
        assert load is not None
        runs = len(variants) if variants else 1
        with replay_progress(len(load.requests), runs):
            report = simulate_model(
                dep,
                load,
                variants=variants,
                axes=varied,
                num_gpu_blocks=num_gpu_blocks,
                goal=goal,
                step_times=table,
                profile=profile_terms,
                profile_source=profile_source,
            )
        if fitted is not None:
            report = replace(report, calibration=render.calibration_dict(fitted))
        # every output is rendered before any is written: an error leaves no file behind
        outputs: list[tuple[str, str, bytes | str]] = []
        if save_profile and fitted is not None:
            outputs.append(("--save-profile", save_profile, fitted.to_json() + "\n"))
        if save_trace:
            outputs.append(("--save-trace", save_trace, "\n".join(trace_lines(load)) + "\n"))
        if output:
            outputs.append(("-o", output, to_json(render.simulate_dict(report))))
        if plot:
            outputs.append(("--plot", plot, render.simulate_plot(report, plot)))
        write_all_atomic(outputs)
        render.simulate(report, as_json=json_)


@contextlib.contextmanager
def replay_progress(requests: int, runs: int) -> Iterator[None]:
    """A progress bar of arrived requests on stderr while one setting replays (a spinner for
    a parallel sweep, whose workers run elsewhere); nothing piped or under --json."""
    from planner.simulate import engine
    from planner.status import shown, status

    if runs > 1 or not shown() or requests < 4096:
        with status(
            f"Replaying {requests:,} requests" + (f" under {runs} settings" if runs > 1 else "")
        ):
            yield
        return
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("Replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests started"),
        console=Console(file=sys.stderr),
        transient=True,
    ) as bar:
        task = bar.add_task("replay", total=requests)
        engine.PROGRESS = lambda n: bar.update(task, completed=n)
        try:
            yield
        finally:
            engine.PROGRESS = None
