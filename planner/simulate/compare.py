"""``kvplan simulate`` at the model level: size vLLM's KV pool for each variant of the serve
settings, replay the workload once per variant (:func:`planner.simulate.engine.simulate`), and
pick the best for a goal.

The variants are the cartesian product of the compared flag values (:func:`build_settings`);
each run's pool comes from an explicit size or, as ``kvplan estimate --gpu`` computes it, from
the GPU's budget (:func:`pool_for_gpu`).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import Any

from planner.budget import vllm_budget
from planner.deployment import Deployment, ServeSettings, kv_dtype_for, positive_count
from planner.errors import DoesNotFitError, KvplanError, UsageError
from planner.gpus import get_gpu
from planner.kv_layout import KVEstimate, estimate, refused_block_size
from planner.model.specs import Engine, KVDtype
from planner.offload import cpu_tier_tokens
from planner.outcome import Outcome
from planner.simulate import engine
from planner.simulate.clock import EXPECTED_ERROR, step_model_for
from planner.simulate.engine import BlockLayout, SimConfig, SimResult
from planner.simulate.roofline import ModelParams, Roofline, estimate_params
from planner.simulate.run import simulate
from planner.simulate.steptimes import StepTable
from planner.simulate.workload import Workload
from planner.vllm_rules import NEWEST_VERSION, parse_version
from planner.weights import Weights, for_deployment

WONT_START = Outcome.WONT_START
QUEUES_AT_WORST_CASE = Outcome.QUEUES_AT_WORST_CASE
FITS_AT_WORST_CASE = Outcome.FITS_AT_WORST_CASE
GOALS = ("throughput", "ttft", "tpot", "preemptions")
MAX_SETTINGS = 64
TIE = 0.01  # settings closer than this on the goal are called a tie

AXES = ("block-size", "kv-cache-dtype", "prefix-caching", "max-num-seqs", "max-num-batched-tokens")


# Compared axis (as the user spells it) -> the ServeSettings field it varies.
AXIS_FIELDS = {
    "block-size": "block_size",
    "kv-cache-dtype": "kv_cache_dtype",
    "prefix-caching": "enable_prefix_caching",
    "max-num-seqs": "max_num_seqs",
    "max-num-batched-tokens": "max_num_batched_tokens",
}


def axis_value(settings: ServeSettings, axis: str) -> str:
    """``settings``' value on a compared ``axis`` as the user spells it (``default`` when the
    engine's default is used)."""
    value = getattr(settings, AXIS_FIELDS[axis])
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, KVDtype):
        return value.value
    return "default" if value is None else str(value)


