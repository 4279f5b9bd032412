"""The memory part of ``kvplan estimate``'s text: vLLM's budget term by term
(:func:`budget_lines`), what lives beyond it (LoRA, offload, the CPU KV tier, a multimodal
tower) and the host RAM the deployment holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.activation import ACT_CONST_BYTES
from planner.budget import estimate_ranges, is_rocm
from planner.render._output import (
    BAR_CHARS,
    console,
    usage_bar,
    user_text,
)
from planner.units import fmt_bytes, format_gib

if TYPE_CHECKING:
    from planner.plan_types import Plan


def memory_beyond(p: Plan) -> None:
    """One line each for the LoRA buffers, offloaded weights and the CPU KV tier."""
    out = console()
    if p.lora is not None:
        b = p.lora
        which = " ".join(b.target_modules) if b.target_modules else "every module"
        out.print(
            f"  LoRA: {b.max_loras} slot(s) x rank {b.max_lora_rank} = "
            f"{fmt_bytes(p.weights.lora_bytes_per_rank)}/GPU, counted as weights ({which})",
            markup=False,
        )
    if p.weights.offloaded_bytes_per_rank:
        out.print(
            f"  CPU offload: {fmt_bytes(p.weights.offloaded_bytes_per_rank)}/GPU of weights in "
            "pinned host RAM (read over PCIe)",
            markup=False,
        )
    tier = p.kv_tier
    if tier is not None and tier.cpu_kv_tokens is not None:
        ratio = tier.ratio_to_gpu_pool
        times = f"{ratio:.2f}x the GPU pool" if ratio is not None else "no GPU pool"
        out.print(
            f"  CPU KV tier ({tier.backend}): {tier.cpu_kv_tokens:,} tokens, "
            f"{tier.cpu_blocks:,} blocks = {times}",
            markup=False,
        )
    elif tier is not None:
        out.print(
            f"  CPU KV tier ({tier.backend}): sized by the LMCache server, not by vLLM",
            markup=False,
        )


def mm_line(p: Plan) -> None:
    """A multimodal model's tower and encoder, in two short lines under the KV line."""
    mm = p.mm
    assert mm is not None
    out = console()
    if mm.mm_encoder_tp_mode == "off":
        out.print(
            f"  vision tower ({mm.family}): not built, no encoder (every modality off)",
            markup=False,
        )
        return
    where = {"weights": "TP-sharded", "data": "a copy per TP rank"}
    out.print(
        f"  vision tower ({mm.family}): {fmt_bytes(mm.tower_weights_bytes)} per GPU "
        f"({where[mm.mm_encoder_tp_mode]})",
        markup=False,
    )
    if mm.encoder_budget_tokens is None:
        out.print(
            "  encoder budget unknown: tokens per item not derived (--mm-tokens-per-item)",
            markup=False,
        )
    elif mm.profiled_modality is not None:
        tokens = mm.tokens_per_item[mm.profiled_modality] or 0
        items = mm.profile_items or 0
        what = f"{items:,} {mm.profiled_modality}{'s' if items != 1 else ''} of {tokens:,}"
        out.print(
            f"  encoder: budget {mm.encoder_budget_tokens:,} tokens, {what} "
            + (
                f"profiled: +{fmt_bytes(mm.activation_bytes)} activation"
                if mm.profiled
                else "not profiled (--skip-mm-profiling)"
            ),
            markup=False,
        )


HOST_PARTS = (
    ("kv_offload", "KV tier"),
    ("pinned_weights", "offloaded weights"),
    ("lora_cpu_cache", "LoRA cache"),
    ("mm_processor_cache", "MM cache"),
)


def host_ram_line(p: Plan) -> str:
    """The host RAM the deployment holds, in one line with its parts (at most: the LoRA and
    multimodal caches fill up to their size)."""
    parts = p.host_ram.as_dict()
    shown = [f"{label} {fmt_bytes(parts[key])}" for key, label in HOST_PARTS if parts[key]]
    if not shown:
        return "Host RAM: none held (no KV tier, weight offload, LoRA or multimodal cache)"
    line = f"Host RAM: {fmt_bytes(p.host_ram.total)} = " + " + ".join(shown)
    if len(line) <= 80:
        return line
    return f"Host RAM: {fmt_bytes(p.host_ram.total)} =\n  " + " + ".join(shown)


def kept_free_bytes(cap: Any) -> int:
    """What 0.34's measured sizing keeps out of the pool beyond the profile's terms (the graph
    estimate a second time, its margin and the CUDA context, or memory another process
    holds): the reservation (the request less those terms) less the pool; 0 for a profiled
    pool."""
    if cap.reserved_kv_bytes is None:
        return 0
    return int(max(0, cap.reserved_kv_bytes - max(cap.available_kv_bytes, 0)))


