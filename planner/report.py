"""What ``kvplan estimate`` reports for a deployment (:func:`report`): the plan, or the refusal
that comes before one; with --gpus, the layouts that fit side by side and the one picked (the
physical checks of :func:`physical_refusal` first); without a GPU, the common GPUs compared."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planner.budget import vllm_budget
from planner.cluster import best_layout, choice_reason, layouts, node_size, physical_problems
from planner.deployment import (
    Deployment,
    ServeSettings,
)
from planner.engine_budgets import EngineCapacity
from planner.errors import UsageError, WontStartError
from planner.gpu_support import runs_fp8_weights
from planner.gpus import GPUS, detect_gpu, get_gpu
from planner.kv_layout import KVEstimate, estimate
from planner.lora import with_adapter
from planner.model.specs import Engine
from planner.units import GIB
from planner.weights import for_deployment

if TYPE_CHECKING:
    from planner.cluster import LayoutRow
from planner.plan_types import FITS_AT_WORST_CASE, WONT_START, Plan, PlanOptions, Refusal
from planner.recommend import engine_outcome, layout_capacity, plan

COMMON_GPUS = ("l4", "a10g", "rtx-4090", "l40s", "a100-80gb", "h100", "h200", "b200")


@dataclass(frozen=True, kw_only=True)
class GpuRow:
    """One GPU of the comparison table shown when no GPU is named (JSON ``gpus[]``): vLLM's
    budget for the same settings on each common GPU, with that GPU's batch defaults."""

    name: str
    memory_bytes: int
    weights_bytes: int
    available_kv_bytes: int
    num_gpu_blocks: int
    kv_cache_size_tokens: int
    max_concurrency: float
    fits: bool


@dataclass(frozen=True, kw_only=True)
class Report:
    """What ``kvplan estimate`` prints: the KV estimate, and a plan for the GPU (named or
    detected), or a table across common GPUs."""

    estimate: KVEstimate
    plan: Plan | None
    gpu_table: list[GpuRow]
    engine: EngineCapacity | None = None  # --engine sglang|trtllm|hf with a GPU: its plan
    engine_outcome: str | None = None  # that engine's outcome (vocabulary of worst_case)
    # that engine's running limit: the user's max_num_seqs, else its own
    engine_running_limit: int | None = None


def report(dep: Deployment, options: PlanOptions | None = None, *, detect: bool = True) -> Report:
    """``kvplan estimate``: the estimate, plus a plan for ``dep.gpu`` (or the detected one),
    or a capacity table across common GPUs when there is none."""
    options = options or PlanOptions()
    if dep.settings.lora_adapter is not None:
        dep = with_adapter(dep)
    s, spec = dep.settings, dep.spec
    if dep.gpu is None and detect and s.kv_cache_memory_bytes is None:
        dep = dep.on(detect_gpu())
    choice: tuple[str, list[LayoutRow]] | None = None
    if dep.gpu is not None or s.kv_cache_memory_bytes is not None:  # a plan: can it start?
        dep, options, choice = _layout_for(dep, options)
        s = dep.settings
    base = estimate(spec, s, dep.gpu, batch_sizes=options.batch_sizes)  # validates the flags
    if s.engine is not Engine.VLLM:
        if dep.gpu is None or s.kv_cache_memory_bytes is not None:
            return Report(estimate=base, plan=None, gpu_table=[])
        # that engine on that GPU, next to vLLM's plan of the same deployment
        vllm_plan = _planned(dep.with_settings(engine=Engine.VLLM, block_size=None), options)
        vllm_plan = _with_choice(vllm_plan, choice)
        mine = next(e for e in vllm_plan.engines if e.engine == s.engine.value)
        if s.engine is Engine.HF:  # a static batch: all of it is allocated up front, or OOM
            batch = s.max_num_seqs or max(options.batch_sizes, default=1)
            mine = replace(mine, max_running_requests=batch)
            held = int(mine.max_concurrency)
            static = FITS_AT_WORST_CASE if held >= batch else WONT_START
            return Report(
                estimate=base,
                plan=vllm_plan,
                gpu_table=[],
                engine=mine,
                engine_outcome=static,
                engine_running_limit=batch,
            )
        outcome = engine_outcome(mine, base.max_model_len, s.max_num_seqs)
        limit = s.max_num_seqs or mine.max_running_requests
        return Report(
            estimate=base,
            plan=vllm_plan,
            gpu_table=[],
            engine=mine,
            engine_outcome=outcome,
            engine_running_limit=limit,
        )
    if dep.gpu is not None or s.kv_cache_memory_bytes is not None:
        the_plan = _with_choice(_planned(dep, options), choice)
        return Report(estimate=the_plan.estimate, plan=the_plan, gpu_table=[])
    rows = []
    for name in COMMON_GPUS:
        on_gpu = dep.on(get_gpu(name))
        weights = for_deployment(on_gpu)  # the GPU picks the MoE kernel (Marlin below SM 9.0)
        e = estimate(spec, s, on_gpu.gpu, batch_sizes=())
        cap = vllm_budget(on_gpu, e, weights)
        g = on_gpu.gpu
        assert g is not None
        rows.append(
            GpuRow(
                name=g.name,
                memory_bytes=g.memory_bytes,
                weights_bytes=weights.bytes_per_rank,
                available_kv_bytes=cap.available_kv_bytes,
                num_gpu_blocks=cap.num_gpu_blocks,
                kv_cache_size_tokens=cap.kv_cache_size_tokens,
                max_concurrency=round(cap.max_concurrency, 2),
                fits=cap.fits,
            )
        )
    return Report(estimate=base, plan=None, gpu_table=rows)


