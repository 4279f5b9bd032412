"""Recommendations for one model on one GPU: what vLLM will report, what to set, and why.

:func:`plan` ties the pieces together: weights (:mod:`planner.weights`), the engine budget
(:mod:`planner.budget`), a ``max_model_len`` x ``max_num_seqs`` grid, the recommended pair for a
target KV usage, alternatives (fp8 KV, more TP), block-size and prefix-sharing trade-offs, the
naive-contiguous baseline, and ready-to-paste engine commands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from planner.budget import VllmCapacity, estimate_at_length, vllm_budget
from planner.cluster import best_layout, cluster_of, layouts
from planner.commands import engine_commands
from planner.deployment import (
    Deployment,
    ServeSettings,
    as_flags,
    fp8_kv_caveat,
)
from planner.engine_budgets import EngineCapacity, hf_capacity, sglang_capacity, trtllm_capacity
from planner.errors import DoesNotFitError, UsageError
from planner.features import PlanContext, fold
from planner.free_memory import with_starting_gmu
from planner.gpu_support import engine_refusal, fp8_kv_refusal, runs_fp8_weights
from planner.gpus import GPUS, Gpu
from planner.kv_layout import KVEstimate, estimate
from planner.lora import with_adapter
from planner.model.specs import Engine, KVDtype, ModelSpec, cdiv
from planner.offload import HostRam
from planner.plan_types import (
    FITS_AT_WORST_CASE,
    QUEUES_AT_WORST_CASE,
    TARGET_KV_USAGE,
    WONT_START,
    Alternative,
    BlockSizeRow,
    GridCell,
    NaiveVsPaged,
    Plan,
    PlanOptions,
    PrefixSharing,
    Recommended,
    Refusal,
)
from planner.units import GIB, MIB, format_gib
from planner.vllm_rules import NEWEST_VERSION
from planner.weights import Weights, for_deployment

if TYPE_CHECKING:
    from planner.advise import Advice

ENGINE_DEFAULT, WORST_CASE, WORKLOAD = "engine_default", "worst_case", "workload"
GRID_SEQS = (16, 32, 64, 128, 256)


def worst_case(cap: VllmCapacity) -> tuple[str, int, str | None]:
    """The outcome of ``cap``'s settings when every one of ``max_num_seqs`` requests is
    ``max_model_len`` tokens long: (outcome, how many run at once, why vLLM refuses to start).

    Qwen2.5-7B, 24 GiB, gmu 0.9: 6,275 blocks, 6,274 usable; at 8,192 tokens a request takes
    512 blocks, so 6,274 // 512 = 12 run at once: max_num_seqs 32 queues (12 of 32), 8 fits.
    """
    if not cap.fits:
        return WONT_START, 0, cap.error
    if cap.mamba_max_num_seqs is not None and cap.max_num_seqs > cap.mamba_max_num_seqs:
        return (
            WONT_START,
            0,
            f"max_num_seqs {cap.max_num_seqs:,} exceeds the {cap.mamba_max_num_seqs:,} KV "
            "blocks: each running sequence of a hybrid model holds a Mamba state block",
        )
    usable = max(cap.num_gpu_blocks - 1, 0)  # one null block is never handed out
    running = min(cap.max_num_seqs, usable // cap.blocks_per_request)
    outcome = FITS_AT_WORST_CASE if running >= cap.max_num_seqs else QUEUES_AT_WORST_CASE
    return outcome, running, None


def engine_outcome(cap: EngineCapacity, max_model_len: int, max_num_seqs: int | None = None) -> str:
    """SGLang / TRT-LLM / transformers in the same words (``check`` judges them so too): won't
    start when no KV memory is left or one ``max_model_len`` request does not fit its pool,
    else whether the running limit — the user's ``max_num_seqs``, else the engine's own —
    fits at worst case."""
    if cap.available_kv_bytes <= 0 or cap.max_total_tokens < max_model_len:
        return WONT_START
    limit = max_num_seqs or cap.max_running_requests
    if min(limit, int(cap.max_concurrency)) >= limit:
        return FITS_AT_WORST_CASE
    return QUEUES_AT_WORST_CASE


def cap_term_reason(change: dict[str, object]) -> str:
    """Why a start change starts, in a recommendation's words."""
    if "gpu_memory_utilization" in change:
        return "what vLLM runs after sizing the KV cache then fits in the memory left"
    if "max_num_seqs" in change:
        return "the sampler warm-up over fewer dummy requests fits after the KV cache"
    return "no CUDA graphs to capture after the KV cache is sized"