@dataclass(frozen=True, kw_only=True)
class SettingRun:
    """One setting's resolved plan and what its replay measured.

    One of ``runs`` in ``kvplan simulate --json``. Worked example, gemma-2-9b-it on an L40S
    with ``--block-size 16,32`` (``tests/golden/simulate-gemma-2-9b-l40s-blocks.json``): both
    runs get the same 22,280,133,801 B of KV memory, which holds 8,094 blocks of 2,752,512 B at
    block size 16 and 4,047 blocks of 5,505,024 B at 32.

    Attributes:
        label: the compared axes and this run's values, ``block-size=16``; ``as given`` when
            nothing is compared.
        values: axis -> value as the user spells it (``{"block-size": "16"}``): ``on`` /
            ``off`` for prefix caching, ``default`` where the engine's default applies.
        block_size: tokens per block, resolved (16).
        kv_cache_dtype: the KV dtype, resolved: ``auto`` is the model's (``bf16``).
        prefix_caching: whether prefix caching is on.
        max_num_seqs: vLLM's limit on running requests, resolved (its default for the GPU: 256
            on an L40S, 1,024 on an H100).
        max_num_batched_tokens: the token budget of one step, resolved (2,048 on an L40S).
        max_model_len: the longest request replayed; without ``--max-model-len`` the model's
            own, shortened to what fits the pool (with a warning) when it does not (8,192).
        bytes_per_block: one block of the pool: ``block_size`` tokens of one KV-cache group's
            layers (gemma-2-9b, 21 layers a group: 16 x 21 x 2 x 8 x 256 x 2 B = 2,752,512).
        kv_cache_bytes: the KV memory this run gets: ``--kv-cache-memory``, vLLM's budget on
            the GPU (:func:`pool_for_gpu`), or ``--num-gpu-blocks`` of the first run's blocks.
        num_gpu_blocks: ``kv_cache_bytes // bytes_per_block`` (22,280,133,801 // 2,752,512 =
            8,094), vLLM's null block included.
        outcome: what vLLM does with this run's settings and pool, in ``kvplan estimate``'s
            words: ``queues_at_worst_case`` when fewer than ``max_num_seqs`` requests of
            ``max_model_len`` tokens fit the usable blocks at once, ``fits_at_worst_case``
            when all do, ``wont_start`` for a hybrid whose ``max_num_seqs`` exceeds the blocks
            (one Mamba state block each; the replay still runs). A ``max_model_len`` the pool
            cannot hold never gets here: it is an error, or shortened with a warning.
        worst_case_running: ``min(max_num_seqs, usable blocks // blocks of one max_model_len
            request)``; 0 when it won't start. Here an 8,192-token request holds 512 global
            blocks of 16 tokens plus cdiv(4,095, 16) + 1 = 257 for its 4,096-token window:
            8,093 // 769 = 10 of 256 run at once (at block size 32, 4,046 // (256 + 129) =
            10): both queue at worst case.
        result: what the replay measured.
        refused: why vLLM refuses this run's settings before any memory is counted (a
            ``--block-size`` no attention backend takes: :func:`planner.kv_layout.
            refused_block_size`); its outcome is then ``wont_start`` and it is never ``best``.
            None (left out of the JSON) when vLLM takes them.
    """

    label: str
    values: dict[str, str]
    block_size: int
    kv_cache_dtype: str
    prefix_caching: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    bytes_per_block: int
    kv_cache_bytes: int
    num_gpu_blocks: int
    outcome: str
    worst_case_running: int
    result: SimResult
    refused: str | None = None


