"""The ``kvplan`` command line. Each command parses, calls one library function, renders."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Annotated

import typer

from planner.errors import KvplanError, UsageError

app = typer.Typer(
    name="kvplan",
    help="KV-cache memory planner for vLLM, SGLang and TensorRT-LLM: what fits, before launch.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)

ModelArg = Annotated[
    str,
    typer.Argument(
        help="Catalog name (llama-3.1-8b), Hub id (org/name), or local dir / config.json.",
        show_default=False,
        metavar="MODEL",
    ),
]
TpOpt = Annotated[int, typer.Option("--tp", "--tensor-parallel-size", help="Tensor-parallel size.")]
PpOpt = Annotated[
    int, typer.Option("--pp", "--pipeline-parallel-size", help="Pipeline-parallel size.")
]
KVDtypeOpt = Annotated[
    str,
    typer.Option(
        "--kv-cache-dtype", help="auto, fp16, bf16, fp8, fp8_e4m3, fp8_e5m2, int8 (fp32: hf only)."
    ),
]
EngineOpt = Annotated[str, typer.Option("--engine", help="vllm, sglang, trtllm or hf.")]
BlockOpt = Annotated[
    int | None,
    typer.Option(
        "--block-size",
        help="Tokens per block [default: vllm 16, trtllm 32, sglang/hf 1].",
        show_default=False,
    ),
]
MaxLenOpt = Annotated[
    int | None,
    typer.Option(
        "--max-model-len",
        help="Context length per request [default: the model's].",
        show_default=False,
    ),
]
BatchedTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-num-batched-tokens",
        help="vLLM tokens per step; sets sliding-window KV in flight [default: vllm serve's, 2048 "
        "when no GPU is named].",
        show_default=False,
    ),
]
MaxSeqsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-num-seqs", help="vLLM concurrent sequences [default: 256].", show_default=False
    ),
]
BatchOpt = Annotated[
    str, typer.Option("--batch", help="Comma-separated batch sizes for the worked example.")
]
RevisionOpt = Annotated[
    str | None,
    typer.Option(
        "--revision", help="Hub branch, tag or commit (skips the catalog).", show_default=False
    ),
]
OfflineOpt = Annotated[
    bool, typer.Option("--offline", help="Use only the local HF cache (like HF_HUB_OFFLINE=1).")
]
PrefixOpt = Annotated[
    bool,
    typer.Option(
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="vLLM prefix caching (hybrid models keep extra Mamba pages when on).",
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON (integer bytes) instead of tables.")
]


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Show a KvplanError as one `Error:` line and exit 1 (usage: 2); KVPLAN_DEBUG re-raises."""
    try:
        yield
    except KvplanError as exc:
        if os.environ.get("KVPLAN_DEBUG"):
            raise
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--batch takes comma-separated integers, got {text!r}") from None
    return sizes


@app.command()
def estimate(
    model: ModelArg,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    kv_cache_dtype: KVDtypeOpt = "auto",
    engine: EngineOpt = "vllm",
    block_size: BlockOpt = None,
    max_model_len: MaxLenOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    max_num_seqs: MaxSeqsOpt = None,
    batch: BatchOpt = "1,8,32",
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    enable_prefix_caching: PrefixOpt = True,
    json_: JsonOpt = False,
) -> None:
    """KV-cache bytes per token and per sequence for MODEL, per GPU rank.

    Example: kvplan estimate Qwen/Qwen3-8B --tp 2 --kv-cache-dtype fp8 --max-model-len 32768
    """
    import planner
    from planner import render
    from planner.specs import Engine, KVDtype

    with user_errors():
        engine_ = Engine.parse(engine)
        dtype = KVDtype.parse(kv_cache_dtype)
        if dtype is KVDtype.FP32 and engine_ is not Engine.HF:
            raise UsageError("--kv-cache-dtype fp32 is only meaningful with --engine hf")
        sizes = _batch_sizes(batch)
        spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
        result = planner.estimate(
            spec,
            engine=engine_,
            tp=tp,
            pp=pp,
            kv_cache_dtype=dtype,
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            prefix_caching=enable_prefix_caching,
            batch_sizes=sizes,
        )
        render.estimate(result, as_json=json_)


