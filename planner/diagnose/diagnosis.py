"""``kvplan diagnose``: the boot log against the plan for the same model, GPU and settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from planner.budget import graph_modes
from planner.deployment import Deployment
from planner.diagnose.boot_log import parse_log
from planner.diagnose.findings import Finding, activation_term, explain, troubleshoot
from planner.diagnose.log_figures import BootLog
from planner.diagnose.ranks import DataParallel, data_parallel, rank_findings
from planner.diagnose.settings import COMMAND_LINE, PlanSettings, layer_settings
from planner.diagnose.shared_gpu import what_fits, with_free_memory
from planner.errors import DoesNotFitError, InputFileError, KvplanError, UsageError
from planner.files import read_text_file
from planner.gpus import Gpu
from planner.model.load import load_draft, load_model
from planner.plan_types import WONT_START, PlanOptions
from planner.recommend import plan
from planner.units import GIB
from planner.vllm_rules import rules_for

if TYPE_CHECKING:
    from planner.deployment import ServeSettings
    from planner.multimodal import MMProfile
    from planner.plan_types import Plan

MAX_LOG_BYTES = 50 << 20


class LogFileError(InputFileError):
    """The log cannot be read (missing, binary, too large): exit 2."""


class NothingRecognisedError(KvplanError):
    """The file is text but holds no vLLM line kvplan knows."""


@dataclass(frozen=True)
class Term:
    """One figure as the log states it and as the plan has it, per GPU rank (JSON ``terms[]``,
    which adds ``diff``).

    Attributes:
        name: "GPU total", "requested", "weights", "activation peak", "non-torch",
            "weights + non-torch" (vLLM >= 0.2x logs the two together), "CUDA graphs",
            "available KV", "GPU blocks", "KV cache tokens", "max concurrency", and for a
            multimodal model "encoder budget" and "encoder items profiled" (vLLM's "Encoder
            cache will be initialized with a budget of N tokens, and profiled with M ...").
        unit: "bytes", "tokens", "blocks", "items" or "x" (requests of ``max_model_len`` at
            once).
        log: the log's figure (bytes from its GiB, exact to +-0.005 GiB); None when not logged.
        plan: kvplan's figure for the same model, GPU and settings; None without a plan.
        note: why the figures are not alike, e.g. "captured after sizing" for the CUDA graphs
            of a V0 log (the plan has 0: V0 took them after sizing the KV cache).

    Terms neither the log states nor the plan has (0 or None) are left out. Qwen2.5-7B on the
    V0 log's A100-40GB: activation peak log 2,254,857,830 B (2.10 GiB), plan 1,527,268,323 B
    (1.42 GiB), so ``diff`` (log - plan) is +727,589,507 B.
    """

    name: str
    unit: str
    log: float | None
    plan: float | None
    note: str = ""

    @property
    def diff(self) -> float | None:
        return None if self.log is None or self.plan is None else self.log - self.plan


@dataclass(frozen=True)
class Diagnosis:
    """``kvplan diagnose``: what the log says, the plan for the same settings, and findings.

    The JSON is this, field by field (``dataclasses.asdict``); it adds ``terms[].diff`` and
    ``findings[].text``, gives the runtime samples of ``log`` as a count and a peak, and the
    log's speculative decoding (``log.speculative``), when it shows any, as a top-level
    ``speculative`` summary (:func:`planner.render.diagnose.speculative_dict`).

    Attributes:
        file: the log's path as given.
        outcome: the verdict, in the words of ``kvplan estimate``: ``wont_start`` (the log
            shows vLLM refusing to start, or the plan's weights do not fit, one
            ``max_model_len`` request does not fit its pool, or a hybrid's Mamba blocks are
            fewer than ``max_num_seqs``), ``queues_at_worst_case`` (with every request
            ``max_model_len`` tokens long, fewer than ``max_num_seqs`` run at once; the rest
            wait or are preempted) or ``fits_at_worst_case``; None with no plan and no refusal
            in the log, or when the plan says it won't start but the log shows it started (a
            note says so).
        worst_case_running: how many ``max_model_len`` requests run at once in the plan's
            pool, capped by ``max_num_seqs``; 0 when it won't start.
        max_num_seqs, max_model_len: the settings the outcome is for, as the plan resolved
            them (``max_num_seqs`` is vLLM's default for the GPU when nobody states it).
        outcome_reason: why it won't start: the log's refusal, or the plan's (vLLM's words).
        outcome_source: ``log`` (the log shows the refusal) or ``plan`` (kvplan's plan for
            the settings); None with no outcome.
        log: everything the log states (:class:`~planner.diagnose.log_figures.BootLog`).
        settings: what the plan used, each value as stated (the flag's, or the log's own
            literal): "model", the serve settings, then "gpu" and "gpu_memory_bytes".
        sources: where each of ``settings`` came from: "command line", "log line N",
            "vLLM V1 default" (or V0); "log" for a GPU known from the log's totals.
        terms: the figures side by side (:class:`Term`); empty when the log has none.
        findings: the conclusions (:class:`~planner.diagnose.findings.Finding`): the budget
            and layout checks when there is a plan, then the troubleshooting rules.
        notes: what kvplan could not use and why: a log value vLLM could not have run with,
            a model named by the log that cannot be loaded, no model or no GPU to plan for,
            DP ranks that logged no KV cache size.
        data_parallel: a data-parallel log rank by rank and as one cluster
            (:class:`~planner.diagnose.ranks.DataParallel`); None for a log of one engine.
            The JSON gives its fields at the top level (``data_parallel_size``,
            ``expert_parallel``, ``ranks``, ``cluster``), only for a data-parallel log; the
            log's own figures (``log``, ``terms``) are then DP rank 0's.

    Worked example: ``kvplan diagnose vllm-v0-qwen7b-a100.log --json``. settings: model
    Qwen/Qwen2.5-7B-Instruct, tp 1, pp 1, max_model_len 8192, gpu_memory_utilization 0.9,
    kv_cache_dtype "auto", enforce_eager false, enable_prefix_caching false (sources "log line
    3", gpu_memory_utilization "log line 8"), gpu "from the log" of 42,283,953,029 B (source
    "log": 39.38 GiB); findings budget, layout-matches, kv-pinned and prefix-off; no notes.
    The plan's pool there is 23,060 blocks; an 8,192-token request takes 512, so 23,059 // 512
    = 45 requests run at once, fewer than vLLM V0's default max_num_seqs 256: outcome
    queues_at_worst_case, worst_case_running 45, outcome_source "plan".
    """

    file: str
    outcome: str | None
    worst_case_running: int | None
    max_num_seqs: int | None
    max_model_len: int | None
    outcome_reason: str | None
    outcome_source: str | None
    log: BootLog
    settings: dict[str, Any]
    sources: dict[str, str]
    terms: list[Term]
    findings: list[Finding]
    notes: list[str]
    data_parallel: DataParallel | None = None


def diagnose_file(
    path: str | Path,
    *,
    model: str | None = None,
    gpu: Gpu | None = None,
    offline: bool | None = None,
    **settings_given: Any,
) -> Diagnosis:
    """Parse the log at ``path`` and compare it with the plan for the same model and settings.

    Settings given here win; then the values the log states; then vLLM's defaults
    (:func:`~planner.diagnose.settings.layer_settings`).

    Args:
        path: the vLLM log.
        model: the model (default: the one the log names).
        gpu: the GPU (default: the total the log reports, if it does).
        settings_given: the settings to plan with over the log's, any declared setting
            (:mod:`planner.config.fields`) by its name, typed as :class:`ServeSettings` holds
            it (``tp=2``, ``kv_cache_dtype=KVDtype.FP8``, ``enforce_eager=True``,
            ``kv_cache_memory_bytes=...``); None is "not given".
        offline: only the catalog and the local HF cache for the model.

    Returns:
        The :class:`Diagnosis`; raises :class:`LogFileError` for an unreadable file,
        :class:`NothingRecognisedError` when no line is a vLLM line kvplan knows, and
        :class:`~planner.errors.UsageError` for a setting given here that vLLM would refuse.
    """
    file = Path(path)
    text = read_text_file(file, limit=MAX_LOG_BYTES, what="log file", error=LogFileError)
    log = parse_log(text)
    if not log.recognised:
        raise NothingRecognisedError(
            f"{path}: no vLLM line recognised (looked for 'Available KV cache memory', "
            "'GPU KV cache size', '# GPU blocks', 'Model loading took', 'GPU KV cache usage', "
            "preemption warnings and CUDA OOM); is this a vLLM log?"
        )
    given = {"model": model, **settings_given}
    notes: list[str] = []
    # another process on the GPU: plan with the memory the log says was free
    settings = with_free_memory(log, layer_settings(log, given, notes))
    gpu = gpu or _gpu_from_log(log, settings.serve.gmu)
    the_plan = None
    findings: list[Finding] = []
    if settings.model and gpu is not None:
        strict = any(value is not None for value in given.values()) or gpu.source != "log"
        the_plan, settings = plan_for(log, settings, given, gpu, offline, findings, notes, strict)
    elif not settings.model:
        notes.append("no model: pass --model (the log names none) to compare with the plan")
    else:
        notes.append("no GPU: pass --gpu or --gpu-memory (the log states no total) to compare")
    terms = _terms(log, the_plan, settings.serve)
    if the_plan is not None:
        findings += explain(log, the_plan)
    findings += troubleshoot(log, the_plan, settings.serve, gpu)
    if gpu is not None:  # what starts in the free memory, planned at that fraction
        planned = settings

        def plan_at(gmu: float) -> Plan | None:
            at = replace(planned, serve=planned.serve.but(gpu_memory_utilization=gmu))
            return plan_for(log, at, given, gpu, offline, [], [], False)[0]

        findings = [
            what_fits(f, the_plan, plan_at) if f.kind == "gpu-shared" else f for f in findings
        ]
    dp = data_parallel(log)
    if dp is not None:
        findings += rank_findings(dp, notes)
    stated, sources = dict(settings.stated), dict(settings.sources)
    if gpu is not None:
        where = "log" if gpu.source == "log" else COMMAND_LINE
        stated["gpu"], stated["gpu_memory_bytes"] = gpu.name, gpu.memory_bytes
        sources["gpu"] = sources["gpu_memory_bytes"] = where
    what_if = any(value is not None for key, value in given.items() if key != "model")
    v = verdict_of(log, the_plan, findings, notes, what_if=what_if)
    return Diagnosis(
        str(path),
        v.outcome,
        v.running,
        v.max_num_seqs,
        v.max_model_len,
        v.reason,
        v.source,
        log,
        stated,
        sources,
        terms,
        findings,
        notes,
        dp,
    )


class _Verdict(NamedTuple):
    outcome: str | None = None
    running: int | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    reason: str | None = None
    source: str | None = None


def verdict_of(
    log: BootLog, p: Plan | None, findings: list[Finding], notes: list[str], *, what_if: bool
) -> _Verdict:
    """The outcome: the log's refusal to start wins; else the plan's
    (:func:`planner.recommend.worst_case`), unless it says vLLM won't start while the log
    shows vLLM started (then none, and a note). With settings on the command line
    (``what_if``) the log ran other settings: the plan's outcome alone."""
    for f in [] if what_if else findings:
        where = f" (log line {next((n for n in f.lines if n), 0)})"
        if f.kind == "startup-max-len":
            d = f.data
            length = f"{d['max_model_len']:,}" if d["max_model_len"] else "max_model_len"
            need, have = d["needed_bytes"], d["available_bytes"]
            reason = (
                f"one {length}-token request needs "
                + (f"{need / GIB:.2f} GiB of KV cache" if need is not None else "more KV cache")
                + (f", {have / GIB:.2f} GiB available" if have is not None else " than fits")
            )
            return _Verdict(WONT_START, 0, reason=reason + where, source="log")
        if f.kind == "startup-no-memory":
            reason = "no memory left for KV cache blocks" + where
            return _Verdict(WONT_START, 0, reason=reason, source="log")
        if f.kind == "startup-crash":
            reason = f"crashed during {f.data['stage']}: {f.data['error']}" + where
            return _Verdict(WONT_START, 0, reason=reason, source="log")
    weights = next((f for f in findings if f.kind == "plan-does-not-fit"), None)
    if weights is not None:
        verdict = _Verdict(WONT_START, 0, reason=str(weights.data["message"]), source="plan")
    elif p is not None:
        cap = p.vllm
        verdict = _Verdict(
            p.outcome,
            p.worst_case_running,
            cap.max_num_seqs,
            cap.max_model_len,
            p.outcome_reason,
            "plan",
        )
    else:
        return _Verdict()
    started = log.num_gpu_blocks or log.kv_cache_tokens or log.kv_usage_pct
    if verdict.outcome == WONT_START and started and not what_if:
        notes.append(
            f"the plan says vLLM won't start ({verdict.reason}), but the log shows it started: "
            "the plan's model, GPU or budget differ from the server's"
        )
        return _Verdict()
    return verdict