def _with_choice(p: Plan, choice: tuple[str, list[LayoutRow]] | None) -> Plan:
    """The plan with kvplan's layout choice: its reason, and the layouts it was picked from
    (planned with the user's own settings: EP only where that row has it) with its row
    marked."""
    if choice is None:
        return p
    reason, rows = choice
    s = p.estimate
    picked = (
        s.tensor_parallel_size,
        s.pipeline_parallel_size,
        p.cluster.data_parallel_size if p.cluster else 1,
    )
    marked = [replace(r, chosen=(r.tp, r.pp, r.dp) == picked, yours=False) for r in rows]
    return replace(p, layout_choice=reason, layouts=marked)


def _planned(dep: Deployment, options: PlanOptions) -> Plan:
    """:func:`plan`, whose refusals carry the layouts of the GPUs given and the one that
    starts there first."""
    try:
        return plan(dep, options)
    except WontStartError as exc:
        r = exc.refusal
        total = options.total_gpus
        if not isinstance(r, Refusal) or total is None or r.layouts or dep.gpu is None:
            raise

        rows = layouts(dep, total, options.gpus_per_node, layout_capacity, nodes=options.nodes)
        best = best_layout(rows)
        changes = ([_layout_change(best, dep.settings)] if best else []) + r.changes
        raise replace(r, layouts=rows, gpus=total, changes=changes).error() from None


def _layout_change(row: LayoutRow, s: ServeSettings) -> dict[str, object]:
    """The settings that turn ``s``'s layout into ``row``'s (TP always named)."""
    out: dict[str, object] = {"tp": row.tp}
    for key, mine, theirs in (("pp", s.pp, row.pp), ("dp", s.dp, row.dp)):
        if mine != theirs:
            out[key] = theirs
    if row.expert_parallel != s.enable_expert_parallel:
        out["enable_expert_parallel"] = row.expert_parallel
    return out


