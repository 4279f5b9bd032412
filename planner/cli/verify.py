"""``kvplan verify``: the torch probes (probes/), imported only inside the command."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from planner.cli._options import (
    JsonOpt,
    OfflineOpt,
    RevisionOpt,
    ServeArgs,
    serve_options,
    size_arg,
    user_errors,
)
from planner.errors import ProbeUnavailableError, UsageError

if TYPE_CHECKING:
    from probes.plan import VerifyRequest

SizeOpt = Annotated[
    str | None,
    typer.Option(
        "--memory-budget",
        help="Bytes the plan may use, e.g. 6GiB (required on CPU).",
        show_default=False,
    ),
]
StepTimesOpt = Annotated[
    str | None,
    typer.Option(
        "--step-times",
        help="Time decode and prefill steps instead (random weights, the planned TP and "
        "dtypes) and write them to OUT (CSV; JSON for .json) for kvplan simulate --step-times; "
        "the table's predicted/measured ratios mean something only on the GPU predicted for.",
        show_default=False,
        metavar="OUT",
    ),
]
StepGpuOpt = Annotated[
    str | None,
    typer.Option(
        "--step-gpu",
        help="GPU whose step-time model --step-times compares with [default: the probed "
        "CUDA device; on CPU h100].",
        show_default=False,
    ),
]
StepBatchesOpt = Annotated[
    str | None,
    typer.Option(
        "--step-batches",
        help="Decode batch sizes for --step-times [default: 1,8,32,128].",
        show_default=False,
    ),
]
StepContextsOpt = Annotated[
    str | None,
    typer.Option(
        "--step-contexts",
        help="Contexts (and prefill lengths) for --step-times [default: 512,2048,8192].",
        show_default=False,
    ),
]
PlanOpt = Annotated[
    str | None,
    typer.Option(
        "--plan", help="A saved plan (kvplan estimate --json) to prove.", show_default=False
    ),
]


@serve_options("verify")
def verify(
    model: Annotated[
        str | None,
        typer.Argument(
            help="Catalog name, Hub id, or local dir / config.json (or use --plan).",
            show_default=False,
            metavar="[MODEL]",
        ),
    ] = None,
    *,
    serve: ServeArgs,
    plan: PlanOpt = None,
    gpu: Annotated[bool, typer.Option("--gpu", help="Probe the local CUDA device.")] = False,
    device: Annotated[
        str | None,
        typer.Option("--device", help="cpu or cuda[:N] [default: cpu].", show_default=False),
    ] = None,
    memory_budget: SizeOpt = None,
    max_memory: Annotated[
        str | None,
        typer.Option(
            "--max-memory", help="Hard cap on what the probe allocates.", show_default=False
        ),
    ] = None,
    weights_buffer: Annotated[
        bool, typer.Option("--weights-buffer", help="Occupy the weights as one buffer.")
    ] = False,
    weights_bytes: Annotated[
        str | None,
        typer.Option(
            "--weights-bytes",
            help="Weight bytes to occupy [default: from the config].",
            show_default=False,
        ),
    ] = None,
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Allowed shortfall of the frontier, percent.")
    ] = 2.0,
    decode_steps: Annotated[
        int, typer.Option("--decode-steps", help="Decode steps in the planned run.")
    ] = 2,
    hf_cache: Annotated[
        bool,
        typer.Option("--hf-cache", help="Cross-check the byte layout against transformers' cache."),
    ] = False,
    step_times: StepTimesOpt = None,
    step_gpu: StepGpuOpt = None,
    step_batches: StepBatchesOpt = None,
    step_contexts: StepContextsOpt = None,
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Prove the plan: allocate the paged KV cache next to real-shaped weights, run attention,
    and bisect the largest pool that still fits (exit 3 when it is below the plan).

    \b
    Example: kvplan verify qwen3-0.6b --device cpu --memory-budget 3GiB \\
      --max-model-len 4096
    Example: kvplan verify qwen3-0.6b --gpu --step-times h200.csv
    """
    import planner
    from planner.render import verify as render
    from planner.render._output import err_console

    with user_errors():
        # probes.plan is torch-free: every flag is parsed and checked before torch is imported
        from probes.plan import PlanNotMetError, VerifyRequest, check_request, read_plan

        if hf_cache:
            if step_times is not None:
                raise UsageError("--hf-cache and --step-times are two probes: run one at a time")
            if model is None:
                raise UsageError("--hf-cache needs MODEL")
            _require_torch()
            from probes.hfcache import cross_check_spec

            spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
            check = cross_check_spec(spec)
            render.hf_cache(check, as_json=json_)
            if check.status == "mismatch":
                raise PlanNotMetError(
                    f"{spec.name}: the planner's --engine hf bytes differ from transformers' cache"
                )
            return
        settings = serve.settings()
        request = VerifyRequest(
            settings=settings,
            device=device or ("cuda" if gpu else "cpu"),
            memory_budget_bytes=size_arg(memory_budget, "--memory-budget"),
            max_memory_bytes=size_arg(max_memory, "--max-memory"),
            weights_bytes=size_arg(weights_bytes, "--weights-bytes"),
            weights_buffer=weights_buffer,
            tolerance_pct=tolerance,
            decode_steps=decode_steps,
        )
        if plan:
            saved = read_plan(plan)
            request, model = request.with_plan(saved), model or saved.source
        if model is None:
            raise UsageError("give MODEL or --plan FILE")
        check_request(request)
        if step_times is not None:
            _step_times(
                model,
                request,
                step_times,
                step_gpu,
                step_batches,
                step_contexts,
                revision=revision,
                offline=offline,
                json_=json_,
            )
            return
        if step_gpu or step_batches or step_contexts:
            raise UsageError(
                "--step-gpu, --step-batches and --step-contexts go with --step-times OUT"
            )
        _require_torch()
        from probes.probe import check_device
        from probes.probe import verify as run_verify

        check_device(request)  # what the device has free, before the model is loaded
        spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
        progress = render.trial_progress(enabled=not json_ and err_console().is_terminal)
        with progress as on_trial:
            result = run_verify(spec, request, on_trial=on_trial)
        render.verify(result, as_json=json_)
        if not result.passed:
            raise PlanNotMetError(
                f"measured frontier {result.measured.num_gpu_blocks:,} blocks is below the "
                f"plan's {result.predicted.num_gpu_blocks:,} by more than "
                f"{result.tolerance_pct:g}%"
            )