def _gpu_from_log(log: BootLog, gmu: float) -> Gpu | None:
    """The GPU the log describes: its total, or the requested memory over the fraction."""
    total = log.total_gpu_bytes
    if total is None and log.requested_bytes:
        total = round(log.requested_bytes / gmu)
    return Gpu(name="from the log", memory_bytes=total, source="log") if total else None


def plan_for(
    log: BootLog,
    settings: PlanSettings,
    given: Mapping[str, Any],
    gpu: Gpu,
    offline: bool | None,
    findings: list[Finding],
    notes: list[str],
    strict: bool,
) -> tuple[Plan | None, PlanSettings]:
    """The plan for the settings (None, with a note or finding, when there is none), and the
    settings it was made with.

    ``strict``: the user named settings, so their mistakes are errors; when the settings only
    the log states make the plan fail, it is planned again with vLLM's defaults for those (and
    a note says so).
    """
    assert settings.model
    try:
        loaded = load_model(settings.model, offline=offline)
    except KvplanError as exc:
        if not settings.sources["model"].startswith("log"):
            raise
        notes.append(f"cannot load {settings.model!r} named in the log ({exc}); pass --model")
        return None, settings
    while True:
        serve = settings.serve
        if log.engine == "V0" or log.graph_estimate_disabled:
            # NOTE: V0 captured CUDA graphs after sizing the KV cache, so they never reduced
            # it; nor does V1 under VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 (its warning).
            serve = serve.but(cuda_graph_bytes=0)
        options = PlanOptions(
            batch_sizes=(), grid_lens=[serve.max_model_len or loaded.spec.max_model_len]
        )
        try:
            draft = None
            if serve.speculative is not None:
                try:
                    serve, draft = load_draft(serve, offline=offline)
                except KvplanError as exc:  # a draft the log names but kvplan cannot read
                    notes.append(f"planned without the drafter: cannot load it ({exc})")
                    serve = serve.but(speculative=None)
            dep = Deployment(model=loaded, gpu=gpu, settings=serve, draft=draft)
            return plan(dep, options), settings
        except DoesNotFitError as exc:
            findings.append(
                Finding(kind="plan-does-not-fit", severity="error", data={"message": str(exc)})
            )
            return None, settings
        except UsageError as exc:
            from_log = settings.from_log()
            if strict and not from_log:
                raise  # the command line's own mistake
            notes.append(f"cannot plan with the settings the log states: {exc}")
            if not strict:
                return None, settings
            # The user named other settings; plan with theirs and vLLM's defaults for the log's.
            notes[-1] += f"; planned with vLLM's defaults for {', '.join(from_log)}"
            settings = layer_settings(log, given, defaults_for=from_log)


