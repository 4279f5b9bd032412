"""The findings of ``kvplan diagnose``: which budget term explains the KV difference, whether
the cache layout matches, and the troubleshooting rules applied to what the log shows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from planner.budget import bytes_per_logged_token, logged_kv_tokens
from planner.deployment import SPELLINGS, as_flags, fp8_kv_caveat
from planner.diagnose.kinds import KINDS, Source, finding_text
from planner.diagnose.log_figures import BootLog
from planner.diagnose.shared_gpu import held_by_others
from planner.gpu_support import fp8_kv_refusal
from planner.model.specs import KVDtype
from planner.recommend import worst_case_seqs
from planner.units import GIB
from planner.vllm_rules import rules_for

if TYPE_CHECKING:
    from planner.budget import VllmCapacity
    from planner.deployment import ServeSettings
    from planner.gpus import Gpu
    from planner.plan_types import Plan

LOG_ROUNDING_BYTES = GIB // 200  # format_gib rounds to 0.01 GiB: +-0.005 GiB
PINNED_PCT = 95.0  # "KV usage pinned near 100 %"
LOW_PCT = 50.0  # "usage under 50 %"
MIN_SAMPLES = 3  # runtime stat lines needed before judging usage
TARGET_PCT = 85.0  # the field guide's 80-90 % KV usage: where raising max_num_seqs aims

# Changes a fix suggests, as data (rendered by as_flags, or by as_named beside the log's names).
FP8_KV: dict[str, Any] = {"kv_cache_dtype": KVDtype.FP8}
PREFIX_CACHING_ON: dict[str, Any] = {"enable_prefix_caching": True}


def as_named(changes: Mapping[str, Any]) -> str:
    """Settings as vLLM names them in its boot log (and Python API), the spelling a fix uses
    beside the log's own lines: ``{"max_model_len": 37744}`` -> ``max_model_len 37744``."""
    return ", ".join(
        f"{SPELLINGS[key].log or SPELLINGS[key].yaml} "
        f"{value.value if isinstance(value, Enum) else value}"
        for key, value in changes.items()
    )


@dataclass(frozen=True, kw_only=True)
class Finding:
    """A conclusion with the numbers behind it and what to change (JSON ``findings[]``, which
    adds ``text``, the sentence rendered from ``data``).

    Attributes:
        kind: the rule, a name in :data:`planner.diagnose.kinds.KINDS`. "budget" (which
            budget term explains the available-KV difference) or
            "matches" (within the log's rounding); "layout" (the plan's bytes per token do not
            reproduce the log's token count) or "layout-matches"; "startup-max-len",
            "startup-no-memory" (vLLM refused to start); "oom" or "oom-fragmentation" (memory
            looked free); "kv-pinned", "kv-low"; "prefix-off", "prefix-low-hit";
            "encoder-profile" (a multimodal model's encoder budget and profiled items);
            "plan-does-not-fit" (kvplan's own plan fails).
        severity: "info", "warning" or "error".
        data: the numbers, by kind; sizes in integer bytes.
        fix: what to change, one suggestion each, settings spelled as vLLM's flags
            (``--enable-prefix-caching``) or as its log names them (``max_model_len 37744``).
        lines: the 1-based log lines it rests on (0: none).
        caveats: what a fix needs said beside it: when one suggests fp8 KV,
            :func:`planner.deployment.fp8_kv_caveat` for the GPU (accuracy; native fp8).

    Worked example (``kvplan diagnose vllm-v0-qwen7b-a100.log``): kind "budget", severity
    "info", no fix, lines [9]; data: log_available_bytes 20,379,619,820 (18.98 GiB),
    plan_available_bytes 21,157,727,991 (19.70 GiB), difference_bytes -778,108,171, term
    "activation peak", share_bytes -727,589,507: the log's 2.10 GiB activation peak against
    the plan's 1.42 GiB accounts for -0.68 of the -0.72 GiB.
    """

    kind: str
    severity: str
    data: dict[str, Any]
    fix: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:  # each kind is a type with its text (planner.diagnose.kinds)
            raise AssertionError(f"finding kind {self.kind!r} has no class in diagnose/kinds.py")

    def text(self, source: Source = "log") -> str:
        """Its sentence with its numbers (JSON ``findings[].text``), for a log or a scrape."""
        return finding_text(self, source)