def worst_case_of_pool(
    layout: BlockLayout, num_gpu_blocks: int, max_model_len: int, max_num_seqs: int
) -> tuple[str, int]:
    """:func:`planner.recommend.worst_case` for a pool of ``num_gpu_blocks`` blocks (one is
    vLLM's null block): (outcome, how many ``max_model_len`` requests run at once)."""
    if layout.state_blocks and max_num_seqs > num_gpu_blocks:
        return WONT_START, 0  # each running sequence of a hybrid holds a Mamba state block
    usable = max(num_gpu_blocks - 1, 0)
    running = min(max_num_seqs, usable // max(layout.blocks(max_model_len), 1))
    return (FITS_AT_WORST_CASE if running >= max_num_seqs else QUEUES_AT_WORST_CASE), running


@dataclass(frozen=True, kw_only=True)
class SimReport:
    """Everything ``kvplan simulate`` shows: the runs side by side and the pick for the goal.

    ``kvplan simulate --json`` is this, plus ``best_label`` (the label of ``runs[best]``, or
    null). Worked example, deepseek-v2-lite on an H100 with ``--kv-cache-dtype auto,fp8``
    (``tests/golden/simulate-deepseek-v2-lite-h100-fp8.json``): two runs, ``best`` 1, and
    ``best_reason`` says no clear best for throughput: fp8's and auto's 813 output tok/s are
    within 1 %.

    Attributes:
        model: the model's name (``deepseek-ai/DeepSeek-V2-Lite``).
        workload: the workload's name (``chat``).
        workload_source: where it came from (``examples/workloads/chat.yaml``).
        requests: requests replayed, rejected ones included (200).
        seed: the spec's seed (7); None for a trace.
        gpu: the GPU whose roofline times the steps (``h100``, also when there is no
            ``--gpu``, with a note).
        pool: how the KV pool was sized, in words (``--kv-cache-memory 21,474,836,480 B``, or
            the GPU budget's formula).
        tensor_parallel_size: TP size (1).
        params: the model's parameters.
        roofline: the last run's step-time model, a
            :class:`planner.simulate.clock.StepModel` (runs that differ in KV dtype differ in
            ``kv_bytes_per_token``: here fp8's 15,552, half of auto's); reported, but not what
            times the steps when ``timing`` names measured step times.
        timing: what times the steps: ``step-time model`` (the defaults of
            :mod:`planner.simulate.clock`), ``step-time model (profile FILE)`` with fitted
            terms, or ``measured step times (FILE)`` with ``--step-times FILE``
            (:mod:`planner.simulate.steptimes`).
        expected_error: how far each figure may be off with the default terms, as a share
            (``output_throughput`` 0.2: within +-20 % of a real run), from the held-out public
            benchmarks of ``tests/data/vllm_serving_benchmarks.json``
            (:data:`planner.simulate.clock.EXPECTED_ERROR`); empty when the times come from a
            profile or a table (their error is the fit's, ``fit`` in the profile).
        goal: what ``best`` optimises: throughput, ttft, tpot or preemptions.
        axes: the compared settings with more than one value (``["kv-cache-dtype"]``).
        runs: one per setting, in :func:`build_settings`' order.
        best: index into ``runs`` of the best for ``goal`` (1); None with a single run.
        best_reason: why, or that the best few are within 1 % (a tie); "" with a single run.
        notes: what the model approximates and assumes.
        warnings: what the user should act on (a shortened ``max_model_len``, rejected
            requests, skipped trace lines, ignored flags).
    """

    model: str
    workload: str
    workload_source: str
    requests: int
    seed: int | None
    gpu: str
    pool: str
    tensor_parallel_size: int
    params: ModelParams
    roofline: Roofline
    timing: str
    goal: str
    axes: list[str]
    runs: list[SettingRun]
    best: int | None
    best_reason: str
    notes: list[str]
    warnings: list[str]
    expected_error: dict[str, float] = field(default_factory=dict)
    # --calibrate: the fitted profile (terms, what it was fitted on, ratios after the fit)
    calibration: dict[str, Any] | None = None


def pool_for_gpu(dep: Deployment, est: KVEstimate, weights: Weights) -> tuple[int, int]:
    """vLLM's KV pool for ``dep`` from the planner's budget (:func:`planner.budget.vllm_budget`:
    requested memory minus weights, activation peak, non-torch and CUDA-graph estimates), as
    ``kvplan estimate --gpu`` computes it. Returns (num_gpu_blocks, KV bytes)."""
    assert dep.gpu is not None
    cap = vllm_budget(dep, est, weights, estimate_at=lambda n: est)  # the simulator shortens
    if cap.available_kv_bytes <= 0:
        raise DoesNotFitError(
            f"{est.model}: weights ({weights.bytes_per_rank:,} B per rank at TP "
            f"{est.tensor_parallel_size}) and vLLM's other memory leave no KV cache on "
            f"{dep.gpu.name} at --gpu-memory-utilization {dep.settings.gmu}; use a larger GPU "
            "or --tp"
        )
    return cap.num_gpu_blocks, cap.available_kv_bytes


def _largest_fitting_len(layout: BlockLayout, usable: int, limit: int) -> int:
    """Longest request (tokens) whose blocks fit ``usable`` blocks, at most ``limit``."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if layout.blocks(mid) <= usable:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _pick_best(runs: list[SettingRun], goal: str) -> tuple[int | None, str]:
    """The best run for ``goal`` among those vLLM starts (a refused one is shown, never
    picked), and why."""
    if len(runs) < 2:
        return None, ""
    started = [run for run in runs if run.refused is None]
    if len(started) < len(runs):
        refused = [run for run in runs if run.refused is not None]
        words = f"{', '.join(r.label for r in refused)}: vLLM won't start ({refused[0].refused})"
        if not started:
            return None, f"no setting starts; {words}"
        picked, reason = _pick_best(started, goal)
        if picked is None:  # one left
            return runs.index(started[0]), f"{started[0].label}, the only one that starts; {words}"
        return runs.index(started[picked]), f"{reason}; not ranked: {words}"
    keys: dict[str, Callable[[SimResult], tuple[float, float]]] = {
        "throughput": lambda r: (-r.output_tokens_per_s, r.preemptions),
        "ttft": lambda r: (r.ttft_s.p90, -r.output_tokens_per_s),
        "tpot": lambda r: (r.tpot_s.p90, -r.output_tokens_per_s),
        "preemptions": lambda r: (r.preemptions, -r.output_tokens_per_s),
    }
    key = keys[goal]
    order = sorted(range(len(runs)), key=lambda i: key(runs[i].result))
    best, second = runs[order[0]], runs[order[1]]
    b, s = best.result, second.result
    what = {
        "throughput": f"{b.output_tokens_per_s:,.0f} output tok/s and {b.preemptions:,} "
        f"preemptions vs {s.output_tokens_per_s:,.0f} and {s.preemptions:,}",
        "ttft": f"p90 TTFT {b.ttft_s.p90:.3f} s vs {s.ttft_s.p90:.3f} s",
        "tpot": f"p90 TPOT {b.tpot_s.p90 * 1000:.1f} ms vs {s.tpot_s.p90 * 1000:.1f} ms",
        "preemptions": f"{b.preemptions:,} preemptions vs {s.preemptions:,}",
    }[goal]

    def close(x: tuple[float, float], y: tuple[float, float]) -> bool:
        return all(abs(u - v) <= TIE * max(abs(u), abs(v)) for u, v in zip(x, y, strict=True))

    tied = [runs[i].label for i in order[1:] if close(key(b), key(runs[i].result))]
    if tied:
        reason = (
            f"no clear best for {goal}: {best.label} and {', '.join(tied)} are within "
            f"{TIE:.0%} ({what} for {second.label}); ★ marks the first"
        )
    else:
        reason = (
            f"best for {goal}: {best.label} ({what} for the runner-up {second.label}; "
            f"peak KV {b.usage_max:.0%})"
        )
    return order[0], reason


def simulate_model(
    dep: Deployment,
    workload: Workload,
    *,
    variants: Sequence[ServeSettings] | None = None,
    axes: Sequence[str] = (),
    num_gpu_blocks: int | None = None,
    goal: str = "throughput",
    step_times: StepTable | None = None,
    profile: dict[str, float] | None = None,
    profile_source: str = "",
) -> SimReport:
    """Replay ``workload`` on ``dep`` served by vLLM once per variant of its settings, and
    compare.

    Args:
        dep: the model, the GPU (sizes the pool when no explicit pool is given, and sets the
            roofline; H100 when None) and the base settings (``kv_cache_memory_bytes`` is an
            explicit pool; ``max_model_len`` the longest request, else the model's shortened to
            what fits).
        workload: the requests.
        variants: the settings to compare, one run each (default: ``dep.settings``); see
            :func:`build_settings`.
        axes: which settings vary between variants (for labels).
        num_gpu_blocks: explicit pool in blocks of the first variant; the others get the
            same bytes.
        goal: what "best" means: throughput, ttft, tpot or preemptions.
        step_times: measured step times; they time every step instead of the model.
        profile: fitted step-time terms (:class:`planner.simulate.clock.Profile`'s ``terms``)
            over the defaults; ``profile_source`` names where they came from.

    Returns:
        The :class:`SimReport`.
    """
    base, gpu, model = dep.settings, dep.gpu, dep.model
    settings = list(variants) if variants is not None else [base]
    kv_cache_memory_bytes = base.kv_cache_memory_bytes
    max_model_len = base.max_model_len
    tp = base.tp
    if num_gpu_blocks is not None and kv_cache_memory_bytes is not None:
        raise UsageError("give --num-gpu-blocks or --kv-cache-memory, not both")
    if goal not in GOALS:
        raise UsageError(f"unknown --goal {goal!r}; use one of: {', '.join(GOALS)}")
    if not settings:
        raise UsageError("nothing to simulate: no settings")
    if base.engine is not Engine.VLLM:
        raise UsageError("kvplan simulate replays vLLM's scheduler; --engine must be vllm")
    if len(settings) > MAX_SETTINGS:
        raise UsageError(f"{len(settings)} settings to compare; at most {MAX_SETTINGS}")
    if num_gpu_blocks is not None and num_gpu_blocks < 0:
        raise UsageError(f"--num-gpu-blocks must not be negative, got {num_gpu_blocks}")
    if num_gpu_blocks:
        positive_count("--num-gpu-blocks", num_gpu_blocks)
    spec = model.spec
    gmu = base.gmu
    notes: list[str] = []
    warnings: list[str] = []
    roof_gpu = gpu or get_gpu("h100")
    if gpu is None and step_times is None:
        notes.append("no --gpu: step times use the H100 step-time model")
    explicit_pool = num_gpu_blocks is not None or kv_cache_memory_bytes is not None
    if explicit_pool and base.gpu_memory_utilization is not None:
        warnings.append("--gpu-memory-utilization is ignored with an explicit KV pool")
    if not explicit_pool and gpu is None:
        raise UsageError(
            "size the KV pool: --gpu NAME, --kv-cache-memory 20GiB or --num-gpu-blocks N"
        )
    # the simulator replays one pipeline stage's pool; the draft (if any) is on it
    weights = for_deployment(replace(dep, settings=base.but(pp=1)))
    params = estimate_params(spec, weights if weights.source == "config" else None)
    if num_gpu_blocks is not None:
        pool = f"--num-gpu-blocks {num_gpu_blocks:,}"
    elif kv_cache_memory_bytes is not None:
        pool = f"--kv-cache-memory {kv_cache_memory_bytes:,} B"
    else:
        assert gpu is not None
        pool = (
            f"{gpu.name}: vLLM's budget ({gmu:g} x total - {weights.bytes_per_rank:,} B of "
            f"weights from {weights.source} - activation, non-torch and CUDA-graph estimates), "
            "as `kvplan estimate --gpu` computes it"
        )
        if base.measured_kv_sizing:
            pool = (
                f"{gpu.name}: the pool vLLM {base.vllm_version} measures after warm-up (what "
                f"is free less {weights.bytes_per_rank:,} B of weights from {weights.source}, "
                "the activation, non-torch and CUDA-graph estimates and its margin), as "
                "`kvplan estimate --gpu` computes it"
            )
    if base.speculative is not None:
        sc = base.speculative
        notes.append(
            f"speculative decoding ({sc.method}, k={sc.num_speculative_tokens}): "
            f"{sc.num_lookahead_tokens} lookahead slot(s) held past each running request; "
            "one token per step is accepted (the most memory, the least speed)"
        )
    if base.kv_offloading_size is not None:
        if base.kv_offloading_backend == "native":
            notes.append(
                "CPU KV tier (--kv-offloading-backend native): full blocks written through, "
                "evicted least recently used first; a GPU prefix miss found there is loaded, not "
                "recomputed. Loads are free here (no PCIe time, no step waiting for the load)"
            )
        else:
            warnings.append(
                f"--kv-offloading-backend {base.kv_offloading_backend}: its capacity is set in "
                "its own server, so the CPU tier is not simulated"
            )
    if base.dp > 1:
        notes.append(
            f"{base.dp} data-parallel ranks, each its own pool and max_num_seqs; the "
            "dispatcher scores ranks as vLLM 0.33's load balancer does with current stats; "
            "MoE ranks' lockstep (dummy batches) is not modelled"
        )
    memory_of_blocks: int | None = None
    roofline: Roofline | None = None
    seen_notes: set[str] = set()
    shortened: list[tuple[str, int, int, int, int]] = []
    configs: list[SimConfig] = []
    pending: list[dict[str, Any]] = []  # each run's fields but its result
    # a setting that cannot be planned fails only after the ones before it have run, as in a
    # serial sweep: their errors come first
    deferred: KvplanError | None = None
    try:
        for serve in settings:
            # the batch defaults are the named GPU's (an A100 gets 2,048 / 256), or vLLM's
            # no-GPU ones with an explicit pool: never the roofline's stand-in H100
            run_dep = Deployment(model=model, gpu=gpu, settings=serve, draft=dep.draft)
            est = estimate(spec, serve, gpu)
            assert est.vllm is not None
            for warning in est.warnings:
                if warning not in warnings:
                    warnings.append(warning)
            layout, layout_notes = BlockLayout.from_estimate(est)
            for note in layout_notes:
                if note not in seen_notes:
                    seen_notes.add(note)
                    notes.append(note)
            bpb = est.vllm.bytes_per_block
            if num_gpu_blocks is not None:
                if memory_of_blocks is None:
                    memory_of_blocks = num_gpu_blocks * bpb
                blocks = memory_of_blocks // bpb
                kv_bytes = blocks * bpb
            elif kv_cache_memory_bytes is not None:
                blocks, kv_bytes = kv_cache_memory_bytes // bpb, kv_cache_memory_bytes
            else:
                assert gpu is not None
                run_weights = weights if serve == base else for_deployment(run_dep)
                blocks, kv_bytes = pool_for_gpu(run_dep, est, run_weights)
            label = ", ".join(f"{a}={axis_value(serve, a)}" for a in axes) or "as given"
            if blocks < 2:
                raise DoesNotFitError(
                    f"{label}: {kv_bytes:,} B of KV memory holds {blocks} block(s) of "
                    f"{bpb:,} B (one is vLLM's null block): zero KV capacity. Give more memory "
                    "(--kv-cache-memory, --gpu-memory-utilization, a larger --gpu) or --tp"
                )
            usable = blocks - 1
            length = est.max_model_len
            if layout.blocks(length) > usable:
                fit = _largest_fitting_len(layout, usable, length)
                if max_model_len is not None:
                    raise DoesNotFitError(
                        f"{label}: vLLM won't start: one {length:,}-token request needs "
                        f"{layout.blocks(length):,} blocks; the pool has {usable:,}. Largest that "
                        f"fits: {fit:,} tokens. Try --max-model-len {fit} (or -1, vLLM's auto-fit) "
                        "or more KV memory"
                    )
                shortened.append((label, length, layout.blocks(length), usable, fit))
                length = fit
            roofline = step_model_for(
                spec,
                est,
                roof_gpu,
                params,
                release=parse_version(serve.vllm_version or NEWEST_VERSION),
                async_scheduling=serve.rules.async_scheduling,
                enforce_eager=serve.enforce_eager,
                profile=profile,
                source=profile_source or "defaults",
                data_parallel_size=serve.dp,
                expert_parallel=serve.enable_expert_parallel,
            )
            config = SimConfig(
                num_gpu_blocks=blocks,
                layout=layout,
                max_num_seqs=est.vllm.max_num_seqs,
                max_num_batched_tokens=est.vllm.max_num_batched_tokens,
                max_model_len=length,
                roofline=step_times or roofline,
                prefix_caching=serve.prefix_caching(spec),
                # the scheduler rules of serve.vllm_version (planner.vllm_rules)
                reserve_full_isl=serve.rules.reserve_full_isl,
                prepend_uncached_free=serve.rules.prepend_uncached_free,
                async_scheduling=serve.rules.async_scheduling,
                # speculative decoding's slots past each request; one engine per DP rank
                num_lookahead_tokens=serve.num_lookahead_tokens,
                data_parallel_size=serve.dp,
                # --kv-offloading-size (native): each DP rank's engine has its own CPU tier
                cpu_blocks=(cpu_tier_tokens(est, serve) or 0) // layout.block_size,
                # the API server's per-request latency (none with measured step times)
                request_latency_s=0.0 if step_times else roofline.request_latency_s,
                stream_latency_s=0.0 if step_times else roofline.stream_latency_s,
                api_token_s=0.0 if step_times else roofline.api_token_s,
            )
            outcome, running = worst_case_of_pool(layout, blocks, length, config.max_num_seqs)
            refused = refused_block_size(serve.engine, serve.block_size)
            if refused:
                outcome, running = WONT_START, 0  # shown, never picked
            elif outcome == WONT_START:
                warnings.append(
                    f"vLLM won't start with max_num_seqs {config.max_num_seqs:,} and this KV pool"
                    + (f" ({label})" if axes else "")
                    + ": each running sequence of a hybrid holds a Mamba state block, and the "
                    f"pool has {blocks:,}. Simulated anyway; use --max-num-seqs {blocks}"
                )
            configs.append(config)
            pending.append(
                dict(
                    label=label,
                    values={a: axis_value(serve, a) for a in axes},
                    block_size=est.block_size,
                    kv_cache_dtype=est.kv_cache_dtype,
                    prefix_caching=serve.prefix_caching(spec),
                    max_num_seqs=config.max_num_seqs,
                    max_num_batched_tokens=config.max_num_batched_tokens,
                    max_model_len=length,
                    bytes_per_block=bpb,
                    kv_cache_bytes=kv_bytes,
                    num_gpu_blocks=blocks,
                    outcome=outcome,
                    worst_case_running=running,
                    refused=refused,
                )
            )
    except KvplanError as exc:
        deferred = exc
    results = simulate_all(workload, configs)
    if deferred is not None:
        raise deferred
    runs = [SettingRun(**f, result=r) for f, r in zip(pending, results, strict=True)]
    if num_gpu_blocks is not None and len({r.bytes_per_block for r in runs}) > 1:
        notes.append(
            f"--num-gpu-blocks {num_gpu_blocks:,} is counted in blocks of the first setting "
            f"({memory_of_blocks:,} B); every setting gets that much memory"
        )
    if shortened:
        label, length, need, usable, fit = shortened[0]
        where = f" ({label})" if len(runs) > 1 else ""
        others = "".join(f"; {lab}: {f:,}" for lab, _, _, _, f in shortened[1:])
        warnings.append(
            f"vLLM won't start with max_model_len {length:,} and this KV pool{where}: one "
            f"request that long needs {need:,} blocks, the pool has {usable:,}. Simulating "
            f"with the longest that fits, --max-model-len {fit:,}{others}"
        )
    rejected = max(r.result.rejected_too_long for r in runs)
    if rejected:
        warnings.append(
            f"{rejected:,} request(s) longer than max_model_len (prompt + output) were "
            "rejected, as vLLM's API server rejects them"
        )
    if workload.num_skipped:
        shown = "; ".join(workload.skipped[:5])
        more = f" (and {workload.num_skipped - 5:,} more)" if workload.num_skipped > 5 else ""
        warnings.append(f"{workload.num_skipped:,} bad trace line(s) skipped: {shown}{more}")
    best, reason = _pick_best(runs, goal)
    assert roofline is not None
    return SimReport(
        model=spec.name,
        workload=workload.name,
        workload_source=workload.source,
        requests=len(workload.requests),
        seed=workload.seed,
        gpu=roof_gpu.name,
        pool=pool,
        tensor_parallel_size=tp,
        params=params,
        roofline=roofline,
        timing=step_times.timing
        if step_times is not None
        else (f"step-time model (profile {profile_source})" if profile else "step-time model"),
        expected_error=dict(EXPECTED_ERROR) if step_times is None and not profile else {},
        goal=goal,
        axes=list(axes),
        runs=runs,
        best=best,
        best_reason=reason,
        notes=notes,
        warnings=warnings,
    )


def _jobs(variants: int) -> int:
    """Worker processes for ``variants`` replays: ``KVPLAN_JOBS`` (1 = serial) or the CPUs."""
    raw = os.environ.get("KVPLAN_JOBS", "").strip()
    if raw:
        try:
            jobs = int(raw)
        except ValueError:
            jobs = 0
        if jobs < 1:
            raise UsageError(f"KVPLAN_JOBS must be a whole number >= 1, got {raw[:40]!r}")
    else:
        jobs = os.cpu_count() or 1
    return max(1, min(variants, jobs))


_WORKLOAD: Workload | None = None  # a worker process's workload, set once by _init_worker


def _init_worker(workload: Workload) -> None:
    global _WORKLOAD
    _WORKLOAD = workload

    engine.PROGRESS = None  # a forked worker must not draw the parent's progress bar


def _simulate_in_worker(config: SimConfig) -> SimResult:
    assert _WORKLOAD is not None
    return simulate(_WORKLOAD, config)


def simulate_all(workload: Workload, configs: Sequence[SimConfig]) -> list[SimResult]:
    """:func:`planner.simulate.engine.simulate` of ``workload`` under each config, in order.

    Several configs run in parallel, one process each up to ``min(len(configs), CPUs)`` (or
    ``KVPLAN_JOBS``; ``KVPLAN_JOBS=1`` runs them here, one after another, as does a single
    config). Each replay is deterministic, so the results are those of a serial run, in the
    same order; the first config (in order) that fails raises its error. The workload goes to
    each worker once: inherited where processes fork, pickled otherwise.
    """
    jobs = _jobs(len(configs)) if len(configs) > 1 else 1
    if jobs == 1:
        return [simulate(workload, c) for c in configs]

    # fork shares the workload without pickling it; it is unsafe once threads run
    fork = "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
    ctx = multiprocessing.get_context("fork" if fork else None)
    try:
        with ProcessPoolExecutor(
            jobs, mp_context=ctx, initializer=_init_worker, initargs=(workload,)
        ) as pool:
            return list(pool.map(_simulate_in_worker, configs))
    except BrokenProcessPool:
        raise KvplanError(
            "a simulation worker process died (out of memory?); rerun with KVPLAN_JOBS=1 to "
            "simulate one setting at a time"
        ) from None


def build_settings(
    values: dict[str, list[str]], base: ServeSettings | None = None
) -> tuple[list[ServeSettings], list[str]]:
    """Every combination of the given flag values (parsed once, here) over ``base``, and the
    axes that vary.

    Args:
        values: axis (``block-size``, ``kv-cache-dtype``, ``prefix-caching``,
            ``max-num-seqs``, ``max-num-batched-tokens``) -> the user's strings.
        base: the settings the axes vary (default: vLLM's defaults).

    Returns:
        The settings (cartesian product, first axis slowest) and the axes with several values.
    """
    base = base or ServeSettings()
    parsed: dict[str, list[Any]] = {}
    for axis, raw in values.items():
        if axis not in AXES:
            raise UsageError(f"cannot compare {axis!r}; use one of: {', '.join(AXES)}")
        if not raw:
            raise UsageError(f"--{axis}: no values")
        if len(set(raw)) != len(raw):
            raise UsageError(f"--{axis}: a value is repeated in {','.join(raw)}")
        parsed[axis] = [_parse_axis_value(axis, v) for v in raw]
    axes = [a for a in AXES if a in parsed]
    combos = list(itertools.product(*(parsed[a] for a in axes)))
    if len(combos) > MAX_SETTINGS:
        raise UsageError(f"{len(combos)} settings to compare; at most {MAX_SETTINGS}")
    settings = [
        replace(base, **{AXIS_FIELDS[a]: v for a, v in zip(axes, combo, strict=True)})
        for combo in combos
    ]
    return settings, [a for a in axes if len(parsed[a]) > 1]


def _parse_axis_value(axis: str, text: str) -> Any:
    text = text.strip()
    if axis == "kv-cache-dtype":
        return kv_dtype_for(text, Engine.VLLM)
    if axis == "prefix-caching":
        key = text.lower()
        if key in ("on", "true", "yes", "1", "enabled"):
            return True
        if key in ("off", "false", "no", "0", "disabled"):
            return False
        raise UsageError(f"prefix-caching takes on or off, got {text!r}")
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--{axis} takes whole numbers, got {text!r}") from None
    positive_count(f"--{axis}", value)
    return value