def _terms(log: BootLog, p: Plan | None, serve: ServeSettings | None = None) -> list[Term]:
    cap = p.vllm if p else None

    def plan_of(attr: str) -> float | None:
        return getattr(cap, attr) if cap is not None else None

    act_name, act_log, act_plan, act_holds_graphs = activation_term(log, cap)
    terms = [
        Term("GPU total", "bytes", log.total_gpu_bytes, plan_of("gpu_memory_bytes")),
        Term("requested", "bytes", log.requested_bytes, plan_of("requested_bytes")),
        Term("weights", "bytes", log.weights_bytes, plan_of("weights_bytes")),
        Term(act_name, "bytes", act_log, act_plan),
        Term("non-torch", "bytes", log.non_torch_bytes, plan_of("non_torch_bytes")),
    ]
    if log.consumed_bytes is not None:
        both = cap.weights_bytes + cap.non_torch_bytes if cap else None
        terms.append(Term("weights + non-torch", "bytes", log.consumed_bytes, both))
    graphs = log.budget_graphs
    note = ""
    if log.cuda_graph_estimate_bytes is not None and not log.graph_estimate_disabled:
        note = "vLLM's estimate before sizing"
    elif graphs is None and log.cuda_graph_capture_bytes is not None:
        graphs, note = log.cuda_graph_capture_bytes, "captured after sizing"
        if act_holds_graphs:
            note += "; its estimate is inside the activation figure"
    elif graphs is not None and p is not None and cap is not None and cap.cuda_graph_bytes == 0:
        if not rules_for(p.vllm_version or None).subtracts_cuda_graphs:
            note = f"vLLM {p.vllm_version} sizes the KV cache first: not subtracted"
    terms += [
        Term("CUDA graphs", "bytes", graphs, plan_of("cuda_graph_bytes"), note),
        Term(
            "available KV",
            "bytes",
            log.available_kv_bytes,
            plan_of("available_kv_bytes"),
            "the log's 'kv cache memory in use'"
            if log.available_from_in_use
            else "measured after warm-up"
            if log.measured_pool
            else "",
        ),
        *_graph_mode_terms(log, p, serve),
        Term("GPU blocks", "blocks", log.num_gpu_blocks, plan_of("num_gpu_blocks")),
        Term("KV cache tokens", "tokens", log.kv_cache_tokens, plan_of("kv_cache_size_tokens")),
        Term("max concurrency", "x", log.max_concurrency, plan_of("max_concurrency")),
    ]
    mm = p.mm if p is not None else None
    terms += [
        Term(
            "encoder budget",
            "tokens",
            log.encoder_budget_tokens,
            mm.encoder_budget_tokens if mm is not None else None,
        ),
        Term(
            "encoder items profiled",
            "items",
            log.encoder_profile_items,
            mm.profile_items if mm is not None else None,
            _profiled_note(log, mm),
        ),
    ]
    return [t for t in terms if t.log is not None or (t.plan is not None and t.plan != 0)]


