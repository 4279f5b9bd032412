"""Every serve setting, declared once (vLLM's ``EngineArgs`` fields with their metadata).

A :class:`Setting` names one field of :class:`planner.deployment.ServeSettings` and says
everything the rest of kvplan needs to know about it:

- what it is: ``kind`` (how a value is read and checked), ``unit``, ``help``, the default as
  the help shows it, the concern it belongs to (parallel, cache, scheduler, LoRA, offload,
  multimodal, speculative, release);
- how it is spelled: the ``kvplan``/``vllm serve`` flag (``cli``, plus kvplan's short ones),
  the plans-file key (``yaml``), the key vLLM's boot log states it under (``log``), and each
  engine's serve flag (``engines``) — or ``None`` with the reason in ``no_flag``.

The views built from :data:`SETTINGS`:

- ``planner.deployment.SPELLINGS`` (suggestions as flags or YAML; ``from_mapping``),
- the plans-file keys and their descriptions (``planner.check.plans.SCHEMA``) and the JSON Schema
  ``kvplan schema plans`` prints (:func:`plans_json_schema`),
- the settings a boot log may state (``planner.diagnose.boot_log.SETTING_KEYS``),
- the axes ``simulate --compare`` takes (:data:`COMPARE_AXES`),
- the command-line options of ``estimate``, ``verify`` and ``diagnose``
  (``planner.cli._options.serve_options``).

Adding a setting is one declaration here, its field on ``ServeSettings`` and its effect; the
test ``tests/test_settings_registry.py`` walks every declaration through the CLI, a plans
file, a boot log and the emitted commands.

This module imports nothing from kvplan: every layer may read it.
"""

from __future__ import annotations

from typing import Any

from planner.config.setting import ENGINES, PLANNING, Command, EngineName, Kind, Setting, Spelling


def _engines(
    vllm: str | None, sglang: str | None, trtllm: str | None
) -> dict[EngineName, str | None]:
    return {"vllm": vllm, "sglang": sglang, "trtllm": trtllm}


_VLLM_ONLY = "sized for vLLM only: kvplan refuses the setting with another engine"
_KVPLAN = "kvplan's own input, not an engine flag"
_NO_DP_TRT = "trtllm-serve has no data-parallel flag (attention DP lives in its options file)"

