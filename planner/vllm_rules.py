"""What changes with the vLLM release: the defaults and rules kvplan's budget follows per
version (``--vllm-version``; ``diagnose`` reads the version from the log).

Each :class:`VllmRules` row holds from its ``since`` release until the next row; 0.33.0's
row (:data:`NEWEST`) is what kvplan assumes when no version is given, the last one checked
against public start-up logs. Read in vLLM's released sources (0.8.5-0.34.0):

- ``default_gmu``: ``CacheConfig.gpu_memory_utilization``: 0.9 through 0.19.1, 0.92 from
  0.20.0 (``vllm/config/cache.py``);
- ``subtracts_cuda_graphs``: ``Worker.determine_available_memory`` subtracts the profiled
  CUDA-graph estimate from the KV budget by default from 0.20.0
  (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` "1" in ``envs.py``; opt-in in 0.18-0.19, and
  vLLM's own log text says "default since v0.21.0"); before, graphs were captured after the
  KV cache was sized and cost it nothing;
- ``a100_small``: A100s take the small-GPU batch defaults whatever their memory, from 0.9.0
  (``"a100" not in device_name``, PR #17885);
- ``large_gpu_tier``: GPUs of >= 160 GiB get their own (largest) batch defaults, from 0.28.0;
- ``one_line_capacity_log``: "GPU KV cache size: N tokens, Maximum concurrency for L tokens
  per request: X.XXx" is one line from 0.28.0 (``update_kv_cache_capacity``), two before;
- ``extensible_kv_cache``: from 0.34.0 the KV cache is sized *after* warm-up and CUDA-graph
  capture, from the memory measured then (``CacheConfig.enable_extensible_kv_cache``, on by
  default on CUDA and ROCm unless ``--kv-cache-memory-bytes`` or
  ``--disable-extensible-kv-cache``: ``config/vllm.py`` 0.34.0:3180-3263): the pool is
  ``min(requested - N, free - N - margin) - P`` where N is all vLLM holds but the KV cache
  (weights, non-torch, the captured graphs), P the transient peak it keeps free (the profile's
  activation) and ``margin = max(1 GiB (3 on ROCm), 0.75 x P)`` (``v1/worker/
  extensible_kv_cache.py`` 0.34.0:64-65, 592-618); gpu_memory_utilization defaults to 1.0
  there (``CacheConfig.resolved_gpu_memory_utilization``, ``config/cache.py`` 0.34.0:495-501)
  and the budget is a cap, never refused against free memory (``v1/worker/utils.py``
  0.34.0:783-796). No public 0.34 start-up log was found to check it against, so 0.33.0
  stays the default release.

The scheduler rules :mod:`planner.simulate` replays (``SimConfig`` takes them from here):

- ``async_scheduling``: ``SchedulerConfig.async_scheduling`` defaults to None from 0.14.0,
  which ``VllmConfig.__post_init__`` (``vllm/config/vllm.py``) turns on unless the runner is
  ``pooling`` (0.33), pipeline parallelism, a non-EAGLE speculator or an executor without
  support rules it out; through 0.13.0 it defaulted to False. The scheduler then plans step
  ``s + 1`` before step ``s``'s output is processed (``EngineCore.step_with_batch_queue``);
- ``reserve_full_isl``: ``SchedulerConfig.scheduler_reserve_full_isl``, True by default from
  0.19.0 (absent through 0.18.0): ``Scheduler.schedule`` admits a waiting or preempted request
  only when ``KVCacheManager.can_fit_full_sequence`` (0.19-0.32; from 0.33
  ``allocate_slots(full_sequence_must_fit=True)``) finds free blocks for all of its
  ``num_tokens``, not just the first chunk;
- ``prepend_uncached_free``: ``BlockPool.free_blocks`` puts freed blocks without a block
  hash (every block when prefix caching is off) at the front of the free queue
  (``FreeKVCacheBlockQueue.prepend_n``), cached ones at the back, from 0.24.0 (0.22.0 appended
  all of them; 0.23 was not checked).

The KV layout:

- ``window_in_flight``: a sliding-window (or chunked-local) layer reserves, per request,
  ``min(W - 1 + T, max_model_len)`` tokens plus one block, where from 0.26.0 ``T`` is
  ``VllmConfig.max_in_flight_tokens``, every concurrent batch's ``max_num_batched_tokens``
  (``max_concurrent_batches``: 2 with async scheduling; ``v1/kv_cache_interface.py``
  0.26.0:568-595, ``config/vllm.py`` 0.26.0:512-533), and through 0.25.0 one batch's
  (``max_memory_usage_bytes``: ``sliding_window - 1 + max_num_batched_tokens``, 0.10.0:188,
  0.19.0:262-270, 0.24.0:520-521). Public logs: dennislee22's gpt-oss-120b TP 4 run in
  0.10.1.1 (2,048 batched tokens) logs a concurrency of 284.25 for 16,384 tokens, 1,024 +
  137 blocks a request, and parallelworks' H200 TP 2 run in 0.15.1 32.56 for 131,072 (8,192
  + 521).

- ``hybrid_prefix_caching``: ``--enable-prefix-caching`` not given, vLLM turns prefix
  caching on by ``ModelConfig.is_prefix_caching_supported``, which is False for a hybrid
  model (``attn_type == "hybrid"``: Mamba or linear attention beside attention) through
  0.25.0 ("Hybrid models do not support prefix caching since the feature is still
  experimental", ``config/model.py`` 0.19.0:1785-1790, 0.25.0:1883-1887; 0.10.2 logs
  "Hybrid or mamba-based model detected: disabling prefix caching") and True from 0.26.0
  (0.26.0:1895-1897). Off, the Mamba cache mode is "none": one state block a request, not
  "align"'s two (``MambaModelConfig``, ``model_executor/models/config.py`` 0.19.0:436-480;
  ``MambaSpec.max_memory_usage_bytes``, ``kv_cache_interface.py`` 0.19.0:293-300).
  leadawon/LAMBO's Qwen3.5-27B runs in 0.19.0 log the concurrency of 45 blocks a request (3
  Gated DeltaNet groups x 1 + 42), not 48.

The multimodal encoder's share of the profile run (:mod:`planner.multimodal`):

- ``encoder_output_padding``: what the profile run keeps in the encoder cache while the
  language model's dummy batch runs. Through 0.10 and from 0.13.0 the dummy items' outputs
  as the tower returns them (``self.encoder_cache["tmp"] = dict(enumerate(
  dummy_encoder_outputs))``, ``v1/worker/gpu_model_runner.py`` 0.10.2:3025-3027;
  ``self.encoder_cache[f"tmp_{i}"] = output``, 0.13.0:4470-4471, 0.19.0:5778-5779). In 0.11
  each output shorter than the encoder budget is first copied into a zeroed tensor of
  ``encoder_budget`` rows (``"budget"``: ``output.new_zeros((encoder_budget, ...))``,
  0.11.0:3369-3384, 0.11.2:4113-4129), in 0.12 of the modality's largest-item rows
  (``"item"``: ``max_mm_tokens_per_item``, 0.12.0:4331-4351). Qwen3-VL's video in 0.11-0.12
  is the case that pads (next rule): sipeed's 4 x RTX 3090 Qwen3-VL-30B-A3B start-up in
  0.11.0 (held out) leaves 4.14 GiB beside weights and pool where the language model's
  activation and non-torch take 1.82: the 2.32 GiB difference is 153,600 rows x 8,192 x 2 B
  = 2.34 GiB.
- ``qwen3_vl_video_text``: Qwen3-VL's largest video item counts its timestamp text, 12.5
  tokens for each token the encoder outputs ("one video token is converted to '<{timestamp}
  seconds>' (on average 9.5 tokens) + vision_start_token + video_token + vision_end_token",
  ``formatted_video_soft_tokens = video_soft_tokens * 12.5``, ``models/qwen3_vl.py``
  0.11.0:674, 0.11.2:715, 0.12.0:708), so the encoder budget is 12,288 x 12.5 = 153,600
  tokens with the checkpoint's video processor (its ``longest_edge`` 25,165,824 pixels over 2
  frames of 32-pixel tokens: 12,288), the figure both public 0.11 start-ups log, while the
  tower encodes 12,288 tokens; from 0.13.0 the item is the encoder's tokens
  (``get_max_video_tokens``, 0.13.0:710-722, 0.19.0:786-812).

The batch defaults themselves (``EngineArgs.get_batch_defaults``, 0.33), by usage context —
``vllm serve`` (``OPENAI_API_SERVER``) or the ``LLM`` class (``LLM_CLASS``):

=================================  ====================  ====================
GPU                                ``vllm serve``        ``LLM`` class
=================================  ====================  ====================
>= 160 GiB (B200, B300)            16,384 / 1,024        16,384 / 1,024
>= 70 GiB, not an A100 (H100/H200) 8,192 / 1,024         16,384 / 1,024
otherwise (and A100s, unknown)     2,048 / 256           8,192 / 256
=================================  ====================  ====================

(max_num_batched_tokens / max_num_seqs). Then vLLM caps the token budget at
``max_num_seqs x max_model_len`` and ``max_num_seqs`` at the token budget.

The start-up budget (:mod:`planner.budget`) follows these rows too; each cites the released
source it rests on (``pip download --no-deps vllm==X``; paths under ``vllm/``):

- ``sampler``: which top-k/top-p implementation the sampler warm-up runs, hence how many
  fp32-logits-sized copies (``rows x vocab x 4 B``) are alive at its peak. Every release
  0.10-0.33 runs that warm-up twice: inside the profile (``GPUModelRunner.profile_run`` calls
  ``_dummy_sampler_run(last_hidden_states)``, ``v1/worker/gpu_model_runner.py`` 0.11.0:3397,
  0.19.0:5789, 0.33.0:6139, over ``min(max_num_batched_tokens, max_num_seqs)`` rows: the
  ``_dummy_run`` batch, 0.19.0:5286, its last-token rows 0.19.0:5549-5553) so it is
  counted in the activation peak, and again after the KV cache is allocated
  (``Worker.compile_or_warm_up_model``, ``v1/worker/gpu_worker.py`` 0.11.0:413, 0.19.0:686,
  0.33.0:1090). The implementations:

  * ``"sort"`` through 0.16: ``apply_top_k_top_p`` sorts the fp32 logits (values + int64
    indices = 3 copies), softmaxes and scatters out of place (``v1/sample/ops/
    topk_topp_sampler.py`` 0.11.0:183-204), then ``random_sample`` softmaxes again and draws
    an exponential of the same size: 9.515 copies (fitted to CALIBRATION.md's six v0.11.0
    H100 rows; the sort's own scratch is the part not counted by hand);
  * ``"triton"`` from 0.17.0: ``apply_top_k_top_p`` masks in place with a Triton kernel for
    >= 8 rows (``topk_topp_sampler.py`` 0.17.0/0.17.1/0.18.0/0.19.0:251; 0.16.0 still sorts,
    :262, and ships no ``topk_topp_triton.py``; ``topk_topp_triton.py``: one
    ``num_sms x vocab`` scratch buffer): the model-dtype logits (0.5), their fp32 copy (1),
    the softmax (1) and the exponential (1) = 3.5 by hand; 3.70 fits the 0.19.0 H100
    start-ups issue 23 quotes (Llama-3.1-8B 1.89 GiB logged, gpt-oss-20b 2.87);
  * ``"flashinfer"`` from 0.24.0: ``VLLM_USE_FLASHINFER_SAMPLER`` defaults to True
    (``envs.py`` 0.24.0:796-800; None, i.e. off unless set, in 0.19-0.20) and
    ``forward_cuda`` hands the logits to FlashInfer's ``top_k_top_p_sampling_from_logits``
    (``topk_topp_sampler.py`` 0.27.1:182): the model-dtype logits and their fp32 copy, 1.5
    (0.21-0.23 not checked).

  Which one runs also depends on the install, and the log says which (``--sampler``,
  :attr:`VllmRules.native_sampler`): through 0.11.0 FlashInfer's sampler runs whenever the
  ``flashinfer`` package imports, unless ``VLLM_USE_FLASHINFER_SAMPLER=0``
  (``envs.VLLM_USE_FLASHINFER_SAMPLER is not False``, ``topk_topp_sampler.py`` 0.10.1.1:34-51,
  0.11.0:39-56; the log line "Using FlashInfer for top-p & top-k sampling."), and the
  sampler warm-up takes that path (its dummy metadata sets top-p 0.9, top-k vocab - 1 and no
  generators, ``gpu_model_runner.py`` 0.10.1.1:2445-2447, 0.11.0:3202-3204); but those wheels
  list FlashInfer as an extra only (``Provides-Extra: flashinfer``), so ``pip install vllm``
  runs the PyTorch sort ("FlashInfer is not available. Falling back to the PyTorch-native
  implementation"): kvplan's default. From 0.11.1 FlashInfer is a dependency and its sampler
  opt-in (``if envs.VLLM_USE_FLASHINFER_SAMPLER``, ``topk_topp_sampler.py`` 0.11.1:34-47)
  until 0.24 makes it the default. Public logs agree: dennislee22's 0.10.1.1 A100 runs with
  ``flashinfer-python`` installed log the FlashInfer line and ~1 GiB less activation than the
  sort gives (tests/data/vllm_startups.json), the same release's run without it logs the
  fallback and matches the sort.
- ``warmup_reuses_activation``: whether the post-allocation warm-up (and graph capture) can
  use the memory the profile's activation peak was sized for. True except 0.19: there
  gpt-oss-20b at gmu 0.95 on an H100 (issue 23's log) died warming up the sampler with
  552.50 MiB free, which is what is left of the 3.96 GiB outside the request once the CUDA
  context (~0.5 GiB), the captured graphs and the logits' first 1.5 copies are taken, i.e.
  with none of the 2.87 GiB activation reservation; 0.11.0 started gpt-oss-120b at 0.95 with
  a 7.38 GiB warm-up and 1.03 GiB of graphs (CALIBRATION.md), which only fits if it is reused.
  The mechanism in 0.19 was not found in the source. What its ``compile_or_warm_up_model``
  runs after the pool, in order (``gpu_worker.py`` 0.19.0): a forward at each compile range's
  end (:574-579), ``kernel_warmup`` (:584), the graph capture (:588), then the sampler
  warm-up over ``min(max_num_seqs, max_num_batched_tokens)`` rows, after the capture "on
  purpose to prevent memory buffers from being cleared by empty_cache" (:670-686): its
  buffers stay reserved; which of these keeps the activation headroom is the open question.
- ``rocm_sampler`` (:meth:`VllmRules.on_rocm`): on ROCm the sampler is always the release's
  native one. ``TopKTopPSampler.__init__`` takes FlashInfer's ``forward_cuda`` only under
  ``current_platform.is_cuda()``, which is False on ROCm (``v1/sample/ops/topk_topp_sampler.py``
  0.11.0:38, 0.19.0:37, 0.24.0:86, 0.33.0:242); the ROCm branch is AITER's ``forward_hip``
  only with ``VLLM_ROCM_USE_AITER=1`` (off by default, ``envs.py`` 0.33.0:1267-1268), and in
  0.19 that falls back to ``forward_native`` anyway (``DISABLE_AITER_SAMPLER = True``,
  0.19.0:180); otherwise ``forward_native``: the sort through 0.16, the Triton kernel from 0.17.
  FlashInfer's 1.5 copies (the default from 0.24) never apply to an AMD GPU, and
  ``--sampler flashinfer`` cannot make them.
- ``rocm_graph_estimate``: ROCm gets the CUDA-graph (HIP-graph) estimate subtracted from
  0.26.0: skipped on ROCm in 0.18-0.25 ("Skip on ROCm/HIP", ``gpu_worker.py`` 0.19.0:377;
  0.24.0:445; 0.25.0:475-483, ``if current_platform.is_cuda() and ...``), included from
  0.26.0 ("ROCm is included: #44825 moved the profiler to torch.accelerator.get_memory_info",
  ``is_cuda_alike()``, ``gpu_worker.py`` 0.26.0:495-502, 0.27.1:507, 0.33.0:703-715). The
  graphs themselves are the same on ROCm: ``get_static_graph_wrapper_cls`` is
  ``CUDAGraphWrapper`` (``platforms/rocm.py`` 0.33.0:1305-1306), capturing HIP graphs. Where
  the estimate is skipped the graphs are captured after sizing, as before 0.20 everywhere.
- ``non_torch_single_bytes`` / ``non_torch_comm_bytes``: memory outside torch's allocator
  that appears during the profile (``memory_profiling``'s ``non_torch_increase``,
  ``utils/mem_utils.py``) on a rank that talks to no other, and what a tensor-parallel group
  (or an expert-parallel one) adds per rank over NVLink/xGMI and over PCIe. Measured, not
  read, and each an *estimate* with the spread the cited logs show (``planner.budget``'s
  ranges; tests/data/vllm_startups.json):

  * through 0.18: 0.13 alone and +0.42 over NVLink (CALIBRATION.md, v0.11.0 H100: 0.13 at
    TP 1, 0.55 at TP 2); +0.28 over PCIe, set on dennislee22's 0.10.1.1 A100 TP 2 run
    without P2P (calibration record: 0.25 x 79.15 - 7.12 - 12.02 = 0.65 GiB of activation
    and non-torch, 0.26 of it the FlashInfer-sampler activation). Cited spread alone: 0.02
    (24 GB card, 0.10.2) to 0.13 (H100, 0.11.0); in a PCIe group 0.0 to 0.4: a 4 x RTX 3090
    box in 0.18.1 logs 0.12 GiB for activation *and* non-torch together at TP 4 (leadawon/
    LAMBO), which kvplan over-counts (held out, -9 %).
  * from 0.19.0: 0.25 alone, +1.88 over NVLink, +0.14 over PCIe. The NVLink figure is not
    from a cited log: issue 23's H100 figures (TP 1 0.24-0.27; TP 2 and TP 4 on NVLink
    2.06-2.21 per GPU; TP 4 on a PCIe RTX PRO 6000 1.70); no public 0.19+ start-up on
    NVLink at TP >= 2 was found (searched: vllm-project/vllm
    issues, the code and pages corpora for 0.19's "[gpu_worker.py:436] Available KV cache
    memory" and "[gpu_model_runner.py:4820] Model loading took" lines). The PCIe +0.14 is
    the one cited 0.19 PCIe group: gnosia93/eks-agentic-ai's 4 x L40S Qwen2.5-72B-Instruct
    TP 4 (calibration record: 0.9 x 44.53 - 33.98 weights - 5.11 available = 0.99 GiB, less
    0.60 of activation = 0.39 non-torch, 0.25 of it the single-GPU part; custom all-reduce
    off, >2 PCIe-only GPUs, ``custom_all_reduce.py`` 0.19.0:153-158; no symmetric-memory
    all-reduce on SM 8.9, ``all_reduce_utils.py`` 0.19.0:52-64). The 4 x L40S 0.24.0 record
    (aws-samples, calibration, Qwen3-Coder-30B-A3B TP 4) agrees (-0.5 %) once the CUDA-graph
    estimate 0.24 subtracts counts its FULL decode graphs and NCCL's per-capture memory
    (:mod:`planner.activation`: 48 layers x 86 graphs x 0.39 MiB = 1.57 GiB, not 0.77): the
    +1.45 from 0.24 kvplan carried before was those 0.8 GiB of graphs. The
    cited logs bound the rest: alone 0.02-0.56 (0.06 on a
    16 GB card in 0.26, 0.30-0.56 under WSL2 in 0.27.1); the same 4 x RTX 3090 box as above logs
    1.12-1.21 GiB of activation (Qwen3.5-27B, its vision encoder profiled) and non-torch
    together at TP 4 in 0.19.0, 1 GiB more than 0.18.1 left it: the PCIe range runs from 0.
    Where the extra comes from (NCCL's buffers appearing during the profile rather than at the
    init warm-up all-reduce, which both releases run: ``pynccl.py`` 0.11.0:137-139,
    0.20.0:140-142, or the encoder) is not established.
  * what the figure can hold: ``Worker.init_device`` sets up the process groups (NCCL
    communicators, their warm-up all-reduce, custom all-reduce's IPC buffers) *before* it
    takes ``init_snapshot`` ("Initialize the distributed environment BEFORE taking memory
    snapshot", ``v1/worker/gpu_worker.py`` 0.18.1/0.19.0:259-282), and ``memory_profiling``
    measures non-torch growth from that snapshot: memory NCCL allocates at init is outside
    the budget (in the 1 - gmu margin), only what appears during the profile (channels or
    algorithms NCCL connects lazily on the profile's larger all-reduces) counts. The 4 x RTX
    3090 0.18.1 row (-6.4 %, held out) logs 0.12 GiB for activation and non-torch together
    where kvplan has 0.13 + 0.28: its custom all-reduce is off either way at TP 4 over PCIe
    (``custom_all_reduce.py`` 0.18.1:152-158, so ``--disable-custom-all-reduce`` changes
    nothing there; the P2P test at :160-168 is never reached), so the difference is NCCL's.
    GeForce 3090s without an NVLink bridge have no PCIe P2P, and NCCL then moves data
    through host shared memory rather than device buffers, which would leave nothing on the
    GPU; but the one other cited group without P2P, dennislee22's A100 pair in 0.10.1.1
    (custom all-reduce turned off by that P2P test, as its log says), is what the +0.28
    was set on, and the only cited size of about 0 is the held-out row itself, so no rule.

  * on ROCm the single-GPU figure is not the release's but :data:`planner.budget.
    ROCM_NON_TORCH_BYTES`, 1.91 GiB: the middle of the two calibration start-ups of
    Llama-3.1-8B on a Radeon AI PRO R9700 with one vLLM build (0.61 and 3.21 GiB beside the
    logged pools, kyuz0's amd-r9700-uv+pl and amd-r9700 runs). vLLM's ROCm path adds nothing
    there by mechanism: the measurement is the same ``memory_profiling`` (``utils/
    mem_utils.py`` 0.33.0:298-306), FlashInfer (workspaces, sampler) is CUDA-only, AITER is
    off by default (``envs.py`` 0.33.0:1267-1268), and vLLM's custom all-reduce runs only on
    gfx94x/gfx95x (``RocmPlatform.use_custom_allreduce``, ``platforms/rocm.py``
    0.33.0:1270-1273), never on a Radeon; what is left is the HIP runtime's, hipBLASLt's and
    RCCL's, and the same build logs either figure (run to run, not release to release):
    kyuz0's 12-09 session leaves 2.6-4.1 GiB beside weights and pool in ten of its eleven
    logs, the same build on 12-12/12-13 and the 0.13.0rc2 ROCM_ATTN build on 12-20 0.75-2.16,
    with the same pools to the token across the two builds (docs/vllm-budget.md): neither
    the attention backend nor the release nor any logged setting tells the modes apart.

  Most of the multi-GPU figure is NCCL's (its buffers, NVLS on NVSwitch systems); vLLM's own
  custom all-reduce keeps 8 MiB buffers (``distributed/device_communicators/
  custom_all_reduce.py`` 0.19.0:59, :187) and is a small part of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from planner.errors import UsageError

GIB = 1 << 30
MIB = 1 << 20
Entrypoint = Literal["serve", "llm"]
Runner = Literal["generate", "pooling"]
Sampler = Literal["sort", "triton", "flashinfer"]
# fp32-logits-sized copies alive at each sampler's warm-up peak, in thousandths (docstring)
SAMPLER_COPIES_MILLI: dict[str, int] = {"sort": 9515, "triton": 3700, "flashinfer": 1500}
ENTRYPOINTS: tuple[Entrypoint, ...] = ("serve", "llm")
# ``--sampler``: FlashInfer's top-k/top-p, or vLLM's own of the release (module docstring)
SAMPLER_CHOICES = ("flashinfer", "native")
RUNNERS: tuple[Runner, ...] = ("generate", "pooling")


@dataclass(frozen=True, kw_only=True)
class VllmRules:
    """The version-dependent rules of one range of vLLM releases (see the module docstring)."""

    since: tuple[int, ...]
    default_gmu: float
    subtracts_cuda_graphs: bool
    a100_small: bool
    large_gpu_tier: bool
    one_line_capacity_log: bool
    extensible_kv_cache: bool = False
    async_scheduling: bool = False
    reserve_full_isl: bool = False
    prepend_uncached_free: bool = False
    sampler: Sampler = "sort"
    warmup_reuses_activation: bool = True
    rocm_graph_estimate: bool = False
    non_torch_single_bytes: int = round(0.13 * GIB)
    # (NVLink or xGMI, PCIe) per rank of a group of >= 2 that talk
    non_torch_comm_bytes: tuple[int, int] = (round(0.42 * GIB), round(0.42 * GIB))
    # the sampler was stated (``--sampler``, or read from a log): no other one may run
    sampler_stated: bool = False
    # sliding-window and chunked-local layers reserve every concurrent batch's tokens, not one
    window_in_flight: bool = True
    # a hybrid (Mamba / linear attention beside attention) caches prefixes unless told not to
    hybrid_prefix_caching: bool = True
    # the profile's cached encoder outputs are padded to the encoder budget (0.11) or to the
    # largest item (0.12), or kept as the tower returns them
    encoder_output_padding: Literal["budget", "item"] | None = None
    # Qwen3-VL's video item counts 12.5 tokens (its timestamp text) per encoder token
    qwen3_vl_video_text: bool = False

    @property
    def native_sampler(self) -> Sampler:
        """vLLM's own ("PyTorch-native") top-k/top-p of this release, what runs when
        FlashInfer's is off: the sort through 0.16, the Triton kernel from 0.17."""
        return "sort" if self.since < (0, 17, 0) else "triton"

    def with_sampler(self, choice: str | None) -> VllmRules:
        """These rules with the user's ``--sampler`` (``flashinfer`` or ``native``; None
        keeps the release's default); a stated sampler is :attr:`sampler_stated`."""
        if choice is None:
            return self
        if choice not in SAMPLER_CHOICES:
            raise UsageError(f"--sampler must be one of {', '.join(SAMPLER_CHOICES)}")
        sampler: Sampler = "flashinfer" if choice == "flashinfer" else self.native_sampler
        return replace(self, sampler=sampler, sampler_stated=True)

    def on_rocm(self) -> VllmRules:
        """These rules on an AMD GPU: vLLM's ROCm build never runs FlashInfer's sampler, so the
        release's native one runs and no other (module docstring, ``rocm_sampler``)."""
        return replace(self, sampler=self.native_sampler, sampler_stated=True)

    @property
    def sampler_copies_milli(self) -> int:
        """fp32 logits copies alive at the sampler warm-up's peak, in thousandths."""
        return SAMPLER_COPIES_MILLI[self.sampler]

    @property
    def name(self) -> str:
        return ".".join(str(p) for p in self.since)