def _step_times(
    model: str,
    request: VerifyRequest,
    out: str,
    gpu: str | None,
    batches: str | None,
    contexts: str | None,
    *,
    revision: str | None,
    offline: bool,
    json_: bool,
) -> None:
    """``--step-times OUT``: time the grid, write OUT (atomically), print the comparison."""
    import planner
    from planner import files
    from planner.gpus import lookup_gpu
    from planner.render import verify as render
    from planner.render._output import err_console
    from probes.stepgrid import (
        DEFAULT_BATCHES,
        DEFAULT_CONTEXTS,
        check_grid,
        file_text,
        parse_counts,
    )

    if out == "-":
        raise UsageError("--step-times -: name a file (the comparison table goes to stdout)")
    files.check_output_name("--step-times", out)
    batch_sizes = parse_counts(batches, "--step-batches", DEFAULT_BATCHES)
    context_lengths = parse_counts(contexts, "--step-contexts", DEFAULT_CONTEXTS)
    check_grid(batch_sizes, context_lengths)
    if gpu:
        lookup_gpu(gpu)  # an unknown name is refused before torch is imported
    _require_torch()
    from probes.probe import check_device
    from probes.steptimes import measure_step_times

    check_device(request)  # what the device has free, before the model is loaded
    spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
    with render.step_progress(enabled=not json_ and err_console().is_terminal) as on_point:
        result = measure_step_times(
            spec, request, batch_sizes, context_lengths, out=out, gpu_name=gpu, on_point=on_point
        )
    text = file_text(result, as_json=out.lower().endswith(".json"))
    files.write_atomic(out, text, flag="--step-times")
    render.step_times(result, as_json=json_)


def _require_torch() -> None:
    """Import torch, or say in one line how to get it (exit 2) instead of a traceback."""
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "torch":  # torch is there but broken: its own error says why
            raise
        raise ProbeUnavailableError(
            "kvplan verify needs torch: pip install 'kvplan[probe]'"
        ) from None