@app.command()
def models(json_: JsonOpt = False) -> None:
    """List the bundled offline catalog: layers, KV heads, head size, attention kinds, bytes/token.

    Example: kvplan models --json
    """
    import planner
    from planner import render

    with user_errors():
        render.models(planner.list_models(), as_json=json_)


def _size(text: str | None, flag: str) -> int | None:
    from planner.units import parse_size

    return parse_size(text, flag=flag) if text else None


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


@app.command()
def verify(
    model: Annotated[
        str | None,
        typer.Argument(
            help="Catalog name, Hub id, or local dir / config.json (or use --plan).",
            show_default=False,
            metavar="[MODEL]",
        ),
    ] = None,
    plan: PlanOpt = None,
    gpu: Annotated[bool, typer.Option("--gpu", help="Probe the local CUDA device.")] = False,
    device: Annotated[
        str | None,
        typer.Option("--device", help="cpu or cuda[:N] [default: cpu].", show_default=False),
    ] = None,
    memory_budget: SizeOpt = None,
    gpu_memory_utilization: Annotated[
        float, typer.Option("--gpu-memory-utilization", help="vLLM's share of the GPU.")
    ] = 0.92,
    max_memory: Annotated[
        str | None,
        typer.Option(
            "--max-memory", help="Hard cap on what the probe allocates.", show_default=False
        ),
    ] = None,
    tp: TpOpt = 1,
    kv_cache_dtype: KVDtypeOpt = "auto",
    block_size: BlockOpt = None,
    max_model_len: MaxLenOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    max_num_seqs: MaxSeqsOpt = None,
    enable_prefix_caching: PrefixOpt = True,
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

    Example: kvplan verify qwen3-0.6b --device cpu --memory-budget 3GiB --max-model-len 4096
    """
    import planner
    from planner import render
    from planner.specs import KVDtype

    with user_errors():
        from probes.plan import PlanNotMetError, read_plan

        if hf_cache:
            if model is None:
                raise UsageError("--hf-cache needs MODEL")
            from probes.hfcache import cross_check_spec

            spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
            check = cross_check_spec(spec)
            render.hf_cache(check, as_json=json_)
            if check.status == "mismatch":
                raise PlanNotMetError(
                    f"{spec.name}: the planner's --engine hf bytes differ from transformers' cache"
                )
            return
        from probes.probe import VerifyRequest
        from probes.probe import verify as run_verify

        request = VerifyRequest(
            device=device or ("cuda" if gpu else "cpu"),
            memory_budget_bytes=_size(memory_budget, "--memory-budget"),
            gpu_memory_utilization=gpu_memory_utilization,
            max_memory_bytes=_size(max_memory, "--max-memory"),
            tp=tp,
            kv_cache_dtype=KVDtype.parse(kv_cache_dtype),
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            prefix_caching=enable_prefix_caching,
            weights_bytes=_size(weights_bytes, "--weights-bytes"),
            weights_buffer=weights_buffer,
            tolerance_pct=tolerance,
            decode_steps=decode_steps,
        )
        if plan:
            saved = read_plan(plan)
            request, model = request.with_plan(saved), model or saved.source
        if model is None:
            raise UsageError("give MODEL or --plan FILE")
        spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
        progress = render.trial_progress(enabled=not json_ and render.err_console().is_terminal)
        with progress as on_trial:
            result = run_verify(spec, request, on_trial=on_trial)
        render.verify(result, as_json=json_)
        if not result.passed:
            raise PlanNotMetError(
                f"measured frontier {result.measured.num_gpu_blocks:,} blocks is below the "
                f"plan's {result.predicted.num_gpu_blocks:,} by more than "
                f"{result.tolerance_pct:g}%"
            )


def main() -> None:
    """Console entry point: KvplanError -> one line and exit 1; bugs keep their traceback."""
    try:
        app()
    except KvplanError as exc:  # raised outside a command body (should not happen)
        if os.environ.get("KVPLAN_DEBUG"):
            raise
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
