"""``kvplan verify``: the torch probes (probes/), imported only inside the command."""

from __future__ import annotations

from typing import Annotated

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

SizeOpt = Annotated[
    str | None,
    typer.Option(
        "--memory-budget",
        help="Bytes the plan may use, e.g. 6GiB (required on CPU).",
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
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Prove the plan: allocate the paged KV cache next to real-shaped weights, run attention,
    and bisect the largest pool that still fits (exit 3 when it is below the plan).

    \b
    Example: kvplan verify qwen3-0.6b --device cpu --memory-budget 3GiB \\
      --max-model-len 4096
    """
    import planner
    from planner.render import verify as render
    from planner.render._output import err_console

    with user_errors():
        # probes.plan is torch-free: every flag is parsed and checked before torch is imported
        from probes.plan import PlanNotMetError, VerifyRequest, check_request, read_plan

        if hf_cache:
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