# Oldest first: the first release where each rule holds (module docstring). kvplan models the
# V1 engine only, which 0.8 made the default.
_NT11 = round(0.13 * GIB), (round(0.42 * GIB), round(0.28 * GIB))
# over PCIe: gnosia93's 4 x L40S 0.19.0 start-up (calibration record; docstring), and
# aws-samples' 0.24.0 one agrees
_NT19 = round(0.25 * GIB), (round(1.88 * GIB), round(0.14 * GIB))


def _row(
    since: tuple[int, ...],
    gmu: float,
    *,
    graphs: bool = False,
    a100_small: bool = True,
    large: bool = False,
    sched: int = 0,
    sampler: Sampler = "sort",
    reuse: bool = True,
    rocm_graphs: bool = False,
    non_torch: tuple[int, tuple[int, int]] = _NT11,
) -> VllmRules:
    """One row; ``sched`` counts the scheduler rules that hold (async scheduling, then the
    full-ISL reservation, then prepending freed uncached blocks), ``large`` the >= 160 GiB
    tier with the one-line capacity log."""
    return VllmRules(
        since=since,
        default_gmu=gmu,
        subtracts_cuda_graphs=graphs,
        a100_small=a100_small,
        large_gpu_tier=large,
        one_line_capacity_log=large,
        async_scheduling=sched >= 1,
        window_in_flight=since >= (0, 26, 0),
        hybrid_prefix_caching=since >= (0, 26, 0),
        encoder_output_padding=(
            "budget"
            if (0, 11) <= since < (0, 12)
            else "item"
            if (0, 12) <= since < (0, 13)
            else None
        ),
        qwen3_vl_video_text=(0, 11) <= since < (0, 13),
        reserve_full_isl=sched >= 2,
        prepend_uncached_free=sched >= 3,
        sampler=sampler,
        warmup_reuses_activation=reuse,
        rocm_graph_estimate=rocm_graphs,
        non_torch_single_bytes=non_torch[0],
        non_torch_comm_bytes=non_torch[1],
    )