def _subtracts_graphs(p: Plan) -> bool:
    """Whether the plan's vLLM release subtracts CUDA graphs from the KV budget (0.20 on)."""
    return rules_for(p.vllm_version or None).subtracts_cuda_graphs


def activation_term(
    log: BootLog, cap: VllmCapacity | None
) -> tuple[str, int | None, int | None, bool]:
    """The activation peak the budget subtracted, logged against planned (None without a
    plan): (name, logged, planned, whether it holds the graphs). A >= 0.27 log whose peak holds
    the graph estimate it does not state apart (:attr:`BootLog.budget_activation`) is set
    against the plan's activation + CUDA graphs, one term for both."""
    peak, with_graphs = log.budget_activation
    if with_graphs:
        both = cap.activation_peak_bytes + cap.cuda_graph_bytes if cap else None
        return "activation peak + graph estimate", peak, both, True
    return "activation peak", peak, cap.activation_peak_bytes if cap else None, False


def explain(log: BootLog, p: Plan) -> list[Finding]:
    """Which budget term explains the available-KV difference, and whether the layout (bytes per
    token) matches given the KV memory the log reports.

    ``available = requested - weights - activation - non-torch - CUDA graphs``, so each term's
    share of the difference is ``-(log - plan)`` (``+`` for requested); terms the log does not
    state share the remainder.
    """
    cap = p.vllm
    out: list[Finding] = []
    available = log.available_kv_bytes
    implied = available is None and log.num_gpu_blocks is not None
    if implied:
        available = (log.num_gpu_blocks or 0) * cap.bytes_per_block  # V0: blocks x plan block
    if available is not None:
        difference = available - cap.available_kv_bytes
        shares: list[tuple[str, int, int | None, int | None]] = []
        unlogged = []
        if log.requested_bytes is not None:
            shares.append(
                (
                    "requested",
                    log.requested_bytes - cap.requested_bytes,
                    log.requested_bytes,
                    cap.requested_bytes,
                )
            )
        elif log.total_gpu_bytes is None:
            unlogged.append("requested")
        if log.consumed_bytes is not None:  # vLLM >= 0.2x logs weights + non-torch together
            both = cap.weights_bytes + cap.non_torch_bytes
            terms: list[tuple[str, int | None, int]] = [
                ("weights + non-torch", log.consumed_bytes, both)
            ]
        else:
            terms = [
                ("weights", log.weights_bytes, cap.weights_bytes),
                ("non-torch", log.non_torch_bytes, cap.non_torch_bytes),
            ]
        name, peak, planned, with_graphs = activation_term(log, cap)
        assert planned is not None  # a plan's vLLM budget
        terms.append((name, peak, planned))
        # V0, and V1 before 0.20, captured graphs after sizing the cache: not a budget term
        if not with_graphs and log.engine != "V0" and _subtracts_graphs(p):
            terms.append(("CUDA graphs", log.budget_graphs, cap.cuda_graph_bytes))
        for name, term_log, term_plan in terms:
            if term_log is None:
                unlogged.append(name)
            else:
                shares.append((name, -(term_log - term_plan), term_log, term_plan))
        if unlogged:
            residual = difference - sum(share[1] for share in shares)
            shares.append((" + ".join(unlogged), residual, None, None))
        term, share, logged, planned = max(shares, key=lambda c: abs(c[1]))
        out.append(
            Finding(
                kind="budget" if abs(difference) > 2 * LOG_ROUNDING_BYTES else "matches",
                severity="info",
                data={
                    "log_available_bytes": available,
                    "available_implied_by_blocks": implied,
                    "plan_available_bytes": cap.available_kv_bytes,
                    "difference_bytes": difference,
                    "term": term,
                    "share_bytes": share,
                    "term_log_bytes": logged,
                    "term_plan_bytes": planned,
                    "unlogged": unlogged,
                },
                lines=[log.lines.get("available_kv_bytes") or log.lines.get("num_gpu_blocks", 0)],
            )
        )
    layout = _layout(log, p)
    if layout is not None:
        out.append(layout)
    return out