def wont_start_error(p: Plan) -> DoesNotFitError:
    """The one-line error for a plan whose settings won't start, with the change that starts
    (as data on the error: vLLM's estimated max_model_len, or the Mamba ceiling)."""
    cap, rec = p.vllm, p.recommended
    changes: list[dict[str, object] | str] = []
    if cap.estimated_max_model_len:
        length = rec.max_model_len if rec else cap.estimated_max_model_len
        changes.append({"max_model_len": length})
    elif cap.fits and cap.mamba_max_num_seqs:
        changes.append({"max_num_seqs": cap.mamba_max_num_seqs})
    elif cap.start_changes:
        changes.extend(cap.start_changes)
    hint = "; try " + as_flags(changes[0]) if changes and isinstance(changes[0], dict) else ""
    if cap.start_changes and len(changes) > 1:
        hint += "".join(f", or {as_flags(c)}" for c in changes[1:] if isinstance(c, dict))
    if cap.estimated_max_model_len and rec and rec.max_model_len != cap.estimated_max_model_len:
        hint += f" (or -1: vLLM fits {cap.estimated_max_model_len:,})"
    return DoesNotFitError(
        f"{p.estimate.model} won't start with these settings: "
        f"{(p.outcome_reason or '').rstrip('.')}{hint}",
        changes=changes,
    )


def served_model(spec: ModelSpec) -> tuple[str, str | None]:
    """What ``vllm serve`` is given for ``spec``: the folder's absolute path for a local
    directory (its basename only works from the parent folder), with a note naming the hub id
    to serve instead where the config records one (``_name_or_path``); else the name."""
    source = Path(spec.source)
    if not spec.source.endswith(".json") or not source.parent.is_dir():
        return spec.name, None
    folder = str(source.parent.resolve())
    hub = spec.config.get("_name_or_path")
    note = f"{spec.name} is a local directory: the commands serve its path ({folder})"
    if isinstance(hub, str) and hub.count("/") == 1 and not Path(hub).exists():
        note += f"; to let vLLM fetch the checkpoint, serve the hub id {hub} instead"
    return folder, note


def layout_capacity(d: Deployment) -> tuple[KVEstimate, Weights, VllmCapacity]:
    """One layout planned as :func:`plan` plans the deployment (no grid, no examples)."""
    e = estimate(d.spec, d.settings, d.gpu, batch_sizes=())
    w = for_deployment(d)
    return e, w, vllm_budget(d, e, w, estimate_at_length(d))


# A plan when the user named no GPU, only a KV pool (--kv-cache-memory).
NO_GPU = Gpu(name="unspecified", memory_bytes=0, source="--kv-cache-memory")