RULES: tuple[VllmRules, ...] = (
    _row((0, 8, 5), 0.9, a100_small=False),
    _row((0, 9, 0), 0.9),
    # the encoder-output padding and Qwen3-VL's video text (module docstring) change here
    _row((0, 11, 0), 0.9),
    _row((0, 12, 0), 0.9),
    _row((0, 13, 0), 0.9),
    _row((0, 14, 0), 0.9, sched=1),
    _row((0, 17, 0), 0.9, sched=1, sampler="triton"),
    _row((0, 19, 0), 0.9, sched=2, sampler="triton", reuse=False, non_torch=_NT19),
    _row((0, 20, 0), 0.92, graphs=True, sched=2, sampler="triton", non_torch=_NT19),
    _row((0, 24, 0), 0.92, graphs=True, sched=3, sampler="flashinfer", non_torch=_NT19),
    _row(
        (0, 26, 0),
        0.92,
        graphs=True,
        sched=3,
        sampler="flashinfer",
        rocm_graphs=True,
        non_torch=_NT19,
    ),
    _R28 := _row(
        (0, 28, 0),
        0.92,
        graphs=True,
        large=True,
        sched=3,
        sampler="flashinfer",
        rocm_graphs=True,
        non_torch=_NT19,
    ),
    # 0.34: 0.28's rules with the pool measured after warm-up
    replace(_R28, since=(0, 34, 0), extensible_kv_cache=True),
)
# the release kvplan plans for when none is given: the newest checked against public start-up
# logs (0.34.0's sources are read, its measured sizing is not yet seen in a log)
NEWEST_VERSION = "0.33.0"
NEWEST = RULES[-2]
assert NEWEST.since <= (0, 33, 0) < RULES[-1].since