def _layout_for(
    dep: Deployment, options: PlanOptions
) -> tuple[Deployment, PlanOptions, tuple[str, list[LayoutRow]] | None]:
    """Check that ``dep`` can start on any machine (:func:`planner.cluster.physical_problems`)
    and, for ``--gpus N`` (or ``--nodes``) with no layout typed, pick the layout that holds
    the most: returns the deployment to plan, the options (``--gpus`` above a node's size
    spread over whole nodes) and why that layout, or raises the refusal."""
    total = options.total_gpus
    node, _ = node_size(dep.gpu, options.gpus_per_node)
    if options.gpus is not None and options.gpus_per_node is None and options.nodes == 1:
        if options.gpus > node and options.gpus % node == 0:
            options = replace(options, nodes=options.gpus // node, gpus_per_node=node)
    s, spec = dep.settings, dep.spec
    rows: list[LayoutRow] = []
    choice = None
    gpu = dep.gpu
    planned = dep.with_settings(engine=Engine.VLLM, block_size=None)  # layouts: vLLM's budget
    if total is not None and total > 1 and s.gpus == 1 and gpu is not None and gpu.memory_bytes:
        rows = layouts(planned, total, options.gpus_per_node, layout_capacity, nodes=options.nodes)
        best = best_layout(rows) or _closest(rows)
        if best is None:
            raise _no_layout(dep, rows, total, options.nodes).error()
        length = s.max_model_len or spec.max_model_len
        choice = (choice_reason(best, rows, total, length), rows)
        dep = dep.with_settings(
            tp=best.tp,
            pp=best.pp,
            dp=best.dp,
            enable_expert_parallel=best.expert_parallel,
            num_redundant_experts=s.num_redundant_experts if best.expert_parallel else 0,
        )
    refusal = physical_refusal(dep, options, rows)
    if refusal is not None:
        raise refusal.error()
    return dep, options, choice


def physical_refusal(
    dep: Deployment, options: PlanOptions | None = None, rows: list[LayoutRow] | None = None
) -> Refusal | None:
    """The :class:`Refusal` of a layout no machine starts (:func:`planner.cluster.
    physical_problems`: GPUs given, node size, heads / layers / DCP / EP divisibility), None
    when there is none: ``kvplan estimate`` and every ``kvplan check`` entry ask this. For a
    GPU count too small the layout of the GPUs given that holds the most comes first among
    the changes (``rows``: the layouts already planned, else planned here)."""
    options = options or PlanOptions()
    total, gpu = options.total_gpus, dep.gpu
    problems = physical_problems(dep, total, options.nodes, options.gpus_per_node)
    if not problems:
        return None
    first = problems[0]
    changes = list(first.changes)
    rows = rows or []
    if first.check in ("gpus", "node") and total is not None and gpu is not None:
        planned = dep.with_settings(engine=Engine.VLLM, block_size=None)
        rows = rows or layouts(
            planned, total, options.gpus_per_node, layout_capacity, nodes=options.nodes
        )
        best = best_layout(rows)
        if best is not None:
            changes.insert(0, _layout_change(best, dep.settings))
    changes = [
        c
        for c in _distinct(changes, dep.settings)
        if not isinstance(c, dict) or _layout_starts(dep, c, options)
    ]
    reason = "; also ".join(p.reason for p in problems)
    return Refusal(
        model=dep.spec.name,
        gpu=gpu,
        settings=dep.settings,
        check=first.check,
        reason=reason,
        changes=changes,
        layouts=rows,
        gpus=total,
    )


def _layout_starts(dep: Deployment, change: dict[str, object], options: PlanOptions) -> bool:
    """Whether a change of layout passes the layout rules itself (``--dcp 2`` on a GQA model
    offers ``tp: 16, dcp: 2``; on an 8-GPU node that is no fix). Other changes pass."""
    if not set(change) <= {"tp", "pp", "dp", "dcp", "enable_expert_parallel"}:
        return True
    try:
        moved = dep.with_settings(**change)
    except UsageError:
        return False
    return not physical_problems(moved, options.total_gpus, options.nodes, options.gpus_per_node)


def _closest(rows: list[LayoutRow]) -> LayoutRow | None:
    """Where no layout starts but some hold the weights: the one with the most KV memory (its
    plan says what length fits)."""
    held = [r for r in rows if r.available_kv_bytes > 0]
    return max(held, key=lambda r: (r.available_kv_bytes * r.dp, -r.pp, -r.dp), default=None)


def _no_layout(dep: Deployment, rows: list[LayoutRow], total: int, nodes: int) -> Refusal:
    """No split of ``total`` GPUs holds the weights: the least weights per GPU against what
    vLLM may use, and the changes that start (more GPUs, a bigger GPU, an fp8 checkpoint)."""
    gpu, s, spec = dep.gpu, dep.settings, dep.spec
    assert gpu is not None
    requested = -(-int(gpu.memory_bytes * s.gmu * 1000) // 1000)
    changes: list[dict[str, object] | str] = []
    if nodes == 1:
        changes.append(f"{2 * total} GPUs (--gpus {2 * total})")
    if not rows:
        reason = f"{spec.name} splits over no layout of {total} GPUs"
    else:
        least = min(rows, key=lambda r: r.weights_bytes)
        reason = (
            f"no layout of the {total} GPUs holds the weights: the least per GPU is "
            f"{least.weights_bytes / GIB:.2f} GiB ({least.label}), and vLLM may use "
            f"{requested / GIB:.2f} GiB of {gpu.name} (gpu_memory_utilization {s.gmu})"
        )
        if nodes > 1:
            reason += f"; over {nodes} nodes each replica (TP x PP) stays inside one node"
        bigger = [g for g in GPUS if g.memory_bytes * s.gmu > least.weights_bytes * 1.2]
        if bigger:
            changes.append({"gpu": min(bigger, key=lambda g: g.memory_bytes).name})
    if spec.dtype_bytes >= 2 and runs_fp8_weights(gpu):
        w = for_deployment(dep)
        if w.quantization is None:
            changes.append("an fp8 checkpoint (about half the weight bytes)")
    return Refusal(
        model=spec.name,
        gpu=gpu,
        settings=s,
        check="layouts",
        reason=reason,
        changes=changes,
        layouts=rows,
        gpus=total,
    )


def _distinct(
    changes: list[dict[str, object] | str], s: ServeSettings
) -> list[dict[str, object] | str]:
    """The changes less those that lead to the same settings as one before them."""
    seen: list[ServeSettings] = []
    out: list[dict[str, object] | str] = []
    for change in changes:
        if isinstance(change, dict) and set(change) <= {"tp", "pp", "dp", "enable_expert_parallel"}:
            try:
                result = s.but(**change)
            except UsageError:
                continue
            if result in seen:
                continue
            seen.append(result)
        out.append(change)
    return out