def _layout(log: BootLog, p: Plan) -> Finding | None:
    """Given the KV memory the log reports, do the plan's blocks reproduce its token count? A
    mismatch means the cache layout differs (KV heads, head size, dtype, TP, window)."""
    cap = p.vllm
    block = p.estimate.block_size
    if log.kv_cache_tokens is not None and log.available_kv_bytes is not None:
        logged_tokens = log.kv_cache_tokens
        lo = max(0, log.available_kv_bytes - LOG_ROUNDING_BYTES)
        hi = log.available_kv_bytes + LOG_ROUNDING_BYTES
        layout = p.estimate.vllm
        assert layout is not None
        # vLLM's "GPU KV cache size" of the plan's pool: its blocks over the KV-cache groups
        expect_lo = logged_kv_tokens(lo // cap.bytes_per_block, layout, cap.dcp)
        expect_hi = logged_kv_tokens(hi // cap.bytes_per_block, layout, cap.dcp)
        per_token_plan = bytes_per_logged_token(cap.bytes_per_block, layout, cap.dcp)
        line = log.lines["kv_cache_tokens"]
    elif log.num_gpu_blocks is not None and log.available_kv_bytes is not None:
        logged_tokens = log.num_gpu_blocks * block
        lo = max(0, log.available_kv_bytes - LOG_ROUNDING_BYTES)
        hi = log.available_kv_bytes + LOG_ROUNDING_BYTES
        per_token_plan = cap.bytes_per_block / block
        expect_lo = lo // cap.bytes_per_block * block
        expect_hi = hi // cap.bytes_per_block * block
        line = log.lines["num_gpu_blocks"]
    else:
        return None
    if not logged_tokens:
        return None
    per_token_log = log.available_kv_bytes / logged_tokens
    ok = expect_lo <= logged_tokens <= expect_hi
    ratio = per_token_log / per_token_plan if per_token_plan else math.inf
    return Finding(
        kind="layout-matches" if ok else "layout",
        severity="info" if ok else "warning",
        data={
            "log_tokens": logged_tokens,
            "expected_tokens_low": expect_lo,
            "expected_tokens_high": expect_hi,
            "log_bytes_per_token": round(per_token_log, 1),
            "plan_bytes_per_token": round(per_token_plan, 1),
            "ratio": round(ratio, 3),
            "kv_heads_per_rank": p.estimate.kv_heads_per_rank,
        },
        fix=[]
        if ok
        else [
            "compare num_key_value_heads, head_dim, kv_cache_dtype and tp with what vLLM loaded "
            "(a KV-head count read wrongly changes bytes per token by a whole factor)"
        ],
        lines=[line],
    )


def troubleshoot(
    log: BootLog, p: Plan | None, s: ServeSettings, gpu: Gpu | None = None
) -> list[Finding]:
    """The troubleshooting table, applied to what the log shows; a fix that suggests fp8 KV
    carries the caveat for ``gpu``."""
    caveat = [fp8_kv_caveat(gpu)]
    out: list[Finding] = []
    cap = p.vllm if p else None
    if log.estimated_max_model_len is not None or log.error_max_model_len is not None:
        fix = []
        if log.estimated_max_model_len:
            estimate = {"max_model_len": log.estimated_max_model_len}
            fix.append(f"{as_named(estimate)} (vLLM's estimate)")
        fix += [as_named(FP8_KV), "a higher gpu_memory_utilization or more TP"]
        out.append(
            Finding(
                kind="startup-max-len",
                severity="error",
                data={
                    "max_model_len": log.error_max_model_len,
                    "needed_bytes": log.error_needed_bytes,
                    "available_bytes": log.error_available_bytes,
                    "estimated_max_model_len": log.estimated_max_model_len,
                    "plan_estimated_max_model_len": cap.estimated_max_model_len if cap else None,
                },
                fix=fix,
                lines=[
                    log.lines.get("estimated_max_model_len") or log.lines["error_max_model_len"]
                ],
                caveats=caveat,
            )
        )
    if log.no_kv_memory:
        out.append(
            Finding(
                kind="startup-no-memory",
                severity="error",
                data={},
                fix=[
                    "a higher gpu_memory_utilization",
                    "more TP",
                    "a smaller max_num_batched_tokens",
                ],
                lines=[log.lines["no_kv_memory"]],
            )
        )
    crash = _crash_finding(log, p, s)
    if crash is not None and not any(f.kind.startswith("startup-") for f in out):
        out.append(crash)
    if log.startup_free_bytes is not None and log.total_gpu_bytes:
        shared = _shared_gpu_finding(log, s)
        if shared is not None:
            out.append(shared)
    if log.oom_tried_bytes is not None:
        out.append(_oom_finding(log, p))
    graphs = _graph_estimate_finding(log, s)
    if graphs is not None:
        out.append(graphs)
    if log.encoder_budget_tokens is not None:
        out.append(_encoder_finding(log, p))
    out += _usage_findings(log, p, s, caveat)
    return runnable(out, gpu)


def runnable(findings: list[Finding], gpu: Gpu | None) -> list[Finding]:
    """The findings less the fixes ``gpu`` cannot run: fp8 KV where vLLM has none
    (:func:`planner.gpu_support.fp8_kv_refusal`: below compute capability 8.0), with its
    caveat."""
    if fp8_kv_refusal(gpu) is None:
        return findings
    words = (as_flags(FP8_KV), as_named(FP8_KV))
    return [
        replace(
            f,
            fix=[x for x in f.fix if not any(w in x for w in words)],
            caveats=[c for c in f.caveats if not c.startswith("fp8 KV")],
        )
        for f in findings
    ]


def _encoder_finding(log: BootLog, p: Plan | None) -> Finding:
    """A multimodal model's encoder profile as the log states it: its budget and items, the
    memory the plan puts on them, and the levers that buy KV back (the plan's, each as vLLM's
    flag), or without a plan the one that does not need it: video off."""
    mm = p.mm if p is not None else None
    fix: list[str] = []
    if mm is not None and p is not None:
        fix = [
            f"{lv.change} (+{lv.kv_tokens_gained:,} KV tokens)"
            for lv in p.mm_levers
            if lv.fits and lv.kv_tokens_gained > 0
        ]
    elif log.encoder_profile_modality == "video":
        fix = ["--limit-mm-per-prompt '{\"video\":0}' if the server takes no video"]
    return Finding(
        kind="encoder-profile",
        severity="info",
        data={
            "budget_tokens": log.encoder_budget_tokens,
            "items": log.encoder_profile_items,
            "modality": log.encoder_profile_modality,
            "plan_budget_tokens": mm.encoder_budget_tokens if mm else None,
            "plan_items": mm.profile_items if mm else None,
            "plan_modality": mm.profiled_modality if mm else None,
            "plan_encoder_bytes": (mm.encoder_output_bytes + mm.tower_activation_bytes)
            if mm and mm.profiled_modality
            else None,
        },
        fix=fix,
        lines=[log.lines["encoder_budget_tokens"]],
    )


def _oom_finding(log: BootLog, p: Plan | None) -> Finding:
    """OOM while memory looks free: fragmentation, or a KV-head count the plan got wrong."""
    tried = log.oom_tried_bytes or 0
    spare = (log.oom_free_bytes or 0) + (log.oom_reserved_unallocated_bytes or 0)
    looks_free = spare >= tried or (
        len(log.kv_usage_pct) >= MIN_SAMPLES and max(log.kv_usage_pct) < LOW_PCT
    )
    data = {
        "tried_bytes": tried,
        "free_bytes": log.oom_free_bytes,
        "reserved_unallocated_bytes": log.oom_reserved_unallocated_bytes,
    }
    if looks_free:
        return Finding(
            kind="oom-fragmentation",
            severity="error",
            data=data,
            fix=[
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (fragmentation)",
                "check the KV-head count: num_key_value_heads in config.json against what the "
                "engine loaded (kvplan's layout check above)",
                "a lower gpu_memory_utilization leaves the allocator room",
            ],
            lines=[log.lines["oom"]],
        )
    return Finding(
        kind="oom",
        severity="error",
        data=data,
        fix=[
            "a lower gpu_memory_utilization",
            "a smaller max_num_batched_tokens (the activation peak)",
            "fewer max_num_seqs",
        ],
        lines=[log.lines["oom"]],
    )


# The crashed step, the plan's term that sizes it, and what to change (vLLM V1's order:
# gpu_worker load_model, determine_available_memory, initialize_from_config,
# compile_or_warm_up_model).
CRASH_TERMS: dict[str, tuple[str, list[str]]] = {
    "start-up": ("weights_bytes", ["a lower gpu_memory_utilization", "more TP"]),
    "the start-up memory check": (
        "requested_bytes",
        ["free the GPU (another process holds memory)", "a lower gpu_memory_utilization"],
    ),
    "weights load": ("weights_bytes", ["more TP or PP", "a quantized checkpoint", "a bigger GPU"]),
    "profiling": (
        "activation_peak_bytes",
        ["a smaller max_num_batched_tokens (the profile run's tokens)", "a lower max_num_seqs"],
    ),
    "KV allocation": (
        "available_kv_bytes",
        ["a lower gpu_memory_utilization (or --kv-cache-memory-bytes below the GPU's free memory)"],
    ),
    "CUDA-graph capture": (
        "cuda_graph_bytes",
        ["a lower gpu_memory_utilization leaves room for the graphs", "--enforce-eager"],
    ),
    "sampler warm-up": (
        "activation_peak_bytes",
        [
            "a lower max_num_seqs (the sampler runs over max_num_seqs rows)",
            "a lower gpu_memory_utilization",
        ],
    ),
}


def _crash_finding(log: BootLog, p: Plan | None, s: ServeSettings) -> Finding | None:
    """A log that ends in an error before serving: the step it crashed in, vLLM's own error
    line, the plan's term for that step and the fix."""
    stage = log.crash_stage
    if stage is None:
        return None
    term, fix = CRASH_TERMS.get(stage, CRASH_TERMS["start-up"])
    plan_bytes = None
    if p is not None:
        plan_bytes = getattr(p.vllm, term, None)
    lines = sorted({n for n in (log.lines.get("error"), log.lines.get("oom")) if n})
    return Finding(
        kind="startup-crash",
        severity="error",
        data={
            "stage": stage,
            "error": log.error or "CUDA out of memory",
            "plan_term": term,
            "plan_bytes": plan_bytes,
            "last_milestone_line": max(
                (v for k, v in log.milestones.items() if k != "serving"), default=None
            ),
        },
        fix=list(fix),
        lines=lines or [0],
    )


def _shared_gpu_finding(log: BootLog, s: ServeSettings) -> Finding | None:
    """``Free memory on device (60.87/79.19 GiB) on startup``: what another process holds
    (more than the 1 GiB a CUDA context and the driver take), and what vLLM can use of the
    rest: it refuses to start when ``gpu_memory_utilization x total`` exceeds the free memory
    (vLLM's ``request_memory``)."""
    free, total, held = log.startup_free_bytes, log.total_gpu_bytes, held_by_others(log)
    if free is None or not total or held is None:
        return None
    gmu = s.gmu
    fits_gmu = math.floor(free / total * 100) / 100
    fix = [f"stop the other process (it holds {held / GIB:.2f} GiB)"]
    if gmu * total > free:
        fix.insert(0, f"gpu_memory_utilization {fits_gmu:g} (what the free memory allows)")
    return Finding(
        kind="gpu-shared",
        severity="error" if gmu * total > free else "warning",
        data={
            "free_bytes": free,
            "total_bytes": total,
            "held_bytes": held,
            "requested_bytes": math.ceil(gmu * total),
            "planned_headroom_bytes": held,
            "fitting_gpu_memory_utilization": fits_gmu,
        },
        fix=fix,
        lines=[log.lines.get("startup_free_bytes", 0)],
    )


# vLLM >= 0.21 subtracts its own CUDA-graph estimate before it sizes the pool, then captures the
# graphs and logs both: "CUDA graph pool memory: A GiB (actual), B GiB (estimated)"
# (gpu_worker.py 0.24.0:660-674, 0.30.0:818-833). The estimate is each mode's first capture plus
# (graphs - 1) x its second (gpu_model_runner.py 0.30.0:6742-6818): the graphs share one pool
# and reuse its blocks, so the linear sum over-reserves as the count grows (vllm#45178: 245,840
# KV tokens with it, 769,888 without, on a B200), and it can fall short of the capture
# (vllm#57475: gmu 0.98 sized the pool, then the capture ran out of memory). A gap past this
# is worth saying; the log rounds each figure to 0.01 GiB.
GRAPH_GAP_BYTES = GIB // 5
# vLLM's own margin in the --kv-cache-memory it suggests (gpu_worker.py 0.30.0:848)
KV_MEMORY_MARGIN_BYTES = 150 << 20


def _graph_estimate_finding(log: BootLog, s: ServeSettings) -> Finding | None:
    """A release that subtracted its CUDA-graph estimate and logged what the capture took,
    when the two are more than :data:`GRAPH_GAP_BYTES` apart: over, the pool is that much
    smaller than the GPU allows (``--kv-cache-memory-bytes`` takes it back: vLLM then sizes
    nothing); under, the server runs that much past gpu_memory_utilization's budget, which a
    higher setting turns into an out-of-memory error in the capture (a lower one keeps it
    inside). Worked example: 0.65 GiB estimated, 0.09 captured, 1.74 GiB available: 0.56 GiB
    over; ``--kv-cache-memory-bytes`` 1.74 + 0.56 - 0.15 = 2.15 GiB."""
    est, got = log.cuda_graph_estimate_bytes, log.cuda_graph_capture_bytes
    available = log.available_kv_bytes
    if est is None or got is None or log.graph_estimate_disabled or available is None:
        return None
    if log.measured_pool:
        # 0.34's extensible cache: the pool was measured after the capture, the estimate only
        # sized the address range reserved before it
        return None
    if est < 0 or got < 0:
        # the free-memory reading went backwards (GB10's unified memory: vllm#44740 logs an
        # estimate of -20.50 GiB): neither figure says what the graphs hold
        return None
    gap = est - got
    if abs(gap) <= GRAPH_GAP_BYTES:
        return None
    tokens = None
    if log.kv_cache_tokens and available > 0:
        tokens = round(abs(gap) * log.kv_cache_tokens / available)
    data: dict[str, Any] = {
        "estimate_bytes": est,
        "capture_bytes": got,
        "gap_bytes": gap,
        "gap_tokens": tokens,
        "graph_modes": {mode: list(v) for mode, v in log.cuda_graph_modes.items()},
    }
    lines = sorted(
        {log.lines.get(k, 0) for k in ("cuda_graph_estimate_bytes", "cuda_graph_capture_bytes")}
    )
    if gap > 0:
        kv_memory = available + gap - KV_MEMORY_MARGIN_BYTES
        data["kv_cache_memory_bytes"] = kv_memory
        fix = [
            f"--kv-cache-memory-bytes {kv_memory} ({kv_memory / GIB:.2f} GiB, the pool "
            "the budget holds: vLLM then skips its estimate; keep the other settings)",
            "fewer cudagraph_capture_sizes (the estimate grows with each graph)",
        ]
        return Finding(kind="graph-estimate", severity="warning", data=data, fix=fix, lines=lines)
    total = log.total_gpu_bytes
    fix = []
    if total:
        lower = math.floor((s.gmu - (-gap) / total) * 100) / 100
        data["fitting_gpu_memory_utilization"] = lower
        fix.append(f"gpu_memory_utilization {lower:g} keeps the capture inside the budget")
    fix.append("--enforce-eager (no graphs)")
    return Finding(kind="graph-estimate", severity="warning", data=data, fix=fix, lines=lines)


def _prefix_caching_on(s: ServeSettings, p: Plan | None) -> bool:
    """Whether the server caches prefixes: as the log (or the user) says, else the release's
    default the plan followed (a hybrid's Mamba cache mode "none" before 0.26: off)."""
    if s.enable_prefix_caching is not None:
        return s.enable_prefix_caching
    layout = p.estimate.vllm if p is not None else None
    return layout is None or layout.mamba_cache_mode != "none"


def _usage_findings(
    log: BootLog, p: Plan | None, s: ServeSettings, fp8_caveat: list[str]
) -> list[Finding]:
    out: list[Finding] = []
    usage = log.kv_usage_pct
    high = sum(u >= PINNED_PCT for u in usage)
    pinned = log.preemptions > 0 or (
        len(usage) >= MIN_SAMPLES and (high * 4 >= len(usage) or max(usage) >= 99.0)
    )
    lines = [n for n in (log.lines.get("kv_usage_first"), log.lines.get("preemption_first")) if n]
    seqs = s.max_num_seqs or (p.vllm.max_num_seqs if p is not None else None)
    capped = (
        seqs is not None
        and log.max_running >= seqs
        and log.max_waiting > 0
        and len(usage) >= MIN_SAMPLES
        and max(usage) < LOW_PCT
    )
    if capped and seqs is not None:
        # at the observed lengths, max_running sequences used the peak share of the pool:
        # the target usage holds target / peak times as many
        peak = max(usage)
        more = int(seqs * TARGET_PCT / peak) if peak > 0 else seqs * 2
        out.append(
            Finding(
                kind="seqs-capped",
                severity="warning",
                data={
                    "max_num_seqs": seqs,
                    "max_running": log.max_running,
                    "max_waiting": log.max_waiting,
                    "peak_pct": peak,
                    "suggested_max_num_seqs": more,
                },
                fix=[
                    f"{as_named({'max_num_seqs': more})}: at the lengths seen, {log.max_running}"
                    f" sequences used {peak:.1f} % of the pool; {more} keep it near "
                    f"{TARGET_PCT:.0f} %"
                ],
                lines=lines,
            )
        )
    if pinned:
        fix = ["more KV memory: a higher gpu_memory_utilization, or more TP"]
        if log.preemptions > 0:  # only preemption is helped by running fewer at once
            if p is not None and p.vllm.fits:
                fewer = {"max_num_seqs": worst_case_seqs(p.vllm)}
                fix.append(
                    f"fewer sequences: {as_named(fewer)} keeps "
                    f"{p.estimate.max_model_len:,}-token requests at ~90 % of the blocks"
                )
            else:
                fix.append("fewer max_num_seqs")
        # KVDtype is a str: the alternative's {"kv_cache_dtype": "fp8"} equals FP8_KV
        fp8 = next((a for a in p.alternatives if a.changes == FP8_KV), None) if p else None
        fix.append(
            f"fp8 KV ({as_flags(FP8_KV)}: {fp8.max_concurrency:.2f}x concurrency)"
            if fp8
            else f"fp8 KV ({as_flags(FP8_KV)})"
        )
        fix += [
            "prefix sharing: enable prefix caching and put the shared part of prompts first",
        ]
        out.append(
            Finding(
                kind="kv-pinned",
                severity="warning",
                data={
                    "samples": len(usage),
                    "high_samples": high,
                    "peak_pct": max(usage) if usage else None,
                    "preemptions": log.preemptions,
                    "max_waiting": log.max_waiting,
                },
                fix=fix,
                lines=lines,
                caveats=fp8_caveat,
            )
        )
    elif len(usage) >= MIN_SAMPLES and max(usage) < LOW_PCT and not capped:
        gmu = lower_gmu(log, p, s, max(usage))
        out.append(
            Finding(
                kind="kv-low",
                severity="info",
                data={"samples": len(usage), "peak_pct": max(usage), "suggested_gmu": gmu},
                fix=[
                    as_named({"gpu_memory_utilization": gmu})
                    if gmu
                    else "a lower gpu_memory_utilization"
                ],
                lines=lines,
            )
        )
    slow = _long_prefill_finding(log, p, s, fp8_caveat)
    if slow is not None:
        out.append(slow)
    if not _prefix_caching_on(s, p):
        out.append(
            Finding(
                kind="prefix-off",
                severity="info",
                data={},
                fix=[
                    as_flags(PREFIX_CACHING_ON),
                    "put the fixed part of the prompt (system prompt, tools) first",
                ],
                lines=[log.lines.get("enable_prefix_caching", 0)],
            )
        )
    elif len(log.prefix_hit_pct) >= MIN_SAMPLES:
        busy = [h for h, u in zip(log.prefix_hit_pct, usage, strict=False) if u > 0] or [
            *log.prefix_hit_pct
        ]
        mean = sum(busy) / len(busy)
        if mean < 10.0:
            out.append(
                Finding(
                    kind="prefix-low-hit",
                    severity="info",
                    data={"mean_hit_pct": round(mean, 1), "samples": len(busy)},
                    fix=["put the fixed part of the prompt first so requests share whole blocks"],
                    lines=lines,
                )
            )
    return out


def lower_gmu(log: BootLog, p: Plan | None, s: ServeSettings, peak_pct: float) -> float | None:
    """The gpu_memory_utilization that keeps the observed peak at 80 % of a smaller cache:
    requested - (available - peak_used / 0.8), over the GPU total, rounded up to 0.01."""
    total = log.total_gpu_bytes or (p.vllm.gpu_memory_bytes if p else None)
    gmu = s.gmu
    requested = log.requested_bytes or (math.ceil(total * gmu) if total else None)
    available = log.available_kv_bytes or (p.vllm.available_kv_bytes if p else None)
    if not (total and requested and available):
        return None
    keep = available * peak_pct / 100 / 0.8
    new = math.ceil((requested - (available - keep)) / total * 100) / 100
    return new if new < gmu else None


LONG_CONTEXT = 16_384  # the guide's "long context": prompts beyond what a chat turn holds
PREFILL_HEAVY = 4.0  # prompt tokens/s over generation tokens/s: steps are mostly prefill


def _long_prefill_finding(
    log: BootLog, p: Plan | None, s: ServeSettings, fp8_caveat: list[str]
) -> Finding | None:
    """The guide's "long context is slow" row: long requests (max_model_len from 16,384) whose
    stat lines are mostly prefill (prompt throughput at least 4x the generation throughput,
    averaged over the busy lines) while requests wait. The remedies, in the guide's order:
    chunked prefill with a token budget per step, a GQA model, a quantised KV cache."""
    length = p.estimate.max_model_len if p is not None else s.max_model_len
    busy = [(a, g) for a, g in log.throughput if a > 0 or g > 0]
    if not length or length < LONG_CONTEXT or len(busy) < MIN_SAMPLES or log.max_waiting <= 0:
        return None
    prompt = sum(a for a, _ in busy) / len(busy)
    generation = sum(g for _, g in busy) / len(busy)
    if prompt < PREFILL_HEAVY * max(generation, 1e-9):
        return None
    budget = s.max_num_batched_tokens or (p.vllm.max_num_batched_tokens if p else None)
    fix = [
        "chunked prefill: --enable-chunked-prefill with --max-num-batched-tokens "
        + (f"{min(budget * 2, 16384)} (now {budget:,})" if budget else "8192")
        + " so long prompts share steps with decodes"
    ]
    if p is not None and p.estimate.num_kv_heads == p.estimate.num_attention_heads:
        fix.append("a GQA model: this one keeps a KV head per query head (MHA)")
    elif p is None:
        fix.append("a GQA model (fewer KV heads than query heads)")
    fix.append(f"a quantised KV cache ({as_flags(FP8_KV)})")
    return Finding(
        kind="long-prefill",
        severity="warning",
        data={
            "max_model_len": length,
            "samples": len(busy),
            "prompt_tokens_per_s": round(prompt, 1),
            "generation_tokens_per_s": round(generation, 1),
            "max_waiting": log.max_waiting,
            "max_num_batched_tokens": budget,
        },
        fix=fix,
        lines=[n for n in (log.lines.get("kv_usage_first"),) if n] or [0],
        caveats=fp8_caveat,
    )
