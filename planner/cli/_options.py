"""What the commands share: the option aliases of the serving flags, ``user_errors()`` (a
KvplanError as one ``Error:`` line) and small flag parsers."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer

from planner.errors import KvplanError, UsageError, one_line

if TYPE_CHECKING:
    from planner.recommend import GpuInfo


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
GpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        help="GPU from the catalog (h100, l4, rtx-4090 ...; `kvplan gpus`).",
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
EagerOpt = Annotated[bool, typer.Option("--enforce-eager", help="No CUDA graphs (0 bytes).")]


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Show a KvplanError as one `Error:` line and exit 1 (usage: 2); KVPLAN_DEBUG re-raises."""
    try:
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


def _gpu_arg(gpu: str | None, gpu_memory: str | None) -> tuple[GpuInfo | None, bool]:
    """--gpu / --gpu-memory as a GpuInfo (memory overrides the catalog's), and the A100 flag."""
    from planner.gpus import get_gpu
    from planner.recommend import GpuInfo
    from planner.units import parse_size

    info, a100 = None, False
    if gpu:
        found = get_gpu(gpu)
        info, a100 = GpuInfo(found.name, found.memory_bytes, found.source), found.is_a100
    if gpu_memory:
        memory = parse_size(gpu_memory, flag="--gpu-memory")
        if memory <= 0:
            raise UsageError("--gpu-memory must be positive")
        info = GpuInfo(info.name if info else "custom", memory, "--gpu-memory")
    return info, a100