def plan(dep: Deployment, options: PlanOptions | None = None) -> Plan:
    """Plan ``dep`` with vLLM's formulas, plus the other engines for comparison.

    Returns:
        The :class:`Plan`; raises :class:`DoesNotFitError` when the weights alone exceed the
        budget.
    """
    options = options or PlanOptions()
    if dep.settings.lora_adapter is not None:
        dep = with_adapter(dep)
    s, spec = dep.settings, dep.spec
    gpu = dep.gpu or NO_GPU
    if gpu.memory_bytes <= 0 and s.kv_cache_memory_bytes is None:
        raise UsageError("--gpu-memory must be positive")
    weights = for_deployment(dep)
    if s.kv_cache_memory_bytes is None:
        _check_weights_fit(dep, weights, gpu)

    def est_at(length: int | None, settings: ServeSettings = s) -> KVEstimate:
        at = replace(settings, max_model_len=length, auto_fit_max_model_len=False)
        return estimate(spec, at, dep.gpu, batch_sizes=options.batch_sizes)

    def capacity(d: Deployment, est: KVEstimate, w: Weights = weights) -> VllmCapacity:
        return vllm_budget(d, est, w, estimate_at_length(d))

    notes: list[str] = []
    if s.auto_fit_max_model_len:  # vLLM's --max-model-len -1
        full = est_at(None)
        fitted = capacity(dep, full)
        length = full.max_model_len if fitted.fits else (fitted.estimated_max_model_len or 1)
        notes.append(f"Auto-fit max_model_len: {full.max_model_len:,} -> {length:,}")
    else:
        length = s.max_model_len or spec.max_model_len
    at_length = dep.with_settings(max_model_len=length, auto_fit_max_model_len=False)
    est = est_at(length)
    cap = capacity(at_length, est)
    cap = with_starting_gmu(  # another process on the GPU: the fraction that starts
        cap, lambda gmu: capacity(at_length.with_settings(gpu_memory_utilization=gmu), est)
    )
    _check_kv_memory(at_length, est, cap, weights, capacity)
    act = cap.activation_peak_bytes

    def other(engine: Engine) -> KVEstimate:
        return estimate(
            spec,
            ServeSettings(
                engine=engine,
                tp=s.tp,
                pp=s.pp,
                kv_cache_dtype=s.kv_cache_dtype,
                max_model_len=length,
            ),
            batch_sizes=(),
        )

    w_bytes = weights.bytes_per_rank
    engines = (
        []
        if not gpu.memory_bytes
        else [
            # the user's fraction is each engine's (SGLang's mem_fraction_static, TRT-LLM's
            # free-memory fraction), as check plans them; headroom is never KV
            sglang_capacity(
                other(Engine.SGLANG),
                gpu_memory_bytes=gpu.memory_bytes,
                weights_bytes=w_bytes + s.headroom_bytes,
                mem_fraction_static=s.gpu_memory_utilization,
            ),
            trtllm_capacity(
                other(Engine.TRTLLM),
                gpu_memory_bytes=gpu.memory_bytes,
                weights_bytes=w_bytes + s.headroom_bytes,
                activation_bytes=act,
                free_gpu_memory_fraction=s.gpu_memory_utilization or 0.9,
            ),
            hf_capacity(
                other(Engine.HF),
                gpu_memory_bytes=gpu.memory_bytes,
                weights_bytes=w_bytes,
                activation_bytes=act,
            ),
        ]
    )
    engines = [e for e in engines if engine_refusal(Engine(e.engine), dep.gpu) is None]
    grid = _grid(at_length, capacity, options.grid_lens, length, cap.max_num_seqs)
    outcome, running, why = worst_case(cap)
    recommended, advice = _recommend(at_length, est, cap, options, capacity, est_at, weights)
    alternatives = _alternatives(at_length, est, capacity)
    assert est.vllm is not None
    avg = options.avg_tokens or max(1, length // 2)
    bs_rows = _block_sizes(length, avg)
    sharing = None
    if options.shared_prefix_tokens:
        requests, shared = options.requests, options.shared_prefix_tokens
        per = shared // est.block_size
        saved = (requests - 1) * per if requests > 1 else 0
        usable, bpr = max(cap.num_gpu_blocks - 1, 0), cap.blocks_per_request
        own = max(bpr - min(per, bpr), 1)
        with_ = 1 + (usable - bpr) // own if usable >= bpr else 0
        sharing = PrefixSharing(
            shared_prefix_tokens=shared,
            requests=requests,
            blocks_saved=saved,
            bytes_saved=saved * est.vllm.bytes_per_block,
            running_without=usable // bpr,
            running_with=with_,
        )
    naive = _naive(est, avg, recommended)
    # no recommendation (the settings won't start): the command is the user's own settings,
    # their max_num_seqs or vLLM's default for them, not a placeholder
    target = recommended or Recommended(
        max_model_len=length,
        max_num_seqs=s.max_num_seqs or s.default_max_num_seqs(length, dep.gpu),
        gpu_memory_utilization=s.gmu,
        block_size=est.block_size,
        kv_cache_dtype=est.kv_cache_dtype,
        kv_usage=0.0,
        reason="",
    )
    by_engine = {e.engine: e for e in engines}
    served, served_note = served_model(spec)
    if served_note:
        notes.append(served_note)
    launch = engine_commands(
        served,
        target,
        vllm_default_max_num_seqs=s.default_max_num_seqs(target.max_model_len, dep.gpu),
        tp=s.tp,
        pp=s.pp,
        kv_cache_dtype=s.kv_cache_dtype.value,
        settings=s,
        auto_kv_dtype=spec.kv_cache_dtype_auto.value,
        token_budget=cap.max_num_batched_tokens,
        sglang=by_engine.get("sglang"),
        trtllm=by_engine.get("trtllm"),
        gpu=dep.gpu,
    )

    total = options.total_gpus
    layout_rows = []
    if total is not None and gpu.memory_bytes:
        layout_rows = layouts(
            at_length, total, options.gpus_per_node, layout_capacity, nodes=options.nodes
        )
        best = best_layout(layout_rows)
        mine = next((r for r in layout_rows if r.yours), None)
        if best is not None and not best.yours:
            than = (
                f", against {mine.cluster_kv_cache_size_tokens:,} for your tp {s.tp} x dp {s.dp}"
                if mine is not None
                else ""
            )
            notes.append(
                f"On {total} GPUs, {best.flags} holds the most KV: "
                f"{best.cluster_kv_cache_size_tokens:,} cluster tokens{than}"
            )
    fp8 = est.kv_dtype_bytes == 1 and est.kv_cache_dtype.startswith("fp8")
    if fp8 or any("kv_cache_dtype" in a.changes for a in alternatives):
        notes.append(fp8_kv_caveat(dep.gpu))
    notes.extend(launch.notes)
    context = PlanContext(
        dep=dep,
        at_length=at_length,
        est=est,
        cap=cap,
        weights=weights,
        capacity=capacity,
        vllm_command=launch.commands["vllm"],
        nodes=options.nodes,
        gpus_per_node=options.gpus_per_node,
    )
    folded = fold(context)
    notes.extend(folded.notes)
    return Plan(
        estimate=est,
        gpu=gpu,
        weights=weights,
        vllm=cap,
        engines=engines,
        recommended=recommended,
        grid=grid,
        alternatives=alternatives,
        block_sizes=bs_rows,
        prefix_sharing=sharing,
        naive_vs_paged=naive,
        commands=launch.commands,
        notes=notes,
        outcome=outcome,
        worst_case_running=running,
        outcome_reason=why,
        advice=advice,
        command_files=launch.files,
        vllm_version=s.vllm_version or NEWEST_VERSION,
        command_notes=list(launch.notes),
        cluster=cluster_of(at_length, cap),
        layouts=layout_rows,
        expert_parallel=s.enable_expert_parallel,
        host_ram=HostRam(**folded.host_ram),
        warnings=folded.warnings,
        features=list(folded.records),
        **folded.plan_fields,
    )


def _check_weights_fit(dep: Deployment, weights: Weights, gpu: Gpu) -> None:
    """Refuse a plan whose weights alone exceed vLLM's budget, naming what would fit; the
    suggestions travel as data on the error (``DoesNotFitError.changes``)."""
    spec, s, gmu = dep.spec, dep.settings, dep.settings.gmu
    requested = -(-int(gpu.memory_bytes * gmu * 1000) // 1000)
    if weights.bytes_per_rank < requested:
        return
    short = weights.bytes_per_rank - requested
    changes: list[dict[str, object] | str] = []
    for more in (2, 4, 8, 16):
        try:
            estimate(spec, ServeSettings(tp=s.tp * more, pp=s.pp), batch_sizes=())
        except UsageError:
            continue
        if -(-weights.bytes_per_rank // more) < requested * 0.8:
            changes.append({"tp": s.tp * more})
            break
    if weights.quantization is None and spec.dtype_bytes >= 2 and runs_fp8_weights(gpu):
        changes.append("an fp8 checkpoint (about half the weight bytes)")
    bigger = [g for g in GPUS if g.memory_bytes * gmu > weights.bytes_per_rank * 1.2]
    if bigger:
        changes.append({"gpu": min(bigger, key=lambda g: g.memory_bytes).name})
    reason = (
        f"weights need {weights.bytes_per_rank / GIB:.2f} GiB per GPU but vLLM may "
        f"use {requested / GIB:.2f} GiB of {gpu.name} (gpu_memory_utilization {gmu}): "
        f"{short / GIB:.2f} GiB short"
    )
    at = replace(s, auto_fit_max_model_len=False)
    refusal = Refusal(
        model=spec.name,
        gpu=dep.gpu,
        settings=s,
        check="weights",
        reason=reason,
        changes=changes,
        estimate=estimate(spec, at, dep.gpu, batch_sizes=()),
        weights=weights,
    )
    raise replace(refusal, message=f"{spec.name} {reason}").error()


def check_kv_memory(dep: Deployment) -> None:
    """What :func:`plan` refuses about a ``--kv-cache-memory`` pool, without planning the rest
    (``kvplan simulate`` asks this before it replays a fixed pool)."""
    est, weights, cap = layout_capacity(dep)

    def capacity(d: Deployment, e: KVEstimate) -> VllmCapacity:
        return vllm_budget(d, e, weights, estimate_at_length(d))

    _check_kv_memory(dep, est, cap, weights, capacity)


def _check_kv_memory(
    dep: Deployment,
    est: KVEstimate,
    cap: VllmCapacity,
    weights: Weights,
    capacity: Callable[[Deployment, KVEstimate], VllmCapacity],
) -> None:
    """Refuse a ``--kv-cache-memory`` pool that, with the weights and non-torch memory, is more
    than the GPU has: vLLM skips its memory profile with ``kv_cache_memory_bytes`` and
    allocates the pool as given (``gpu_worker.determine_available_memory``), so the allocation
    itself runs out of memory. The change is the pool vLLM's own profile would leave."""
    gpu = dep.gpu
    if gpu is None or not gpu.memory_bytes or not cap.kv_cache_memory_override:
        return
    need = cap.weights_bytes + cap.non_torch_bytes + cap.available_kv_bytes
    if need <= gpu.memory_bytes:
        return
    profiled = capacity(dep.with_settings(kv_cache_memory_bytes=None), est)
    changes: list[dict[str, object] | str] = []
    if profiled.available_kv_bytes > 0:
        changes.append({"kv_cache_memory_bytes": profiled.available_kv_bytes // MIB * MIB})
    reason = (
        f"--kv-cache-memory {format_gib(cap.available_kv_bytes)} GiB + weights "
        f"{format_gib(cap.weights_bytes)} GiB + non-torch {format_gib(cap.non_torch_bytes)} GiB "
        f"= {format_gib(need)} GiB, more than {gpu.name}'s {format_gib(gpu.memory_bytes)} GiB: "
        "vLLM allocates the pool as given (no memory profile) and runs out of memory"
    )
    raise Refusal(
        model=dep.spec.name,
        gpu=gpu,
        settings=dep.settings,
        check="kv_cache_memory",
        reason=reason,
        changes=changes,
        estimate=est,
        weights=weights,
        vllm=cap,
    ).error()


def _grid(
    dep: Deployment,
    capacity: Callable[[Deployment, KVEstimate], VllmCapacity],
    grid_lens: Sequence[int] | None,
    length: int,
    max_num_seqs: int,
) -> list[GridCell]:
    """The grid of outcomes; the user's length and max_num_seqs are a row and a column."""
    # NOTE: an empty grid_lens means no grid (kvplan check needs none); None means the default.
    lens = (
        list(grid_lens) if grid_lens is not None else _default_lens(dep.spec.max_model_len, length)
    )
    cells = []
    for n in lens:
        for seqs in sorted({*GRID_SEQS, max_num_seqs}):
            cell = dep.with_settings(max_model_len=n, max_num_seqs=seqs)
            e = estimate(cell.spec, cell.settings, cell.gpu, batch_sizes=())
            cap = capacity(cell, e)
            assert e.vllm is not None
            need = seqs * e.vllm.blocks_per_request
            usable = max(cap.num_gpu_blocks - 1, 0)  # one null block is never handed out
            usage = need / usable if usable else float("inf")
            outcome, running, _ = worst_case(cap)
            cells.append(
                GridCell(
                    max_model_len=n,
                    max_num_seqs=seqs,
                    fits=outcome != WONT_START,
                    kv_usage=round(usage, 4),
                    num_gpu_blocks=cap.num_gpu_blocks,
                    outcome=outcome,
                    worst_case_running=running,
                )
            )
    return cells


def _default_lens(model_max: int, length: int) -> list[int]:
    lens = [n for n in (4096, 8192, 16384, 32768, 65536, 131072) if n <= model_max]
    if length not in lens:
        lens.append(length)
    return sorted(set(lens))[:7]


def rejected_words(rejected: int, requests: int, max_model_len: int) -> str:
    """Requests of a workload longer than ``max_model_len``, which vLLM rejects: 355 of 500
    -> "355 of 500 requests (71 %) are longer than max_model_len 4,096: vLLM rejects them"."""
    share = 100 * rejected / requests if requests else 0.0
    return (
        f"{rejected:,} of {requests:,} requests ({share:.0f} %) are longer than max_model_len "
        f"{max_model_len:,}: vLLM rejects them"
    )


def friendly_len(tokens: int) -> int:
    """A length to type: rounded down to a multiple of 1,024 (16 below 2,048 tokens).
    vLLM's auto-fit 28,112 -> 27,648."""
    step = 1024 if tokens >= 2048 else 16
    return max(tokens // step * step, min(tokens, 16))


def worst_case_seqs(cap: VllmCapacity, target: float = TARGET_KV_USAGE) -> int:
    """The most requests of ``max_model_len`` that fit at once in ``target`` of the usable
    blocks (at least 1): 6,274 usable blocks, 512 a request, 90 % -> 11."""
    return max(1, int(target * (cap.num_gpu_blocks - 1) // cap.blocks_per_request))


def _recommend(
    dep: Deployment,
    est: KVEstimate,
    cap: VllmCapacity,
    options: PlanOptions,
    capacity: Callable[[Deployment, KVEstimate], VllmCapacity],
    est_at: Callable[[int | None], KVEstimate],
    weights: Weights,
) -> tuple[Recommended | None, Advice | None]:
    """What to set, and on what basis (:class:`Recommended`): first a change that makes the
    settings start (vLLM's auto-fit length, or the Mamba ceiling), then ``max_num_seqs`` from
    the workload, the worst case, or the engine's default kept."""
    auto_fit = None
    prefix = ""
    users_seqs = dep.settings.max_num_seqs is not None
    if not cap.fits and cap.start_changes and not cap.estimated_max_model_len:
        # a won't-start after sizing or at start-up (planner.budget.post_allocation): the
        # first of vLLM's own remedies that starts
        for change in cap.start_changes:
            kw = {
                ("cuda_graph_bytes" if k == "enforce_eager" else k): (
                    0 if k == "enforce_eager" else v
                )
                for k, v in change.items()
            }
            tried = dep.with_settings(**kw)
            tried_est = estimate(tried.spec, tried.settings, tried.gpu, batch_sizes=())
            tried_cap = capacity(tried, tried_est)
            if tried_cap.fits:
                dep, est, cap = tried, tried_est, tried_cap
                prefix = f"{as_flags(change)}: {cap_term_reason(change)}; "
                users_seqs = users_seqs or "max_num_seqs" in change
                break
        else:
            return None, None
    if not cap.fits:
        if not cap.estimated_max_model_len:
            return None, None
        auto_fit = cap.estimated_max_model_len
        length = friendly_len(auto_fit)
        dep = dep.with_settings(max_model_len=length)
        est = est_at(length)
        cap = capacity(dep, est)
        if not cap.fits:
            return None, None
        prefix = (
            f"max_model_len {length:,}: the longest request that fits is {auto_fit:,} tokens "
            "(what --max-model-len -1 picks), rounded down; "
        )
    mamba_capped = cap.mamba_max_num_seqs is not None and cap.max_num_seqs > cap.mamba_max_num_seqs
    if mamba_capped:
        dep = dep.with_settings(max_num_seqs=cap.mamba_max_num_seqs)
        est = estimate(dep.spec, dep.settings, dep.gpu, batch_sizes=())
        cap = capacity(dep, est)
        prefix += (
            f"max_num_seqs at most {cap.max_num_seqs:,}: one Mamba state block per running "
            "sequence; "
        )
    gmu = dep.settings.gmu
    usable = cap.num_gpu_blocks - 1
    bpr = cap.blocks_per_request
    advice = None
    figures: dict[str, int | float] = {}
    workload = options.workload
    if workload is None and options.avg_prompt_tokens and options.avg_output_tokens:
        from planner.advise import synthetic_workload

        workload = synthetic_workload(
            options.avg_prompt_tokens, options.avg_output_tokens, est.max_model_len
        )
    if workload is not None:
        from planner.advise import advise

        advice = advise(
            dep, est, cap, weights, workload, target=options.target_kv_usage, capacity=capacity
        )
        r = advice.recommended
        seqs, gmu, basis = r.max_num_seqs, r.gpu_memory_utilization, WORKLOAD
        usable = r.num_gpu_blocks - 1
        reason = advice.reason
        if advice.rejected:
            reason = (
                f"{rejected_words(advice.rejected, advice.requests, est.max_model_len)}; " + reason
            )
        if gmu != dep.settings.gmu:
            reason += (
                f"; the pool is more than that needs: gpu_memory_utilization {gmu:g} "
                f"({r.num_gpu_blocks:,} blocks) puts p90 usage at {r.usage_p90:.0%}"
            )
        figures = {"preemptions": r.preemptions, "usage_p90": r.usage_p90, "usage_max": r.usage_max}
    elif options.worst_case:
        ceiling = cap.max_num_seqs
        seqs, basis = min(worst_case_seqs(cap), ceiling), WORST_CASE
        usage = seqs * bpr / usable
        reason = (
            f"{seqs} sequences of {est.max_model_len:,} tokens use {usage:.0%} of {usable:,} "
            "KV blocks"
        )
        if seqs == ceiling:
            reason += f" (capped at max_num_seqs {ceiling})"
    else:
        seqs, basis = cap.max_num_seqs, ENGINE_DEFAULT
        whose = "your" if users_seqs else "vLLM's default"
        kept = "" if mamba_capped else f"{whose} max_num_seqs {seqs:,}, kept: "
        running = min(seqs, usable // bpr)
        reason = kept + (
            f"with every request at {est.max_model_len:,} tokens {running:,} run at once "
            f'(vLLM\'s "Maximum concurrency" {cap.max_concurrency:.2f}x), the rest queue'
            if running < seqs
            else f"all {seqs:,} fit at once even at {est.max_model_len:,} tokens each"
        )
    return (
        Recommended(
            max_model_len=est.max_model_len,
            max_num_seqs=seqs,
            gpu_memory_utilization=gmu,
            block_size=est.block_size,
            kv_cache_dtype=est.kv_cache_dtype,
            kv_usage=round(seqs * bpr / usable, 4),
            reason=prefix + reason,
            basis=basis,
            worst_case_running=min(seqs, usable // bpr),
            auto_fit_max_model_len=auto_fit,
            **figures,  # type: ignore[arg-type]
        ),
        advice,
    )


def _alternatives(
    dep: Deployment,
    est: KVEstimate,
    capacity: Callable[[Deployment, KVEstimate, Weights], VllmCapacity],
) -> list[Alternative]:
    """fp8 KV (when the cache is wider than a byte) and twice the TP (when the model splits),
    each planned as its own deployment."""
    s = dep.settings
    changes: list[dict[str, object]] = []
    if est.kv_dtype_bytes > 1 and fp8_kv_refusal(dep.gpu) is None:  # what the GPU runs
        changes.append({"kv_cache_dtype": KVDtype.FP8})
    changes.append({"tp": s.tp * 2})
    out = []
    for change in changes:
        alt = dep.with_settings(**change)
        try:
            e = estimate(alt.spec, alt.settings, alt.gpu, batch_sizes=())
        except UsageError:  # the model does not split over that many ranks
            continue
        c = capacity(alt, e, for_deployment(alt))
        shown = {k: (v.value if isinstance(v, KVDtype) else v) for k, v in change.items()}
        out.append(
            Alternative(
                change=as_flags(change),
                changes=shown,
                max_concurrency=round(c.max_concurrency, 2),
                num_gpu_blocks=c.num_gpu_blocks,
                fits=c.fits,
            )
        )
    return out


def _block_sizes(length: int, avg_tokens: int) -> list[BlockSizeRow]:
    """Internal fragmentation vs block-table size for 8/16/32-token blocks, for requests of
    uniformly spread length with mean ``avg_tokens``: the last block is on average half empty,
    (bs - 1) / 2 tokens."""
    rows = []
    for bs in (8, 16, 32):
        wasted = (bs - 1) / 2
        rows.append(
            BlockSizeRow(
                block_size=bs,
                wasted_tokens_per_seq=wasted,
                fragmentation_pct=round(100 * wasted / (avg_tokens + wasted), 2),
                block_table_entries=cdiv(length, bs),
            )
        )
    return rows


def _naive(est: KVEstimate, avg_tokens: int, rec: Recommended | None) -> NaiveVsPaged:
    """Contiguous pre-allocation at max_model_len (transformers' static cache) vs paged blocks
    holding only what each sequence uses."""
    seqs = max(rec.worst_case_running, 1) if rec else 1  # the requests that fit at once
    per_token = est.kv_bytes_per_token
    naive = seqs * est.max_model_len * per_token
    used = min(avg_tokens, est.max_model_len)
    paged = seqs * cdiv(used, est.block_size) * est.block_size * per_token
    waste = 100 * (naive - paged) / naive if naive else 0.0
    return NaiveVsPaged(
        avg_tokens=used,
        sequences=seqs,
        naive_bytes=naive,
        paged_bytes=paged,
        waste_pct=round(waste, 2),
    )


# --------------------------------------------------------------------------- entry point
