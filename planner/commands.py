"""Ready-to-paste engine commands for a plan, each option spelled exactly as that engine's parser
names it (no abbreviations: SGLang's argparse would read ``--pp`` as ambiguous), each value one the
engine takes, and each number the one kvplan's figures for that engine assumed.

The options and values are checked against option tables read from the engines' sources
(``tests/data/engine_options/``): vLLM 0.33 ``vllm serve``, SGLang 0.5.23
``sglang.launch_server`` and ``trtllm-serve``.

A command that needs a file: ``trtllm-serve`` takes the KV-cache dtype only from its YAML options
file (``kv_cache_config.dtype``). When a plan needs one, the TRT-LLM command ends in
``--extra_llm_api_options kvplan-trtllm.yaml`` and :attr:`EngineCommands.files` holds that
file's text by name: JSON ``command_files`` (``{"kvplan-trtllm.yaml": "kv_cache_config:\\n
..."}``), and the text output prints a ``cat > kvplan-trtllm.yaml <<'EOF'`` block to paste
before the command. TRT-LLM replaces its whole ``kv_cache_config`` with the file's, so the memory
fraction then goes into the file too, not on the command line.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planner.containers import rocm_docker_command
from planner.deployment import eplb_flags
from planner.gpu_support import engine_refusal
from planner.model.specs import Engine
from planner.vllm_rules import NEWEST, NEWEST_VERSION

if TYPE_CHECKING:
    from planner.deployment import ServeSettings
    from planner.engine_budgets import EngineCapacity
    from planner.gpus import Gpu
    from planner.plan_types import Recommended
    from planner.vllm_rules import VllmRules

TRTLLM_FILE = "kvplan-trtllm.yaml"

# kvplan's --kv-cache-dtype -> each engine's spelling. A dtype an engine's table lacks is one it
# has no value for: its command leaves the dtype out, with a plan note, unless the engine's own
# "auto" stores that dtype anyway.
# vLLM 0.33 CacheConfig.cache_dtype: float16/bfloat16 spelled out; no plain int8.
_VLLM_KV = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
}
# SGLang 0.5.23 --kv-cache-dtype choices: auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4,
# fp4_mx_block16 (fp8 is e4m3; no float16, no int8).
_SGLANG_KV = {"bf16": "bf16", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
# TRT-LLM's PyTorch backend acts on kv_cache_config.dtype auto and fp8 (e4m3) only.
_TRTLLM_KV = {"fp8": "fp8", "fp8_e4m3": "fp8"}

# Why an engine cannot be told a dtype, where "<engine> has no <dtype> KV cache" is not the reason.
_WHY_NOT = {
    ("TRT-LLM", "int8"): (
        "TRT-LLM takes an int8 KV cache from an INT8-KV checkpoint (kv_cache_quant_algo, "
        "TensorRT backend), not from a serve option"
    ),
    ("TRT-LLM", ""): "TRT-LLM's kv_cache_config.dtype acts on auto and fp8 (e4m3) only",
}


@dataclass(frozen=True, kw_only=True)
class EngineCommands:
    """The launch commands of a plan (``commands``: ``vllm``, ``sglang``, ``trtllm``, and on an
    AMD GPU ``docker``: the vllm command in vLLM's ROCm image), the files
    a command reads (``files``: name -> text, written next to where the command runs) and what a
    command could not carry (``notes``, one sentence each, for the plan's notes)."""

    commands: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _kv_value(
    engine: str, spellings: dict[str, str], dtype: str, auto: str | None, notes: list[str]
) -> str | None:
    """The engine's spelling of KV dtype ``dtype``, or None to leave the dtype to the engine's
    ``auto`` (``auto``: what that resolves to for the model). A dtype the engine cannot be told
    adds a note unless its ``auto`` stores that dtype anyway."""
    if dtype == "auto":
        return None
    if dtype in spellings:
        return spellings[dtype]
    if dtype != auto:
        why = _WHY_NOT.get((engine, dtype)) or _WHY_NOT.get((engine, ""))
        why = why or f"{engine} has no {dtype} KV cache"
        stores = f"its model's {auto}" if auto else "its model's dtype"
        notes.append(
            f"{why}: the {engine} command leaves the KV dtype out, so {engine} stores {stores}, "
            f"not the {dtype} kvplan sized its figures with"
        )
    return None


def engine_commands(
    model: str,
    rec: Recommended,
    *,
    tp: int,
    pp: int,
    kv_cache_dtype: str,
    settings: ServeSettings | None = None,
    vllm_default_max_num_seqs: int | None = None,
    auto_kv_dtype: str | None = None,
    token_budget: int | None = None,
    sglang: EngineCapacity | None = None,
    trtllm: EngineCapacity | None = None,
    gpu: Gpu | None = None,
) -> EngineCommands:
    """Ready-to-paste launch commands for one plan.

    Args:
        model: the model as the engines load it (a Hub id or a path).
        rec: vLLM's recommendation: its length is every engine's context length.
        tp, pp: tensor- and pipeline-parallel size.
        kv_cache_dtype: kvplan's ``--kv-cache-dtype`` (``auto``, ``bf16``, ``fp8`` ...).
        settings: the user's vLLM settings; the vLLM command carries every one the plan assumed
            that is not vLLM's default: a fixed KV pool as ``--kv-cache-memory-bytes <bytes>``
            (instead of the utilisation), the token budget, eager mode, prefix caching off.
        vllm_default_max_num_seqs: vLLM's own default on the GPU: ``--max-num-seqs`` is left
            out only when the plan keeps it (basis ``engine_default``) and the user gave none.
        auto_kv_dtype: what ``auto`` stores for this model (``bf16``, ``fp16``, ``fp8``): a
            dtype an engine cannot be told is no loss when its ``auto`` stores it anyway.
        token_budget: vLLM's resolved ``max_num_batched_tokens``; TRT-LLM's figures assume the
            activation peak at it, so its command passes it as ``--max_num_tokens`` (with
            ``--enable_chunked_prefill`` when it is shorter than the context, as vLLM chunks).
        sglang, trtllm: those engines' capacities (None without a GPU). They set SGLang's
            ``--mem-fraction-static`` and TRT-LLM's free-memory fraction. Every engine's batch
            limit (``--max-num-seqs``, ``--max-running-requests``, ``--max_batch_size``) is
            the user's ``max_num_seqs``, else a workload's advice, else the engine's own
            default; with ``--worst-case`` (``rec.basis`` ``worst_case``) the full-length
            requests that engine's pool holds.
        gpu: the plan's GPU: an AMD one adds what ROCm changes (:func:`rocm_notes`).

    Returns:
        The :class:`EngineCommands`.
    """
    notes: list[str] = []
    files: dict[str, str] = {}
    length = rec.max_model_len

    vllm = ["vllm", "serve", model, "--tensor-parallel-size", str(tp)]
    if pp > 1:
        vllm += ["--pipeline-parallel-size", str(pp)]
    if settings is not None:
        vllm += vllm_parallel_flags(settings)
    vllm += ["--max-model-len", str(length)]
    # vLLM's default max_num_seqs is left to vLLM (it depends on the GPU); any other is passed
    if (
        rec.max_num_seqs != vllm_default_max_num_seqs
        or rec.basis != "engine_default"
        or (settings is not None and settings.max_num_seqs is not None)
    ):
        vllm += ["--max-num-seqs", str(rec.max_num_seqs)]
    if settings is not None and settings.kv_cache_memory_bytes is not None:
        vllm += ["--kv-cache-memory-bytes", str(settings.kv_cache_memory_bytes)]
    else:
        vllm += ["--gpu-memory-utilization", str(rec.gpu_memory_utilization)]
    vllm += ["--block-size", str(rec.block_size)]
    kv = _kv_value("vLLM", _VLLM_KV, kv_cache_dtype, auto_kv_dtype, notes)
    if kv is not None:
        vllm += ["--kv-cache-dtype", kv]
    if settings is not None:
        if settings.max_num_batched_tokens is not None:
            vllm += ["--max-num-batched-tokens", str(settings.max_num_batched_tokens)]
        if settings.enforce_eager:
            vllm += ["--enforce-eager"]
        if settings.enable_prefix_caching is False:
            vllm += ["--no-enable-prefix-caching"]
        elif settings.enable_prefix_caching and not settings.rules.hybrid_prefix_caching:
            vllm += ["--enable-prefix-caching"]  # a hybrid's default is off before 0.26
        vllm += vllm_memory_flags(settings)
        if settings.enable_lora or settings.cpu_offload_gb or settings.kv_offloading_size:
            notes.append(
                "LoRA, weight offload and the CPU KV tier: the SGLang and TRT-LLM commands leave "
                "them out (kvplan writes only vLLM's flags for them); their figures use vLLM's "
                "weights"
            )
        vllm += vllm_mm_flags(settings)

    dp = settings.dp if settings is not None else 1
    ep = settings is not None and settings.enable_expert_parallel
    # SGLang 0.5.23: attention DP groups inside one TP group (--attn-dp-size, the old
    # --dp-size N --enable-dp-attention) is vLLM's DP + EP layout; plain replicas are --dp-size
    sgl_tp = tp * dp if (dp > 1 and ep) else tp
    sgl = ["python", "-m", "sglang.launch_server", "--model-path", model, "--tp-size", str(sgl_tp)]
    if pp > 1:
        sgl += ["--pp-size", str(pp)]
    if dp > 1:
        sgl += ["--attn-dp-size", str(dp)] if ep else ["--dp-size", str(dp)]
    if ep:
        sgl += ["--ep-size", str(tp * dp)]
    if settings is not None and settings.speculative is not None:
        notes.append(
            "speculative decoding: the SGLang command leaves it out (its "
            "--speculative-algorithm flags are not written by kvplan); its figures include "
            "no draft layers"
        )
    sgl += ["--context-length", str(length)]
    # Every engine admits as vLLM's plan does: the user's max_num_seqs, else the traffic
    # advice of a workload, else that engine's own default; the full-length worst case only
    # with --worst-case (basis worst_case), as that engine's pool holds it.
    users_seqs = settings is not None and settings.max_num_seqs is not None
    admits = rec.max_num_seqs if users_seqs or rec.basis == "workload" else None
    worst_case = rec.basis == "worst_case" and not users_seqs
    users_gmu = settings.gpu_memory_utilization if settings is not None else None
    if settings is not None and settings.max_num_batched_tokens is not None:
        # SGLang's per-step prefill budget is the same knob as vLLM's token budget
        sgl += ["--chunked-prefill-size", str(settings.max_num_batched_tokens)]
    # the fraction SGLang's plan was sized with; without a GPU to size by, the user's
    fraction = sglang.fraction if sglang is not None else users_gmu
    if fraction is not None:
        sgl += ["--mem-fraction-static", str(fraction)]
    if admits is not None:
        sgl += ["--max-running-requests", str(admits)]
    elif worst_case and sglang is not None:
        # SGLang admits by tokens, so its pool holds tokens // length full-length requests
        fit = _at_full_length("SGLang", sglang.max_total_tokens // length, sglang, length, notes)
        if fit and fit < sglang.max_running_requests:  # else SGLang's default is lower
            sgl += ["--max-running-requests", str(fit)]
    kv = _kv_value("SGLang", _SGLANG_KV, kv_cache_dtype, auto_kv_dtype, notes)
    if kv is not None:
        sgl += ["--kv-cache-dtype", kv]

    trt = ["trtllm-serve", model, "--tp_size", str(tp)]
    if pp > 1:
        trt += ["--pp_size", str(pp)]
    trt += ["--max_seq_len", str(length)]
    if token_budget is not None:
        trt += ["--max_num_tokens", str(token_budget)]
        if token_budget < length:
            trt += ["--enable_chunked_prefill"]
    kv_config: dict[str, str] = {}
    kv = _kv_value("TRT-LLM", _TRTLLM_KV, kv_cache_dtype, auto_kv_dtype, notes)
    if kv is not None:
        kv_config["dtype"] = kv
    if admits is not None:
        trt += ["--max_batch_size", str(admits)]
    elif worst_case and trtllm is not None:
        # trtllm_capacity counts whole blocks per request already
        fit = _at_full_length("TRT-LLM", trtllm.max_running_requests, trtllm, length, notes)
        if fit:
            trt += ["--max_batch_size", str(fit)]
    # the fraction TRT-LLM's plan was sized with; without a GPU to size by, the user's
    trt_fraction = trtllm.fraction if trtllm is not None else users_gmu
    if trt_fraction is not None:
        if kv_config:  # the file's kv_cache_config replaces the command line's
            kv_config["free_gpu_memory_fraction"] = str(trt_fraction)
        else:
            trt += ["--kv_cache_free_gpu_memory_fraction", str(trt_fraction)]
    if kv_config:
        files[TRTLLM_FILE] = "kv_cache_config:\n" + "".join(
            f"  {key}: {value}\n" for key, value in kv_config.items()
        )
        trt += ["--extra_llm_api_options", TRTLLM_FILE]

    commands = {
        name: shlex.join(args)
        for name, args in (("vllm", vllm), ("sglang", sgl), ("trtllm", trt))
        if engine_refusal(Engine(name), gpu) is None  # no TRT-LLM command for an AMD GPU
    }
    if "trtllm" not in commands:
        files.pop(TRTLLM_FILE, None)
    version = (settings.vllm_version if settings else None) or NEWEST_VERSION
    docker = rocm_docker_command(commands["vllm"], gpu, version)
    if docker is not None:  # an AMD GPU: the vllm command in vLLM's ROCm image
        commands["docker"] = docker
    return EngineCommands(
        commands=commands,
        files=files,
        notes=notes + rocm_notes(gpu, settings.rules if settings else None),
    )


def rocm_notes(gpu: Gpu | None, rules: VllmRules | None = None) -> list[str]:
    """What an AMD GPU changes about the launch commands for ``rules``' release (the newest
    when None), from vLLM's ROCm sources (0.33.0): the flags stay. Attention: ``ROCM_ATTN``
    heads ``_get_backend_priorities`` (``platforms/rocm.py`` 0.33.0:553-569), AITER's MHA
    backends follow it (``VLLM_ROCM_USE_AITER=1``, off by default, ``envs.py`` 0.33.0:1267;
    pick one with ``--attention-backend``), on RDNA4 with AITER its unified attention goes
    first (:562-563); MLA models get ``TRITON_MLA``, ``ROCM_AITER_MLA`` first with AITER
    (:541-551). The sampler is vLLM's native one (FlashInfer's is CUDA-only:
    :meth:`planner.vllm_rules.VllmRules.on_rocm`). HIP graphs are captured with the same
    ``CUDAGraphWrapper`` (:1305-1306); their memory is profiled and subtracted before the KV
    pool is sized from 0.26 (``rocm_graph_estimate``), skipped on ROCm in 0.20-0.25, so the
    graphs come out of what the pool leaves. TensorRT-LLM has no ROCm build. Empty for any
    other GPU."""
    if gpu is None or gpu.vendor != "amd":
        return []
    r = rules or NEWEST
    if not r.subtracts_cuda_graphs:
        graphs = "captured after the KV pool is sized, as on CUDA in this release"
    elif r.rocm_graph_estimate:
        graphs = "profiled and subtracted before the KV pool is sized, as on CUDA (from 0.26)"
    else:
        graphs = (
            "not profiled before the KV pool is sized on ROCm in 0.20-0.25: they come out "
            "of what the pool leaves"
        )
    return [
        f"{gpu.name} ({gpu.gfx_target}) runs vLLM's ROCm build with the same flags: attention "
        "is ROCM_ATTN (TRITON_MLA for MLA models; VLLM_ROCM_USE_AITER=1 adds AITER's kernels "
        "behind it, ahead of it for MLA and on RDNA4); the sampler is vLLM's native one "
        f"(FlashInfer's is CUDA-only); HIP graphs are captured as CUDA graphs are, {graphs}",
        f"TensorRT-LLM runs on NVIDIA GPUs only: no trtllm command or figures for {gpu.name}",
    ]


def vllm_parallel_flags(settings: ServeSettings) -> list[str]:
    """``vllm serve`` flags for data, expert and decode-context parallelism and speculative
    decoding, as vLLM 0.33 spells them (``--enable-eplb --eplb-config`` for redundant
    experts; the speculative config as one JSON word)."""
    words: list[str] = []
    if settings.dp > 1:
        words += ["--data-parallel-size", str(settings.dp)]
    if settings.enable_expert_parallel:
        words += ["--enable-expert-parallel"]
    if settings.num_redundant_experts:
        words += eplb_flags(settings.num_redundant_experts)
    if settings.dcp > 1:
        words += ["--decode-context-parallel-size", str(settings.dcp)]
    if settings.disable_custom_all_reduce:
        words += ["--disable-custom-all-reduce"]
    if settings.disable_extensible_kv_cache and settings.rules.extensible_kv_cache:
        words += ["--disable-extensible-kv-cache"]  # a flag from 0.34 on
    if settings.all2all_backend != "allgather_reducescatter":
        words += ["--all2all-backend", settings.all2all_backend]
    if settings.speculative is not None:
        words += ["--speculative-config", settings.speculative.as_json()]
    return words


def vllm_memory_flags(settings: ServeSettings) -> list[str]:
    """``vllm serve`` flags for LoRA, weight offload and the CPU KV tier, as vLLM 0.33 spells
    them: ``--enable-lora --max-loras N --max-lora-rank R [--lora-target-modules m ...]
    [--fully-sharded-loras] [--max-cpu-loras C] [--lora-modules NAME=PATH]``, ``--cpu-offload-gb
    X``, ``--kv-offloading-size S --kv-offloading-backend B``. The rank is the one the plan
    sized (an adapter's, rounded up) and the targets the ones it allocated."""
    words: list[str] = []
    if settings.enable_lora:
        words += ["--enable-lora", "--max-loras", str(settings.max_loras)]
        words += ["--max-lora-rank", str(settings.lora_rank)]
        if settings.lora_target_modules:
            words += ["--lora-target-modules", *settings.lora_target_modules]
        if settings.fully_sharded_loras:
            words += ["--fully-sharded-loras"]
        if settings.max_cpu_loras is not None:
            words += ["--max-cpu-loras", str(settings.max_cpu_loras)]
        adapter = settings.lora_adapter
        if adapter is not None:
            words += ["--lora-modules", f"{adapter.name}={adapter.path}"]
    if settings.cpu_offload_gb:
        words += ["--cpu-offload-gb", _gib(settings.cpu_offload_gb)]
    if settings.kv_offloading_size is not None:
        words += ["--kv-offloading-size", _gib(settings.kv_offloading_size)]
        words += ["--kv-offloading-backend", settings.kv_offloading_backend]
    return words


def _gib(value: float) -> str:
    """A GiB figure as the flag takes it, never in exponent form: 64.0 -> 64, 0.5 -> 0.5."""
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return text or "0"


def vllm_mm_flags(settings: ServeSettings) -> list[str]:
    """``vllm serve`` flags for a multimodal model's settings, as vLLM 0.33 spells them (the
    dicts as one JSON word each); kvplan's own --mm-tokens-per-item and
    --mm-encoder-activation are not vLLM's and stay out."""
    words: list[str] = []
    if settings.language_model_only:
        words += ["--language-model-only"]
    if settings.limit_mm_per_prompt is not None:
        words += ["--limit-mm-per-prompt", settings.limit_mm_per_prompt.as_json()]
    if settings.mm_processor_kwargs is not None:
        words += ["--mm-processor-kwargs", settings.mm_processor_kwargs.as_json()]
    if settings.mm_encoder_tp_mode != "weights":
        words += ["--mm-encoder-tp-mode", settings.mm_encoder_tp_mode]
    if settings.skip_mm_profiling:
        words += ["--skip-mm-profiling"]
    return words


def _at_full_length(
    engine: str, fit: int, cap: EngineCapacity, length: int, notes: list[str]
) -> int:
    """``fit``, the requests of ``length`` tokens the engine's pool holds at once; 0 adds a note
    (the command then keeps the engine's default batch limit)."""
    if not fit:
        notes.append(
            f"{engine}'s KV pool ({cap.max_total_tokens:,} tokens) holds no request of "
            f"{length:,} tokens: its command keeps {engine}'s default batch limit"
        )
    return fit
