"""What the commands share: the option aliases of the serving flags, ``user_errors()`` (a
KvplanError as one ``Error:`` line) and small flag parsers."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from planner.errors import KvplanError, UsageError, one_line

if TYPE_CHECKING:
    from planner.deployment import Gpu, ServeSettings


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
        "--kv-cache-dtype",
        help="auto, fp16, bf16, fp8, fp8_e4m3, fp8_e5m2, int8 (not vllm/sglang), fp32 (hf only).",
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
        help="Context length per request [default: the model's]; -1 is vLLM's auto-fit: the "
        "longest that fits the KV pool.",
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
GpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        help="GPU from the catalog (h100, l4, rtx-4090 ...; `kvplan gpus`) or as nvidia-smi "
        "names it ('NVIDIA H100 80GB HBM3').",
        show_default=False,
    ),
]
GpuMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu-memory",
        help="Total GPU memory for a GPU not in the catalog (24GiB, 80GB, or bytes).",
        show_default=False,
    ),
]
VllmVersionOpt = Annotated[
    str | None,
    typer.Option(
        "--vllm-version",
        help="vLLM release whose rules to follow (default gpu_memory_utilization, CUDA-graph "
        "subtraction, batch defaults, log wording) [default: 0.33.0, the newest kvplan knows].",
        show_default=False,
    ),
]
EntrypointOpt = Annotated[
    str,
    typer.Option(
        "--entrypoint",
        help="serve (vllm serve) or llm (the LLM class): vLLM's batch defaults differ.",
    ),
]
RunnerOpt = Annotated[
    str,
    typer.Option(
        "--runner",
        help="generate or pooling (embedding/reward models: no sampler warm-up).",
    ),
]
EagerOpt = Annotated[bool, typer.Option("--enforce-eager", help="No CUDA graphs (0 bytes).")]
DpOpt = Annotated[
    int,
    typer.Option(
        "--dp",
        "--data-parallel-size",
        help="Data-parallel size: engines with their own KV pool and --max-num-seqs each; "
        "routed experts shard over dp x tp GPUs.",
    ),
]
EpOpt = Annotated[
    bool,
    typer.Option(
        "--enable-expert-parallel",
        help="Whole experts per GPU (EP = dp x tp) instead of TP-sharded experts.",
    ),
]
RedundantOpt = Annotated[
    int,
    typer.Option(
        "--num-redundant-experts",
        help="EPLB redundant experts (global; needs --enable-expert-parallel); vLLM's "
        "--enable-eplb --eplb-config '{\"num_redundant_experts\": R}'.",
    ),
]
All2AllOpt = Annotated[
    str,
    typer.Option(
        "--all2all-backend",
        help="vLLM's MoE all-to-all backend; DeepEP ones reserve 1 GiB per GPU outside torch.",
    ),
]
DcpOpt = Annotated[
    int,
    typer.Option(
        "--dcp",
        "--decode-context-parallel-size",
        help="Decode-context-parallel size (divides --tp): KV split over dcp TP ranks.",
    ),
]
SpeculativeOpt = Annotated[
    str | None,
    typer.Option(
        "--speculative-config",
        help='vLLM\'s JSON, e.g. \'{"method":"mtp","num_speculative_tokens":1}\' or '
        '\'{"method":"eagle","model":"yuhuili/EAGLE-LLaMA3.1-Instruct-8B",'
        '"num_speculative_tokens":3}\' (model: a Hub id, catalog name or local dir).',
        show_default=False,
    ),
]
LimitMMOpt = Annotated[
    str | None,
    typer.Option(
        "--limit-mm-per-prompt",
        help='vLLM\'s items per prompt by modality, e.g. \'{"image":2,"video":0}\' '
        "[default: 999 each]; 0 for every modality builds no vision tower.",
        show_default=False,
    ),
]
LanguageOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--language-model-only",
        help="Text only: no vision tower, no encoder cache (vLLM's flag).",
    ),
]
MMTpModeOpt = Annotated[
    str,
    typer.Option(
        "--mm-encoder-tp-mode",
        help="weights (the vision tower TP-sharded) or data (a whole copy on each TP rank, "
        "images split across ranks).",
    ),
]
SkipMMOpt = Annotated[
    bool,
    typer.Option(
        "--skip-mm-profiling",
        help="vLLM leaves the encoder out of its profile run: more KV, at your risk.",
    ),
]
MMKwargsOpt = Annotated[
    str | None,
    typer.Option(
        "--mm-processor-kwargs",
        help="vLLM's processor overrides, e.g. '{\"max_pixels\":1003520}' (Qwen-VL pixels "
        "per image; sets the tokens per image).",
        show_default=False,
    ),
]
MMTokensOpt = Annotated[
    str | None,
    typer.Option(
        "--mm-tokens-per-item",
        help="Tokens of the largest image/video item when kvplan cannot derive them (no "
        "preprocessor_config.json): a number, or JSON by modality.",
        show_default=False,
    ),
]
MMActivationOpt = Annotated[
    str | None,
    typer.Option(
        "--mm-encoder-activation",
        help="The vision tower's activation in vLLM's profile run (e.g. 6GiB), instead of "
        "kvplan's estimate from its shapes.",
        show_default=False,
    ),
]
GpusOpt = Annotated[
    int | None,
    typer.Option(
        "--gpus",
        help="GPUs to spread over: every TP x DP split of them is planned and the one that "
        "holds the most KV named.",
        show_default=False,
    ),
]
NodesOpt = Annotated[
    int, typer.Option("--nodes", help="Nodes (with --gpus-per-node): one command per node.")
]
GpusPerNodeOpt = Annotated[
    int | None,
    typer.Option("--gpus-per-node", help="GPUs per node; TP stays inside one.", show_default=False),
]


EnableLoraOpt = Annotated[
    bool,
    typer.Option(
        "--enable-lora",
        help="vLLM LoRA: max_loras x max_lora_rank buffers for every target module, counted as "
        "weights.",
    ),
]
MaxLorasOpt = Annotated[
    int | None,
    typer.Option("--max-loras", help="LoRA slots on the GPU [default: 1].", show_default=False),
]
MaxLoraRankOpt = Annotated[
    int | None,
    typer.Option(
        "--max-lora-rank",
        help="1, 8, 16, 32, 64, 128, 256, 320 or 512 [default: the adapter's r rounded up, "
        "else 16].",
        show_default=False,
    ),
]
LoraTargetsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--lora-target-modules",
        help="Only these modules get LoRA buffers (qkv_proj o_proj ..., or the PEFT names "
        "q_proj ...), space- or comma-separated, after MODEL [default: every module, or the "
        "adapter's].",
        show_default=False,
    ),
]
FullyShardedOpt = Annotated[
    bool,
    typer.Option("--fully-sharded-loras", help="Shard the LoRA rank over TP too."),
]
MaxCpuLorasOpt = Annotated[
    int | None,
    typer.Option(
        "--max-cpu-loras",
        help="Adapters each worker keeps in host RAM [default: --max-loras].",
        show_default=False,
    ),
]
LoraAdapterOpt = Annotated[
    str | None,
    typer.Option(
        "--lora-adapter",
        help="A PEFT adapter folder (adapter_config.json): its r and target_modules size the "
        "buffers; the command serves it with --lora-modules.",
        show_default=False,
    ),
]
CpuOffloadOpt = Annotated[
    float | None,
    typer.Option(
        "--cpu-offload-gb",
        help="GiB of weights per GPU vLLM keeps in pinned host RAM (UVA), read over PCIe.",
        show_default=False,
    ),
]
KvOffloadSizeOpt = Annotated[
    float | None,
    typer.Option(
        "--kv-offloading-size",
        help="GiB of CPU KV tier for the engine (summed over its TP ranks): prefix-cache "
        "blocks kept in host RAM.",
        show_default=False,
    ),
]
KvOffloadBackendOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-offloading-backend",
        help="native or lmcache [default: native].",
        show_default=False,
    ),
]
SwapSpaceOpt = Annotated[
    str | None,
    typer.Option(
        "--swap-space",
        help="Refused: vLLM's V1 engine has no swap space (it preempts by recomputing); see "
        "--kv-offloading-size.",
        show_default=False,
    ),
]
# vLLM options that take several words (argparse nargs="+"), as kvplan accepts them too.
NARGS_OPTIONS = ("--lora-target-modules",)


def join_nargs(args: list[str]) -> list[str]:
    """``--lora-target-modules qkv_proj o_proj`` (vLLM's spelling) as one word click can
    read: ``--lora-target-modules qkv_proj,o_proj``; the words up to the next option."""
    out: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        out.append(word)
        i += 1
        if word in NARGS_OPTIONS:
            words = []
            while i < len(args) and not args[i].startswith("-"):
                words.append(args[i])
                i += 1
            if words:
                out.append(",".join(words))
    return out


def refuse_swap_space(value: str | None) -> None:
    """``--swap-space`` is gone: say why, and what to use instead."""
    if value is not None:
        raise UsageError(
            "--swap-space: vLLM 0.33 has no swap space (the V1 engine preempts by recomputing "
            "a request, never by swapping its blocks to the CPU); for a CPU tier of prefix "
            "blocks use --kv-offloading-size GIB"
        )


def lora_targets(values: list[str] | None) -> str | None:
    """``--lora-target-modules`` as given (repeated, comma- or space-separated) in one word."""
    return ",".join(values) if values else None


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Show a KvplanError as one `Error:` line and exit 1 (usage: 2); KVPLAN_DEBUG re-raises.
    The library's notes (:mod:`planner.notes`: which entry an ambiguous GPU name picked) go to
    stderr as `note:` lines, each once."""
    from planner.notes import notes_to

    seen: set[str] = set()

    def note(text: str) -> None:
        from planner.secrets import redact

        line = one_line(redact(text))
        if line not in seen:
            seen.add(line)
            typer.echo(f"note: {line}", err=True)

    try:
        with notes_to(note):
            yield
    except KvplanError as exc:
        if os.environ.get("KVPLAN_DEBUG"):
            raise
        from planner.secrets import redact

        typer.echo(f"Error: {one_line(redact(str(exc)))}", err=True)
        raise typer.Exit(exc.exit_code) from None


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--batch takes comma-separated integers, got {text!r}") from None
    return sizes


def _values(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _size(text: str | None, flag: str) -> int | None:
    from planner.units import parse_size

    return parse_size(text, flag=flag) if text else None


def _gpu_arg(gpu: str | None, gpu_memory: str | None) -> Gpu | None:
    """--gpu / --gpu-memory as a Gpu (memory overrides the catalog's; an A100 stays one)."""
    from planner.gpus import resolve_gpu
    from planner.units import parse_size

    memory = parse_size(gpu_memory, flag="--gpu-memory", unit_required=True) if gpu_memory else None
    return resolve_gpu(gpu, memory)


def _serve_settings(
    *,
    engine: str = "vllm",
    kv_cache_dtype: str = "auto",
    max_model_len: int | None = None,
    gpu_memory_utilization: float | None = None,
    kv_cache_memory: str | None = None,
    headroom: str | None = None,
    cuda_graph_memory: str | None = None,
    enforce_eager: bool = False,
    **counts: Any,
) -> ServeSettings:
    """The serve flags every command shares, parsed once into :class:`ServeSettings` by the
    parser plans files and boot logs go through (:meth:`ServeSettings.from_mapping`, the CLI
    spelling); ``--max-model-len -1`` is vLLM's auto-fit. The first problem is the error."""
    from planner.deployment import SPELLINGS, ServeSettings, refuse_fp32_kv

    given: dict[str, Any] = {
        "engine": engine,
        "kv_cache_dtype": kv_cache_dtype,
        "max_model_len": max_model_len,
        "gpu_memory_utilization": gpu_memory_utilization,
        "kv_cache_memory_bytes": kv_cache_memory,
        "headroom_bytes": headroom,
        "cuda_graph_bytes": cuda_graph_memory,
        "enforce_eager": enforce_eager or None,  # after the graph size: eager wins
        **counts,
    }
    raw = {SPELLINGS[name].cli: value for name, value in given.items()}
    settings, problems = ServeSettings.from_mapping(raw, spelling="cli")
    if problems:
        raise UsageError(problems[0][1])
    refuse_fp32_kv(settings.kv_cache_dtype, settings.engine)
    return settings