def _graph_mode_terms(log: BootLog, p: Plan | None, serve: ServeSettings | None) -> list[Term]:
    """One row per mode of vLLM >= 0.21's "Profiling CUDA graph memory: PIECEWISE=51
    (largest=512), FULL=35 (largest=256)" against the graphs the plan counts
    (:func:`planner.budget.graph_modes`), each note the largest size of both when they differ:
    a count that differs is a setting the plan does not share (max_num_seqs, the capture sizes,
    a drafter, LoRA)."""
    if not log.cuda_graph_modes:
        return []
    planned = (
        graph_modes(serve, p.gpu, p.vllm.max_num_seqs, p.vllm.max_num_batched_tokens)
        if p is not None and serve is not None
        else None
    )
    has_plan = planned is not None
    terms = []
    for mode in sorted(set(log.cuda_graph_modes) | set(planned or {}), key=_MODE_ORDER.index):
        logged, plan_mode = log.cuda_graph_modes.get(mode), (planned or {}).get(mode)
        note = ""
        if logged and plan_mode and logged[1] != plan_mode[1]:
            note = f"largest {logged[1]:,} tokens logged, {plan_mode[1]:,} planned"
        terms.append(
            Term(
                f"CUDA graphs ({mode})",
                "graphs",
                logged[0] if logged else None,
                plan_mode[0] if plan_mode else (0 if has_plan and mode != "ENCODER" else None),
                note,
            )
        )
    return terms


_MODE_ORDER = ["PIECEWISE", "FULL", "ENCODER"]


def _profiled_note(log: BootLog, mm: MMProfile | None) -> str:
    """The modality each side profiles, when the log names one."""
    logged = log.encoder_profile_modality
    planned = mm.profiled_modality if mm is not None else None
    if logged is None:
        return ""
    if planned is None or planned == logged:
        return f"{logged} items"
    return f"the log profiles {logged}, the plan {planned}"