def parse_version(text: str) -> tuple[int, ...]:
    """A release as a tuple: ``"0.10.1.1"`` -> (0, 10, 1, 1), ``"v0.33.0"`` -> (0, 33, 0),
    ``"0.11.0rc2"`` -> (0, 11, 0)."""
    raw = text.strip().lower().removeprefix("v")
    parts: list[int] = []
    for piece in raw.split(".")[:4]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):  # "0rc2", "0+cu128": the rest is a pre/local tag
            break
    if len(parts) < 2:
        raise UsageError(f"--vllm-version: not a vLLM version: {text!r} (e.g. 0.33.0)")
    return tuple(parts)


def refuse_unmodelled(version: str | None) -> None:
    """Refuse a ``--vllm-version`` older than the oldest release kvplan models (the V1 engine,
    from 0.8.5): its V0 engine sizes the cache by other rules, so a plan would print V1 log
    lines for it. A boot log of such a release is still read (``kvplan diagnose``)."""
    if version is None:
        return
    oldest = RULES[0]
    if parse_version(version) < oldest.since:
        raise UsageError(
            f"--vllm-version {version}: kvplan models vLLM's V1 engine from {oldest.name} "
            f"on; give --vllm-version {oldest.name} or newer"
        )


def rules_for(version: str | None) -> VllmRules:
    """The rules of ``version`` (the newest kvplan knows when None). A version older than
    the oldest row gets the oldest row; a newer one the newest."""
    if version is None:
        return NEWEST
    wanted = parse_version(version)
    chosen = RULES[0]
    for rules in RULES:
        if rules.since <= wanted:
            chosen = rules
    return chosen


def batch_defaults(
    rules: VllmRules,
    *,
    gpu_memory_bytes: int | None,
    is_a100: bool,
    entrypoint: Entrypoint = "serve",
) -> tuple[int, int]:
    """vLLM's (max_num_batched_tokens, max_num_seqs) defaults for a GPU of
    ``gpu_memory_bytes`` (None: no GPU known, vLLM's small defaults), before the caps."""
    llm = entrypoint == "llm"
    memory = gpu_memory_bytes or 0
    if rules.large_gpu_tier and memory >= 160 * GIB:
        return 16384, 1024
    if memory >= 70 * GIB and not (is_a100 and rules.a100_small):
        return (16384 if llm else 8192), 1024
    return (8192 if llm else 2048), 256
