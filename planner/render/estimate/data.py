"""The JSON of ``kvplan estimate`` (:func:`report_dict`, :func:`refusal_dict`): every number the
text shows, under the keys docs/json.md lists."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from planner.budget import estimate_ranges
from planner.lora import describe as describe_lora
from planner.offload import describe_tier
from planner.recommend import wont_start_error

if TYPE_CHECKING:
    from planner.kv_layout import KVEstimate
    from planner.plan_types import Plan, Refusal
    from planner.report import Report


def estimate_dict(est: KVEstimate) -> dict[str, Any]:
    data = asdict(est)
    data["pp_layers"] = list(est.pp_layers)
    data["mha_savings"] = round(est.mha_savings, 4)
    return data


def report_dict(rep: Report) -> dict[str, Any]:
    """The JSON of ``kvplan estimate``: the estimate's keys, plus the plan's when a GPU is set."""
    data = estimate_dict(rep.estimate)
    if rep.plan is not None and rep.plan.warnings:
        data["warnings"] = [*data["warnings"], *rep.plan.warnings]
    if rep.gpu_table:
        data["gpus"] = [asdict(r) for r in rep.gpu_table]
    p = rep.plan
    if p is None:
        return data
    if rep.engine is not None:
        # --engine sglang|trtllm|hf on a GPU: that engine's plan; the rest is vLLM's, compared
        data["engine_plan"] = {
            **asdict(rep.engine),
            "outcome": rep.engine_outcome,
            "running_limit": rep.engine_running_limit,
            "worst_case_running": min(
                rep.engine_running_limit or 0, int(rep.engine.max_concurrency)
            ),
            "command": p.commands.get(rep.engine.engine),
        }
    cap = p.vllm
    data.update(
        gpu={"name": p.gpu.name, "memory_bytes": p.gpu.memory_bytes, "source": p.gpu.source},
        gpu_memory_utilization=cap.gpu_memory_utilization,
        requested_bytes=cap.requested_bytes,
        weights_bytes=p.weights.bytes_per_rank,
        weights_total_bytes=p.weights.total_bytes,
        weights_source=p.weights.source,
        parameter_count=p.weights.parameter_count,
        rotary_cache_bytes=p.weights.rotary_cache_bytes,
        activation_peak_bytes=cap.activation_peak_bytes,
        non_torch_bytes=cap.non_torch_bytes,
        cuda_graph_bytes=cap.cuda_graph_bytes,
        headroom_bytes=cap.headroom_bytes,
        activation_parts={
            "forward_bytes": cap.activation_forward_bytes,
            "sampler_bytes": cap.activation_sampler_bytes,
        },
        after_sizing={
            "cuda_graph_bytes": cap.graphs_after_sizing_bytes,
            "warmup_bytes": cap.warmup_bytes,
            "free_bytes": cap.post_allocation_free_bytes,
            "free_at_start_bytes": cap.free_at_start_bytes,
        },
        # vLLM >= 0.34: the pool measured after warm-up (planner.budget.MeasuredSizing)
        **(
            {
                "measured_sizing": {
                    "margin_bytes": cap.measured_margin_bytes,
                    "reserved_kv_bytes": cap.reserved_kv_bytes,
                    "free_at_start_bytes": cap.free_at_start_bytes,
                }
            }
            if cap.measured_margin_bytes is not None
            else {}
        ),
        wont_start_term=cap.wont_start_term,
        start_changes=[dict(c) for c in cap.start_changes],
        available_kv_bytes=cap.available_kv_bytes,
        num_gpu_blocks=cap.num_gpu_blocks,
        kv_cache_size_tokens=cap.kv_cache_size_tokens,
        max_concurrency=round(cap.max_concurrency, 4),
        estimate_ranges={
            k: list(v)
            for k, v in estimate_ranges(
                cap, p.estimate.tensor_parallel_size * p.estimate.pipeline_parallel_size
            ).items()
        },
        vllm_version=p.vllm_version,
        data_parallel_size=p.cluster.data_parallel_size if p.cluster else 1,
        expert_parallel=p.expert_parallel,
        cluster=asdict(p.cluster) if p.cluster else None,
        speculative=asdict(p.speculative) if p.speculative else None,
        lora_bytes=p.weights.lora_bytes_per_rank,
        lora=describe_lora(p.lora) if p.lora else None,
        weights_offloaded_bytes=p.weights.offloaded_bytes_per_rank,
        cpu_kv_tokens=p.kv_tier.cpu_kv_tokens if p.kv_tier else None,
        kv_offload=describe_tier(p.kv_tier),
        host_ram_bytes=p.host_ram.as_dict(),
        features=[f.as_dict() for f in p.features],
        mm={**asdict(p.mm), "levers": [asdict(lv) for lv in p.mm_levers]} if p.mm else None,
        layouts=[asdict(r) for r in p.layouts] if p.layouts else None,
        node_commands=p.node_commands or None,
        # an AMD GPU over several nodes: each node's command in vLLM's ROCm image
        **({"node_docker_commands": p.node_docker_commands} if p.node_docker_commands else {}),
        estimated_max_model_len=cap.estimated_max_model_len,
        fits=p.outcome != "wont_start",
        outcome=p.outcome,
        worst_case_running=p.worst_case_running,
        outcome_reason=p.outcome_reason,
        error=cap.error,
        mamba_max_num_seqs=cap.mamba_max_num_seqs,
        vllm_log=cap.log_lines,
        recommended=asdict(p.recommended) if p.recommended else None,
        grid=[asdict(c) for c in p.grid],
        alternatives=[asdict(a) for a in p.alternatives],
        engines=[asdict(e) for e in p.engines],
        block_sizes=[asdict(b) for b in p.block_sizes],
        prefix_sharing=asdict(p.prefix_sharing) if p.prefix_sharing else None,
        naive_vs_paged=asdict(p.naive_vs_paged),
        commands=p.commands,
        command_files=p.command_files,
        workload=_advice_dict(p),
        plan_notes=p.notes,
        **({"layout_choice": p.layout_choice} if p.layout_choice else {}),
        # the change that starts, as data (only when the settings won't start)
        **({"changes": _plain(wont_start_error(p).changes)} if p.outcome == "wont_start" else {}),
        estimates_note=(
            "weights are exact only from safetensors headers; activation, non-torch and "
            "CUDA-graph terms are estimates calibrated on measured vLLM startups — "
            "`kvplan verify --gpu` measures them"
        ),
    )
    return data


def _plain(changes: list[dict[str, object] | str]) -> list[Any]:
    """Changes as JSON data: enum values by their names."""
    return [
        {k: getattr(v, "value", v) for k, v in c.items()} if isinstance(c, dict) else c
        for c in changes
    ]


def refusal_dict(r: Refusal) -> dict[str, Any]:
    """The JSON of a deployment that won't start before it is planned: the estimate's keys
    where the KV layout was computed, the figures computed before it failed, and the verdict
    (``outcome`` ``wont_start``, ``outcome_reason``, ``wont_start_check``, ``changes`` as
    data, ``change_flags`` as flags); no commands."""
    data: dict[str, Any] = estimate_dict(r.estimate) if r.estimate else {"model": r.model}
    s = r.settings
    data.update(
        tensor_parallel_size=s.tp,
        pipeline_parallel_size=s.pp,
        data_parallel_size=s.dp,
        expert_parallel=s.enable_expert_parallel,
        gpu=(
            {"name": r.gpu.name, "memory_bytes": r.gpu.memory_bytes, "source": r.gpu.source}
            if r.gpu
            else None
        ),
        gpus=r.gpus,
        gpu_memory_utilization=s.gmu,
        requested_bytes=(-(-int(r.gpu.memory_bytes * s.gmu * 1000) // 1000) if r.gpu else None),
    )
    if r.weights is not None:
        data.update(
            weights_bytes=r.weights.bytes_per_rank,
            weights_total_bytes=r.weights.total_bytes,
            weights_source=r.weights.source,
            parameter_count=r.weights.parameter_count,
        )
    cap = r.vllm
    if cap is not None:
        data.update(
            activation_peak_bytes=cap.activation_peak_bytes,
            non_torch_bytes=cap.non_torch_bytes,
            cuda_graph_bytes=cap.cuda_graph_bytes,
            available_kv_bytes=cap.available_kv_bytes,
            num_gpu_blocks=cap.num_gpu_blocks,
            kv_cache_size_tokens=cap.kv_cache_size_tokens,
        )
    data.update(
        layouts=[asdict(row) for row in r.layouts] if r.layouts else None,
        fits=False,
        outcome="wont_start",
        worst_case_running=0,
        outcome_reason=r.reason,
        wont_start_check=r.check,
        changes=_plain(r.changes),
        change_flags=r.hints,
        commands={},
    )
    return data


def _advice_dict(p: Plan) -> dict[str, Any] | None:
    """JSON ``workload``: the replay behind a workload-based recommendation."""
    a = p.advice
    if a is None:
        return None
    return {
        "name": a.name,
        "source": a.source,
        "requests": a.requests,
        "rejected": a.rejected,
        "arrivals": "all at once (saturation)",
        "target_usage": a.target_usage,
        "max_num_seqs_ceiling": a.ceiling,
        "recommended": asdict(a.recommended),
        "next_up": asdict(a.next_up) if a.next_up else None,
        "yours": asdict(a.yours),
    }