# vLLM 0.33's --all2all-backend choices (vllm/config/parallel.py All2AllBackend; pplx and naive
# are turned into allgather_reducescatter).
ALL2ALL_BACKENDS: tuple[str, ...] = (
    "allgather_reducescatter",
    "naive",
    "pplx",
    "deepep_high_throughput",
    "deepep_low_latency",
    "deepep_v2",
    "mori_high_throughput",
    "mori_low_latency",
    "moonep",
    "nixl_ep",
    "flashinfer_all2allv",
    "flashinfer_nvlink_two_sided",
    "flashinfer_nvlink_one_sided",
)
# vLLM 0.33's --kv-offloading-backend choices (vllm/config/cache.py).
KV_OFFLOADING_BACKENDS: tuple[str, ...] = ("native", "lmcache")
KV_DTYPES: tuple[str, ...] = ("auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "fp32")

SETTINGS: tuple[Setting, ...] = (
    # Declaration order is the order diagnose lists a log's settings and a plans file checks
    # them: the settings vLLM logs first (as diagnose listed them before the registry), then
    # kvplan's own inputs.
    Setting(
        name="engine",
        kind="choice",
        choices=("vllm", "sglang", "trtllm", "hf"),
        help="vllm, sglang, trtllm or hf.",
        default="vllm",
        cli="--engine",
        yaml="engine",
        log=None,
        concern="engine",
        engines=_engines(None, None, None),
        no_flag={e: "the engine is the program the command runs" for e in ENGINES},
        commands=frozenset({"estimate"}),
        example="sglang",
    ),
    Setting(
        name="vllm_version",
        kind="version",
        help="vLLM release whose rules to follow (default gpu_memory_utilization, CUDA-graph "
        "subtraction, batch defaults, log wording).",
        default="0.33.0, the newest kvplan knows",
        cli="--vllm-version",
        yaml="vllm_version",
        log=None,
        concern="release",
        engines=_engines(None, None, None),
        no_flag={
            "vllm": "the release is the one installed, not a flag",
            "sglang": _KVPLAN,
            "trtllm": _KVPLAN,
        },
        commands=frozenset({"estimate", "simulate", "diagnose"}),
        example="0.10.2",
    ),
    Setting(
        name="entrypoint",
        kind="choice",
        choices=("serve", "llm"),
        help="serve (vllm serve) or llm (the LLM class): vLLM's batch defaults differ.",
        default="serve",
        cli="--entrypoint",
        yaml="entrypoint",
        log=None,
        concern="release",
        engines=_engines(None, None, None),
        no_flag={
            "vllm": "the LLM class is Python, not vllm serve",
            "sglang": _KVPLAN,
            "trtllm": _KVPLAN,
        },
        commands=frozenset({"estimate"}),
        example="llm",
    ),
    Setting(
        name="tp",
        kind="count",
        help="Tensor-parallel size.",
        default="1",
        cli="--tensor-parallel-size",
        short=("--tp",),
        yaml="tp",
        log="tensor_parallel_size",
        concern="parallel",
        engines=_engines("--tensor-parallel-size", "--tp-size", "--tensor_parallel_size"),
        example=2,
    ),
    Setting(
        name="pp",
        kind="count",
        help="Pipeline-parallel size.",
        default="1",
        cli="--pipeline-parallel-size",
        short=("--pp",),
        yaml="pp",
        log="pipeline_parallel_size",
        concern="parallel",
        engines=_engines("--pipeline-parallel-size", "--pp-size", "--pipeline_parallel_size"),
        commands=frozenset({"estimate", "diagnose"}),
        example=2,
    ),
    Setting(
        name="dp",
        kind="count",
        help="Data-parallel size: engines with their own KV pool and --max-num-seqs each; "
        "routed experts shard over dp x tp GPUs.",
        default="1",
        cli="--data-parallel-size",
        short=("--dp",),
        yaml="dp",
        log="data_parallel_size",
        concern="parallel",
        engines=_engines("--data-parallel-size", "--dp-size", None),
        no_flag={"trtllm": _NO_DP_TRT},
        commands=PLANNING,
        example=2,
    ),
    Setting(
        name="enable_expert_parallel",
        kind="bool",
        help="Whole experts per GPU (EP = dp x tp) instead of TP-sharded experts.",
        cli="--enable-expert-parallel",
        yaml="enable_expert_parallel",
        log="enable_expert_parallel",
        concern="parallel",
        engines=_engines("--enable-expert-parallel", "--ep-size", None),
        no_flag={"trtllm": "kvplan writes no TRT-LLM expert-parallel command"},
        commands=PLANNING,
        example=True,
    ),
    Setting(
        name="max_model_len",
        kind="length",
        help="The context length of a request; -1 is vLLM's auto-fit: the longest that fits the KV "
        "pool.",
        default="the model's",
        cli="--max-model-len",
        yaml="max_model_len",
        log="max_model_len",
        concern="scheduler",
        engines=_engines("--max-model-len", "--context-length", "--max_seq_len"),
        example=16384,
    ),
    Setting(
        name="gpu_memory_utilization",
        kind="fraction",
        help="vLLM's fraction of GPU memory; with SGLang its --mem-fraction-static, with "
        "TRT-LLM its free-memory fraction.",
        default="0.92 (vLLM 0.33)",
        cli="--gpu-memory-utilization",
        yaml="gpu_memory_utilization",
        log="gpu_memory_utilization",
        concern="cache",
        engines=_engines(
            "--gpu-memory-utilization", "--mem-fraction-static", "--free_gpu_memory_fraction"
        ),
        example=0.85,
    ),
    Setting(
        name="kv_cache_dtype",
        kind="choice",
        choices=KV_DTYPES,
        help="auto, fp16, bf16, fp8, fp8_e4m3, fp8_e5m2, int8 (not vllm/sglang), fp32 (hf only).",
        default="auto",
        cli="--kv-cache-dtype",
        yaml="kv_cache_dtype",
        log="kv_cache_dtype",
        concern="cache",
        # TRT-LLM takes the dtype only in its options file (kv_cache_config.dtype)
        engines=_engines("--kv-cache-dtype", "--kv-cache-dtype", "--config"),
        axis="kv-cache-dtype",
        example="fp8",
    ),
    Setting(
        name="max_num_batched_tokens",
        kind="count",
        help="vLLM tokens per step; sets sliding-window KV in flight.",
        default="vllm serve's, 2048 when no GPU is named",
        cli="--max-num-batched-tokens",
        yaml="max_num_batched_tokens",
        log="max_num_batched_tokens",
        concern="scheduler",
        engines=_engines("--max-num-batched-tokens", "--chunked-prefill-size", "--max_num_tokens"),
        axis="max-num-batched-tokens",
        example=4096,
    ),
    Setting(
        name="max_num_seqs",
        kind="count",
        help="Concurrent sequences (SGLang's --max-running-requests, TRT-LLM's --max_batch_size).",
        default="the engine's",
        cli="--max-num-seqs",
        yaml="max_num_seqs",
        log="max_num_seqs",
        concern="scheduler",
        engines=_engines("--max-num-seqs", "--max-running-requests", "--max_batch_size"),
        axis="max-num-seqs",
        example=64,
    ),
    Setting(
        name="enforce_eager",
        kind="eager",
        help="No CUDA graphs (0 bytes).",
        cli="--enforce-eager",
        yaml="enforce_eager",
        log="enforce_eager",
        concern="cache",
        engines=_engines("--enforce-eager", None, None),
        no_flag={
            "sglang": "SGLang 0.5.23 deprecates --disable-cuda-graph (server_args.py:411) for "
            "--cuda-graph-backend-{decode,prefill}=disabled; kvplan sizes SGLang's graphs "
            "inside its mem_fraction_static reserve and writes no graph flag",
            "trtllm": "kvplan sizes TRT-LLM's graphs at its defaults",
        },
        commands=frozenset({"estimate", "simulate", "diagnose"}),
        example=True,
    ),
    Setting(
        name="enable_prefix_caching",
        kind="bool",
        negatable=True,
        help="vLLM prefix caching (hybrid models keep extra Mamba pages when on).",
        default="the release's: on; off for Mamba-only models, and for hybrids before 0.26",
        cli="--enable-prefix-caching",
        yaml="enable_prefix_caching",
        log="enable_prefix_caching",
        concern="cache",
        engines=_engines("--enable-prefix-caching", None, None),
        no_flag={
            "sglang": "SGLang's radix cache holds no extra pages kvplan sizes",
            "trtllm": "TRT-LLM's block reuse holds no extra pages kvplan sizes",
        },
        axis="prefix-caching",
        example=False,
    ),
    Setting(
        name="block_size",
        kind="count",
        help="Tokens per block.",
        default="vllm 16, trtllm 32, sglang/hf 1",
        cli="--block-size",
        yaml="block_size",
        log="block_size",
        concern="cache",
        engines=_engines("--block-size", None, None),
        no_flag={
            "sglang": "SGLang's page size is sized as 1 token (its default); kvplan writes "
            "no --page-size",
            "trtllm": "TRT-LLM's tokens_per_block is sized at its default 32",
        },
        axis="block-size",
        example=32,
    ),
    Setting(
        name="limit_mm_per_prompt",
        kind="json",
        help='vLLM\'s items per prompt by modality, e.g. \'{"image":2,"video":0}\'; 0 for '
        "every modality builds no vision tower.",
        default="999 each",
        cli="--limit-mm-per-prompt",
        yaml="limit_mm_per_prompt",
        log="limit_mm_per_prompt",
        concern="multimodal",
        engines=_engines("--limit-mm-per-prompt", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=PLANNING,
        example={"image": 2, "video": 0},
    ),
    Setting(
        name="language_model_only",
        kind="bool",
        help="Text only: no vision tower, no encoder cache (vLLM's flag).",
        cli="--language-model-only",
        yaml="language_model_only",
        log="language_model_only",
        concern="multimodal",
        engines=_engines("--language-model-only", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=PLANNING,
        example=True,
    ),
    Setting(
        name="mm_encoder_tp_mode",
        kind="choice",
        choices=("weights", "data"),
        help="weights (the vision tower TP-sharded) or data (a whole copy on each TP rank, "
        "images split across ranks).",
        default="weights",
        cli="--mm-encoder-tp-mode",
        yaml="mm_encoder_tp_mode",
        log="mm_encoder_tp_mode",
        concern="multimodal",
        engines=_engines("--mm-encoder-tp-mode", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example="data",
    ),
    Setting(
        name="skip_mm_profiling",
        kind="bool",
        help="vLLM leaves the encoder out of its profile run: more KV, at your risk.",
        cli="--skip-mm-profiling",
        yaml="skip_mm_profiling",
        log="skip_mm_profiling",
        concern="multimodal",
        engines=_engines("--skip-mm-profiling", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example=True,
    ),
    Setting(
        name="mm_processor_kwargs",
        kind="json",
        help="vLLM's processor overrides, e.g. '{\"max_pixels\":1003520}' (Qwen-VL pixels "
        "per image; sets the tokens per image).",
        cli="--mm-processor-kwargs",
        yaml="mm_processor_kwargs",
        log="mm_processor_kwargs",
        concern="multimodal",
        engines=_engines("--mm-processor-kwargs", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example={"max_pixels": 1003520},
    ),
    Setting(
        name="enable_lora",
        kind="bool",
        help="vLLM LoRA: max_loras x max_lora_rank buffers for every target module, counted as "
        "weights.",
        cli="--enable-lora",
        yaml="enable_lora",
        log="enable_lora",
        concern="lora",
        engines=_engines("--enable-lora", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=PLANNING,
        example=True,
    ),
    Setting(
        name="max_loras",
        kind="count",
        help="LoRA slots on the GPU.",
        default="1",
        cli="--max-loras",
        yaml="max_loras",
        log="max_loras",
        concern="lora",
        engines=_engines("--max-loras", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=PLANNING,
        example=4,
    ),
    Setting(
        name="max_lora_rank",
        kind="count",
        help="1, 8, 16, 32, 64, 128, 256, 320 or 512.",
        default="the adapter's r rounded up, else 16",
        cli="--max-lora-rank",
        yaml="max_lora_rank",
        log="max_lora_rank",
        concern="lora",
        engines=_engines("--max-lora-rank", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=PLANNING,
        example=64,
    ),
    Setting(
        name="fully_sharded_loras",
        kind="bool",
        help="Shard the LoRA rank over TP too.",
        cli="--fully-sharded-loras",
        yaml="fully_sharded_loras",
        log="fully_sharded_loras",
        concern="lora",
        engines=_engines("--fully-sharded-loras", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example=True,
    ),
    Setting(
        name="max_cpu_loras",
        kind="count",
        help="Adapters each worker keeps in host RAM.",
        default="--max-loras",
        cli="--max-cpu-loras",
        yaml="max_cpu_loras",
        log="max_cpu_loras",
        concern="lora",
        engines=_engines("--max-cpu-loras", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example=8,
    ),
    Setting(
        name="cpu_offload_gb",
        kind="gib",
        unit="GiB",
        help="GiB of weights per GPU vLLM keeps in pinned host RAM (UVA), read over PCIe.",
        default="0",
        cli="--cpu-offload-gb",
        yaml="cpu_offload_gb",
        log="cpu_offload_gb",
        concern="offload",
        engines=_engines("--cpu-offload-gb", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=PLANNING,
        example=4.0,
    ),
    Setting(
        name="kv_offloading_size",
        kind="gib",
        unit="GiB",
        help="GiB of CPU KV tier for the engine (summed over its TP ranks): prefix-cache "
        "blocks kept in host RAM.",
        cli="--kv-offloading-size",
        yaml="kv_offloading_size",
        log="kv_offloading_size",
        concern="offload",
        engines=_engines("--kv-offloading-size", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=PLANNING,
        example=64.0,
    ),
    Setting(
        name="kv_offloading_backend",
        kind="choice",
        choices=KV_OFFLOADING_BACKENDS,
        help="native or lmcache.",
        default="native",
        cli="--kv-offloading-backend",
        yaml="kv_offloading_backend",
        log="kv_offloading_backend",
        concern="offload",
        engines=_engines("--kv-offloading-backend", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=PLANNING,
    ),
    Setting(
        name="speculative",
        kind="json",
        help='vLLM\'s JSON, e.g. \'{"method":"mtp","num_speculative_tokens":1}\' or '
        '\'{"method":"eagle","model":"yuhuili/EAGLE-LLaMA3.1-Instruct-8B",'
        '"num_speculative_tokens":3}\' (model: a Hub id, catalog name or local dir).',
        cli="--speculative-config",
        yaml="speculative_config",
        log="speculative_config",
        concern="speculative",
        engines=_engines("--speculative-config", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=PLANNING,
        example={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3},
    ),
    Setting(
        name="runner",
        kind="choice",
        choices=("generate", "pooling"),
        help="generate or pooling (embedding/reward models: no sampler warm-up).",
        default="generate",
        cli="--runner",
        yaml="runner",
        log="runner",
        concern="release",
        engines=_engines(None, None, None),
        no_flag={
            "vllm": "vLLM's --runner auto picks pooling for the embedding and reward "
            "architectures kvplan plans as pooling",
            "sglang": "sized for vLLM's runners only",
            "trtllm": "sized for vLLM only",
        },
        commands=frozenset({"estimate"}),
        example="pooling",
    ),
    Setting(
        name="dcp",
        kind="count",
        help="Decode-context-parallel size (divides --tp): KV split over dcp TP ranks.",
        default="1",
        cli="--decode-context-parallel-size",
        short=("--dcp",),
        yaml="dcp",
        log="decode_context_parallel_size",
        concern="parallel",
        engines=_engines("--decode-context-parallel-size", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example=2,
    ),
    Setting(
        name="all2all_backend",
        kind="choice",
        choices=ALL2ALL_BACKENDS,
        help="vLLM's MoE all-to-all backend; DeepEP ones reserve 1 GiB per GPU outside torch.",
        default="allgather_reducescatter",
        cli="--all2all-backend",
        yaml="all2all_backend",
        log="all2all_backend",
        concern="parallel",
        engines=_engines("--all2all-backend", None, None),
        no_flag={"sglang": "sized for vLLM's backends only", "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example="deepep_high_throughput",
    ),
    Setting(
        name="lora_target_modules",
        kind="modules",
        help="Only these modules get LoRA buffers (qkv_proj o_proj ..., or the PEFT names "
        "q_proj ...), space- or comma-separated, after MODEL.",
        default="every module, or the adapter's",
        cli="--lora-target-modules",
        yaml="lora_target_modules",
        log="lora_target_modules",
        concern="lora",
        engines=_engines("--lora-target-modules", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example=["qkv_proj", "o_proj"],
    ),
    Setting(
        name="kv_cache_memory_bytes",
        kind="size",
        help="KV budget per GPU, like vLLM's --kv-cache-memory-bytes (ignores "
        "gpu_memory_utilization).",
        cli="--kv-cache-memory",
        yaml="kv_cache_memory",
        log="kv_cache_memory_bytes",
        concern="cache",
        engines=_engines("--kv-cache-memory-bytes", None, None),
        no_flag={
            "sglang": "SGLang sizes its pool by --mem-fraction-static only",
            "trtllm": "kvplan sizes TRT-LLM's pool by its free-memory fraction",
        },
        commands=frozenset({"estimate", "simulate", "diagnose"}),
        example="20GiB",
    ),
    Setting(
        name="disable_custom_all_reduce",
        kind="bool",
        help="vLLM's custom all-reduce off (NCCL only): its 24 MiB of buffers leave non-torch "
        "memory.",
        cli="--disable-custom-all-reduce",
        yaml="disable_custom_all_reduce",
        log="disable_custom_all_reduce",
        concern="parallel",
        engines=_engines("--disable-custom-all-reduce", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example=True,
    ),
    Setting(
        name="disable_extensible_kv_cache",
        kind="bool",
        help="vLLM >= 0.34 without its extensible KV cache: the pool sized from the profile run "
        "(gpu_memory_utilization 0.92), not from the memory measured after warm-up.",
        cli="--disable-extensible-kv-cache",
        yaml="disable_extensible_kv_cache",
        log=None,
        concern="cache",
        engines=_engines("--enable-extensible-kv-cache", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example=True,
    ),
    Setting(
        name="interconnect",
        kind="choice",
        choices=("nvlink", "xgmi", "pcie"),
        help="How the GPUs talk, for vLLM's non-torch memory and the step times.",
        default="the catalog's, else nvlink",
        cli="--interconnect",
        yaml="interconnect",
        log=None,
        concern="parallel",
        engines=_engines(None, None, None),
        no_flag={e: "a fact of the machine, not an engine flag" for e in ENGINES},
        commands=frozenset({"estimate"}),
        example="pcie",
    ),
    Setting(
        name="sampler",
        kind="choice",
        choices=("flashinfer", "native"),
        help="The top-k/top-p sampler vLLM runs (its warm-up is in the activation peak): "
        "flashinfer, or vLLM's native one (the sort to 0.16, Triton from 0.17).",
        default="the release's: native to 0.23, flashinfer from 0.24",
        cli="--sampler",
        yaml="sampler",
        log=None,
        concern="release",
        engines=_engines(None, None, None),
        no_flag={
            "vllm": "VLLM_USE_FLASHINFER_SAMPLER and whether FlashInfer is installed decide it",
            "sglang": _VLLM_ONLY,
            "trtllm": _VLLM_ONLY,
        },
        commands=frozenset({"estimate"}),
        example="flashinfer",
    ),
    Setting(
        name="mxfp4_backend",
        kind="choice",
        choices=("marlin", "triton"),
        help="The MoE kernel vLLM runs gpt-oss's MXFP4 experts on (Marlin pads them; the boot "
        "log says 'Using Marlin backend'): marlin, or triton (Hopper and newer only).",
        default="marlin below compute capability 9.0, else triton",
        cli="--mxfp4-backend",
        yaml="mxfp4_backend",
        log=None,
        concern="release",
        engines=_engines(None, None, None),
        no_flag={
            "vllm": "whether the triton_kernels package is installed decides it",
            "sglang": _VLLM_ONLY,
            "trtllm": _VLLM_ONLY,
        },
        commands=frozenset({"estimate"}),
        example="marlin",
    ),
    Setting(
        name="gpu_free_memory_bytes",
        kind="size",
        help="Memory free on the GPU before vLLM starts (another process holds the rest).",
        default="the GPU's total less the CUDA context",
        cli="--gpu-free-memory",
        yaml="gpu_free_memory",
        log=None,
        concern="cache",
        engines=_engines(None, None, None),
        no_flag={e: "a fact of the machine, not an engine flag" for e in ENGINES},
        commands=frozenset({"estimate"}),
        example="60GiB",
    ),
    Setting(
        name="num_redundant_experts",
        kind="count0",
        help="EPLB redundant experts (global; needs --enable-expert-parallel); vLLM's "
        "--enable-eplb --eplb-config '{\"num_redundant_experts\": R}'.",
        default="0",
        cli="--num-redundant-experts",
        yaml="num_redundant_experts",
        log=None,
        concern="parallel",
        engines=_engines("--eplb-config", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
        example=8,
    ),
    Setting(
        name="lora_adapter",
        kind="path",
        help="A PEFT adapter folder (adapter_config.json): its r and target_modules size the "
        "buffers; the command serves it with --lora-modules.",
        cli="--lora-adapter",
        yaml="lora_adapter",
        log=None,
        concern="lora",
        engines=_engines("--lora-modules", None, None),
        no_flag={"sglang": _VLLM_ONLY, "trtllm": _VLLM_ONLY},
        commands=frozenset({"estimate"}),
    ),
    Setting(
        name="mm_tokens_per_item",
        kind="json",
        help="Tokens of the largest image/video item when kvplan cannot derive them (no "
        "preprocessor_config.json): a number, or JSON by modality.",
        cli="--mm-tokens-per-item",
        yaml="mm_tokens_per_item",
        log=None,
        concern="multimodal",
        engines=_engines(None, None, None),
        no_flag={e: _KVPLAN for e in ENGINES},
        commands=frozenset({"estimate"}),
    ),
    Setting(
        name="mm_encoder_activation_bytes",
        kind="size",
        help="The vision tower's activation in vLLM's profile run (e.g. 6GiB), instead of "
        "kvplan's estimate from its shapes.",
        cli="--mm-encoder-activation",
        yaml="mm_encoder_activation",
        log=None,
        concern="multimodal",
        engines=_engines(None, None, None),
        no_flag={e: _KVPLAN for e in ENGINES},
        commands=frozenset({"estimate"}),
    ),
    Setting(
        name="cuda_graph_bytes",
        kind="size",
        help="CUDA-graph memory vLLM subtracts.",
        default="an estimate from the captured sizes",
        cli="--cuda-graph-memory",
        yaml="cuda_graph_memory",
        log=None,
        concern="cache",
        engines=_engines(None, None, None),
        no_flag={e: _KVPLAN for e in ENGINES},
        commands=frozenset({"estimate"}),
        example="1GiB",
    ),
    Setting(
        name="headroom_bytes",
        kind="size",
        help="Memory to keep free on top of vLLM's budget.",
        default="0",
        cli="--headroom",
        yaml="headroom",
        log=None,
        concern="cache",
        engines=_engines(None, None, None),
        no_flag={e: _KVPLAN for e in ENGINES},
        commands=frozenset({"estimate", "diagnose"}),
        example="2GiB",
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
# simulate --compare KEY -> the setting it varies, in the order variants are built
COMPARE_AXES: dict[str, Setting] = {s.axis: s for s in SETTINGS if s.axis}


def setting(name: str) -> Setting:
    """The declaration of setting ``name`` (a ServeSettings field)."""
    return BY_NAME[name]


def by_spelling(spelling: Spelling) -> dict[str, Setting]:
    """Settings keyed by how ``spelling`` names them (plans-file keys, log keys, flags)."""
    out: dict[str, Setting] = {}
    for s in SETTINGS:
        key = s.spelled(spelling)
        if key:
            out[key] = s
    return out


def names_of(kind: Kind) -> tuple[str, ...]:
    """The settings of one kind (``count``, ``bool`` ...)."""
    return tuple(s.name for s in SETTINGS if s.kind == kind)


def log_keys() -> tuple[str, ...]:
    """The settings a vLLM boot log may state (``non-default args``), in declaration order."""
    return tuple(s.name for s in SETTINGS if s.log)


def for_command(command: Command) -> tuple[Setting, ...]:
    """The settings one command takes as options."""
    return tuple(s for s in SETTINGS if command in s.commands)


# --------------------------------------------------------------------------- JSON Schema

_JSON_TYPES: dict[Kind, dict[str, Any]] = {
    "count": {"type": "integer", "minimum": 1, "maximum": 1 << 40},
    "count0": {"type": "integer", "minimum": 0, "maximum": 1 << 40},
    "length": {"type": "integer", "minimum": 1, "maximum": 1 << 40},
    "bool": {"type": "boolean"},
    "eager": {"type": "boolean"},
    "fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "gib": {"type": "number", "minimum": 0},
    "size": {
        "oneOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": r"^\s*[0-9.]+\s*([KMGTPE]i?B|[kKMGTPE]B?)\s*$"},
        ]
    },
    "choice": {"type": "string"},
    "version": {"type": "string", "pattern": r"^\d+\.\d+(\.\d+)?"},
    "json": {"type": "object"},
    "modules": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "path": {"type": "string", "minLength": 1},
}


def settings_json_schema() -> dict[str, dict[str, Any]]:
    """Each setting's plans-file key -> its JSON Schema (type, bounds, choices, help)."""
    out: dict[str, dict[str, Any]] = {}
    for s in SETTINGS:
        schema = dict(_JSON_TYPES[s.kind])
        if s.choices:
            schema["enum"] = list(s.choices)
        if s.name == "mm_tokens_per_item":  # a number, or a mapping by modality
            schema = {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "object"}]}
        description = s.help + (f" [default: {s.default}]" if s.default else "")
        if s.unit:
            description += f" ({s.unit})"
        schema["description"] = description
        out[s.yaml] = schema
    return out