def budget_lines(p: Plan) -> None:
    from rich.table import Table

    out = console()
    cap = p.vllm
    out.print(
        f"[bold]vLLM's budget[/]: {fmt_bytes(p.gpu.memory_bytes)} × gpu_memory_utilization "
        f"{cap.gpu_memory_utilization:g} = {fmt_bytes(cap.requested_bytes)}"
    )
    free = p.gpu.memory_bytes - cap.requested_bytes
    kept = kept_free_bytes(cap)
    parts = [
        ("weights", cap.weights_bytes),
        ("activation", cap.activation_peak_bytes),
        ("overhead", cap.non_torch_bytes + cap.cuda_graph_bytes + cap.headroom_bytes + kept),
        ("KV cache", max(cap.available_kv_bytes, 0)),
        ("not requested", free),
    ]
    out.print("  [" + usage_bar(parts, p.gpu.memory_bytes) + "]", markup=False)
    out.print("   " + "  ".join(f"{c} {label}" for label, c in BAR_CHARS.items()), markup=False)
    legend = Table(box=None, show_header=False, pad_edge=False)
    legend.add_column(no_wrap=True)
    legend.add_column(justify="right", no_wrap=True)
    legend.add_column()
    ranges = estimate_ranges(
        cap, p.estimate.tensor_parallel_size * p.estimate.pipeline_parallel_size
    )

    def span(key: str) -> str:
        low, high = ranges[key]
        return f"{format_gib(low)}–{format_gib(high)}"

    rocm = is_rocm(p.gpu)
    # ROCm: HIP runtime, hipBLASLt and RCCL; vLLM subtracts its graphs there from 0.26
    # (planner.vllm_rules, rocm_graph_estimate)
    libs, since = ("HIP, hipBLASLt, RCCL", "0.26 on ROCm") if rocm else ("cuBLAS, NCCL", "0.20")
    rows = [
        ("weights", cap.weights_bytes, f"{p.weights.source}: {p.weights.detail}"),
        (
            "activation peak",
            cap.activation_peak_bytes,
            f"est. {span('activation_peak_bytes')}: " + activation_why(cap, p.vllm_version),
        ),
        ("non-torch", cap.non_torch_bytes, f"est. {span('non_torch_bytes')}: {libs}"),
        (
            "CUDA graphs",
            cap.cuda_graph_bytes,
            f"est. {span('cuda_graph_bytes')} (--enforce-eager: 0)"
            if cap.cuda_graph_bytes
            else f"none subtracted (eager mode, or vLLM {p.vllm_version} < {since})",
        ),
    ]
    mm = p.mm
    if mm is not None and cap.encoder_activation_bytes and mm.profiled_modality:
        rows.insert(
            2,
            (
                "  of which encoder",
                cap.encoder_activation_bytes,
                f"est.: encoder outputs {fmt_bytes(mm.encoder_output_bytes)} held"
                + (
                    f" + the tower's peak beyond the language model's "
                    f"({fmt_bytes(mm.activation_bytes - mm.encoder_output_bytes)})"
                    if mm.activation_bytes > mm.encoder_output_bytes
                    else f"; the tower's peak ({fmt_bytes(mm.tower_activation_bytes)}, "
                    f"{mm.tower_activation_source}) stays under the language model's"
                ),
            ),
        )
    if cap.headroom_bytes:
        rows.append(("headroom", cap.headroom_bytes, "--headroom"))
    if cap.measured_margin_bytes is not None:
        rows.append(
            (
                "kept free",
                kept,
                f"vLLM {p.vllm_version} sizes the pool after warm-up from measured memory: it "
                "keeps the activation and the graph estimate free beside the captured graphs, a "
                f"margin of {format_gib(cap.measured_margin_bytes)} GiB (1 GiB or 0.75 x that "
                "peak) and the CUDA context",
            )
        )
    rows.append(("KV cache", cap.available_kv_bytes, f"what is left: {span('available_kv_bytes')}"))
    if cap.post_allocation_free_bytes is not None and (
        cap.graphs_after_sizing_bytes or cap.wont_start_term in ("cuda_graphs", "sampler_warmup")
    ):
        need = cap.graphs_after_sizing_bytes + cap.warmup_bytes
        rows.append(
            (
                "after sizing",
                need,
                f"graphs {format_gib(cap.graphs_after_sizing_bytes)} + sampler warm-up "
                f"{format_gib(cap.warmup_bytes)} GiB; {format_gib(cap.post_allocation_free_bytes)}"
                " GiB free then"
                + (
                    " (won't start)"
                    if cap.wont_start_term in ("cuda_graphs", "sampler_warmup")
                    else ""
                ),
            )
        )
    for label, size, why in rows:
        legend.add_row(f"  {label}", fmt_bytes(size), f"[dim]{user_text(why)}[/]")
    out.print(legend)


def activation_why(cap: Any, version: str) -> str:
    """Which phase of the profile run the activation peak is: the forward over the token
    budget or the sampler warm-up over its rows (``version``'s sampler: see --json)."""
    del version
    rows = min(cap.max_num_seqs, cap.max_num_batched_tokens)
    # the sampler's peak holds the hidden states too: it is the peak when the language
    # model's share of the activation is over the forward's (planner.activation)
    lm = cap.activation_peak_bytes - cap.encoder_activation_bytes
    if cap.activation_sampler_bytes and (
        cap.activation_sampler_bytes >= cap.activation_forward_bytes
        or lm > cap.activation_forward_bytes + ACT_CONST_BYTES
    ):
        return f"sampler over {rows:,} rows"
    return f"forward over {cap.max_num_batched_tokens:,} tokens"
