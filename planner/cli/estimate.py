"""``kvplan estimate``."""

from __future__ import annotations

from typing import Annotated

import typer

from planner.cli._options import (
    BatchedTokensOpt,
    BatchOpt,
    BlockOpt,
    EagerOpt,
    EngineOpt,
    GpuMemoryOpt,
    GpuOpt,
    JsonOpt,
    KVDtypeOpt,
    MaxLenOpt,
    MaxSeqsOpt,
    ModelArg,
    OfflineOpt,
    PpOpt,
    PrefixOpt,
    RevisionOpt,
    TpOpt,
    _batch_sizes,
    user_errors,
)
from planner.errors import UsageError

GmuOpt = Annotated[
    float, typer.Option("--gpu-memory-utilization", help="vLLM's fraction of GPU memory.")
]
KVMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-cache-memory",
        help="KV budget per GPU, like vLLM's "
        "--kv-cache-memory-bytes (ignores gpu_memory_utilization).",
        show_default=False,
    ),
]
HeadroomOpt = Annotated[
    str, typer.Option("--headroom", help="Memory to keep free on top of vLLM's budget.")
]
GraphOpt = Annotated[
    str | None,
    typer.Option(
        "--cuda-graph-memory",
        help="CUDA-graph memory vLLM subtracts [default: 0.5GiB estimate].",
        show_default=False,
    ),
]
GridOpt = Annotated[
    bool, typer.Option("--grid", help="Show the max_model_len x max_num_seqs grid.")
]
SharedPrefixOpt = Annotated[
    int | None,
    typer.Option(
        "--shared-prefix",
        help="Tokens of a system prompt shared by --requests "
        "requests: blocks saved by prefix caching.",
        show_default=False,
    ),
]
RequestsOpt = Annotated[int, typer.Option("--requests", help="Requests sharing --shared-prefix.")]
AvgTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--avg-tokens",
        help="Average tokens per request, for fragmentation and the "
        "naive-vs-paged comparison [default: max_model_len / 2].",
        show_default=False,
    ),
]


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
    gpu: GpuOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    gpu_memory_utilization: GmuOpt = 0.92,
    kv_cache_memory: KVMemoryOpt = None,
    headroom: HeadroomOpt = "0",
    cuda_graph_memory: GraphOpt = None,
    enforce_eager: EagerOpt = False,
    grid: GridOpt = False,
    shared_prefix: SharedPrefixOpt = None,
    requests: RequestsOpt = 100,
    avg_tokens: AvgTokensOpt = None,
    batch: BatchOpt = "1,8,32",
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    enable_prefix_caching: PrefixOpt = True,
    json_: JsonOpt = False,
) -> None:
    """KV-cache bytes per token and per sequence for MODEL, per GPU rank; with a GPU, what
    vLLM will report at startup and what to set.

    \b
    Examples:
      kvplan estimate Qwen/Qwen3-8B --tp 2 --kv-cache-dtype fp8 --max-model-len 32768
      kvplan estimate qwen2.5-7b --gpu rtx-4090 --grid
      kvplan estimate qwen3-14b --kv-cache-memory 6.51GiB --max-model-len 32768
    """
    import planner
    from planner.budget import CUDA_GRAPH_DEFAULT_BYTES
    from planner.gpus import get_gpu
    from planner.recommend import GpuInfo, report
    from planner.render import estimate as render
    from planner.specs import Engine, KVDtype
    from planner.units import parse_size

    with user_errors():
        engine_ = Engine.parse(engine)
        dtype = KVDtype.parse(kv_cache_dtype)
        if dtype is KVDtype.FP32 and engine_ is not Engine.HF:
            raise UsageError("--kv-cache-dtype fp32 is only meaningful with --engine hf")
        if max_model_len == -1 and engine_ is not Engine.VLLM:
            raise UsageError("--max-model-len -1 (auto-fit) is vLLM's; give a length")
        sizes = _batch_sizes(batch)
        gpu_info, a100 = None, False
        if gpu:
            catalog_gpu = get_gpu(gpu)
            gpu_info = GpuInfo(catalog_gpu.name, catalog_gpu.memory_bytes, catalog_gpu.source)
            a100 = catalog_gpu.is_a100
        if gpu_memory:
            memory = parse_size(gpu_memory, flag="--gpu-memory")
            if memory <= 0:
                raise UsageError("--gpu-memory must be positive")
            name = gpu_info.name if gpu_info else "custom"
            gpu_info = GpuInfo(name, memory, "--gpu-memory")
        graphs = (
            0
            if enforce_eager
            else (
                parse_size(cuda_graph_memory, flag="--cuda-graph-memory")
                if cuda_graph_memory
                else None
            )
        )
        spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
        result = report(
            spec,
            engine=engine_,
            gpu=gpu_info,
            gpu_is_a100=a100,
            tp=tp,
            pp=pp,
            kv_cache_dtype=dtype,
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            prefix_caching=enable_prefix_caching,
            batch_sizes=sizes,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory_bytes=parse_size(kv_cache_memory, flag="--kv-cache-memory")
            if kv_cache_memory
            else None,
            headroom_bytes=parse_size(headroom, flag="--headroom"),
            shared_prefix_tokens=shared_prefix,
            requests=requests,
            avg_tokens=avg_tokens,
            cuda_graph_bytes=CUDA_GRAPH_DEFAULT_BYTES if graphs is None else graphs,
        )
        render.report(result, as_json=json_, show_grid=grid)
