"""Plans files for CI: a YAML list of deployments, each checked with the planner.

``kvplan check deploy/plans.yaml`` exits 0 when every deployment starts and meets its
requirements, 1 when any fails (or cannot be planned), 2 when the file is invalid. Schema
(``examples/plans.yaml``)::

    deployments:
      - name: chat-8b                   # unique
        model: llama-3.1-8b             # catalog name, hub id (HF cache offline), ./local/dir
        engine: vllm                    # vllm | sglang | trtllm
        gpu: h100                       # catalog GPU, or gpu_memory: 80GiB (both: memory wins)
        tp: 1
        pp: 1
        max_model_len: 16384
        max_num_seqs: 64
        gpu_memory_utilization: 0.9     # vLLM's; SGLang mem_fraction_static; TRT-LLM
                                        # kv_cache_free_gpu_memory_fraction
        kv_cache_dtype: auto
        max_num_batched_tokens: 8192    # optional, vLLM only
        # requirements (all optional)
        min_concurrency: 8              # requests of max_model_len tokens at once
        min_kv_tokens: 100000           # KV cache size in tokens
        max_kv_usage: 0.9               # max_num_seqs full-length requests / KV blocks
        headroom: 2GiB                  # or "5%" of GPU memory; kept free of KV cache
        # workload requirements (vLLM only): replay a workload on this deployment
        workload: workloads/chat.yaml   # kvplan simulate -w's trace or spec; path relative to
                                        # this file; a top-level `workload:` serves every entry
        max_preemptions: 0              # preemptions while replaying it
        max_kv_usage_p90: 0.9           # KV usage, 90th percentile over time
        max_ttft_p90_s: 2.0             # time to first token, 90th percentile, seconds
        min_output_tokens_per_s: 500    # output tokens per second over the replay

Every deployment gets an outcome, in the words ``kvplan estimate`` uses: ``wont_start`` (the
weights, one ``max_model_len`` request, or a hybrid's Mamba blocks < ``max_num_seqs``: the
entry fails), ``queues_at_worst_case`` (with every request ``max_model_len`` tokens long only
``worst_case_running`` of ``max_num_seqs`` run at once; vLLM still starts) or
``fits_at_worst_case``. Only won't-start and unmet requirements fail an entry.

A workload (``kvplan simulate -w``'s JSONL trace or YAML spec) is replayed with
:func:`planner.simulate.compare.simulate_model` on the entry's deployment; the workload keys
need one (the entry's or the top level's) and engine vllm. A top-level workload that cannot be
read makes the whole file invalid; an entry's makes that entry invalid.

Validation errors name the file, the line (YAML marks) and the key; one invalid deployment does
not stop the others from being checked, but makes the run exit 2. The YAML is loaded with
``yaml.SafeLoader`` (on libyaml where PyYAML has it); files over 1 MiB and alias expansions
over a million nodes are refused.

:func:`parse_plans` turns each valid entry into an :class:`Entry`: a model argument, a
:class:`planner.deployment.Gpu`, :class:`planner.deployment.ServeSettings` (parsed by
``ServeSettings.from_mapping``, the keys being the settings' yaml spellings) and
:class:`Requirements`. :func:`check_deployment` plans it as a
:class:`planner.deployment.Deployment`, as ``kvplan estimate`` would, and judges it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from planner.activation import activation_peak_bytes
from planner.check.plans import (
    WORKLOAD_KEYS,
    Entry,
    Requirements,
    load_once,
    load_yaml,
    parse_plans,
)
from planner.check.results import Check, CheckReport, DeploymentResult, Figures, Simulated
from planner.deployment import Deployment, as_yaml, fp8_kv_caveat, render_changes
from planner.engine_budgets import sglang_capacity, trtllm_capacity
from planner.errors import DoesNotFitError, KvplanError, WontStartError
from planner.kv_layout import estimate
from planner.model.load import load_draft, load_model
from planner.model.specs import Engine, KVDtype
from planner.plan_types import (
    FITS_AT_WORST_CASE,
    QUEUES_AT_WORST_CASE,
    WONT_START,
    PlanOptions,
    Refusal,
)
from planner.recommend import plan
from planner.report import physical_refusal
from planner.weights import for_deployment

if TYPE_CHECKING:
    from planner.deployment import Deployment
    from planner.engine_budgets import EngineCapacity
    from planner.kv_layout import KVEstimate
    from planner.model.load import LoadedModel
    from planner.plan_types import Plan, Refusal
    from planner.simulate.workload import Workload
    from planner.weights import Weights


# --------------------------------------------------------------------------- schema


# --------------------------------------------------------------------------- checking


class ModelCache:
    """Models shared by the deployments of one run (fetched once each)."""

    def __init__(self, offline: bool | None) -> None:
        self.offline = offline
        self.models: dict[str, LoadedModel | KvplanError] = {}
        self.results: dict[Any, DeploymentResult] = {}  # per distinct deployment (_checked)

    def model(self, model: str) -> LoadedModel:
        return load_once(
            self.models, model, lambda: load_model(model, offline=self.offline), KvplanError
        )


def check_file(path: str | Path, *, offline: bool | None = None) -> CheckReport:
    """Load, validate and check every deployment of a plans file.

    Args:
        path: the YAML plans file.
        offline: only the catalog and the local HF cache (default follows ``HF_HUB_OFFLINE``).

    Returns:
        The :class:`CheckReport`; raises :class:`PlansFileError` when the file as a whole is
        unusable (missing, binary, too large, not YAML, no ``deployments`` list).
    """
    file = Path(path)
    data = load_yaml(file)
    entries, problems = parse_plans(data, file=str(path), base_dir=file.parent)
    cache = ModelCache(offline)
    results = [_checked(e, cache) for e in entries]
    return CheckReport(str(path), results, problems)


def _checked(entry: Entry, cache: ModelCache) -> DeploymentResult:
    """:func:`check_deployment`, once per distinct deployment of a file: entries that differ
    only in ``name`` and ``line`` (10,000 deployments of a few dozen models x GPUs x
    settings) share one plan, their results one verdict under each entry's own name."""
    key = (entry.model, entry.gpu, entry.settings, entry.requirements, id(entry.workload))
    try:
        done = cache.results.get(key)
    except TypeError:  # a setting that cannot be a key: plan it
        return check_deployment(entry, cache=cache)
    if done is None:
        done = cache.results[key] = check_deployment(entry, cache=cache)
        return done
    return replace(done, name=entry.name, line=entry.line)


def check_deployment(entry: Entry, *, cache: ModelCache | None = None) -> DeploymentResult:
    """Plan one entry with its engine's formulas and judge it against its requirements.

    Args:
        entry: a validated entry of a plans file.
        cache: the models already fetched in this run.

    Returns:
        Its :class:`DeploymentResult`; a model that cannot be loaded or planned (unknown id,
        a TP the model cannot split) is a result with status ``error``, not an exception.
    """
    cache = cache or ModelCache(None)
    s = entry.settings
    # what the entry asked for; the check fills in what the engine resolves
    shown: dict[str, Any] = {
        "tp": s.tp,
        "pp": s.pp,
        **({"dp": s.dp} if s.dp > 1 else {}),
        "max_model_len": s.max_model_len,
        "max_num_seqs": s.max_num_seqs,
        "gpu_memory_utilization": s.gpu_memory_utilization,
        "kv_cache_dtype": s.kv_cache_dtype.value,
    }
    try:
        loaded = cache.model(entry.model)
        s, draft = load_draft(s, offline=cache.offline)
        dep = Deployment(model=loaded, gpu=entry.gpu, settings=s, draft=draft)
        refusal = physical_refusal(dep)  # the layout rules kvplan estimate applies
        if refusal is not None:
            return _refused(entry, refusal, shown)
        weights = for_deployment(dep)
        if s.engine is Engine.VLLM:
            return _check_vllm(entry, dep, weights, shown)
        return _check_other(entry, dep, weights, shown)
    except KvplanError as exc:
        return _result(entry, "error", shown, [], None, None, error=str(exc))


class _Verdict(NamedTuple):
    """:func:`planner.recommend.worst_case` of a deployment: outcome, requests of
    ``max_model_len`` running at once, why it won't start (all None: not planned)."""

    outcome: str | None = None
    running: int | None = None
    reason: str | None = None


def _result(
    entry: Entry,
    status: str,
    settings: dict[str, Any],
    checks: list[Check],
    figures: Figures | None,
    fix: str | None,
    verdict: _Verdict | None = None,
    *,
    error: str | None = None,
    model: str | None = None,
    caveats: list[str] | None = None,
    simulated: Simulated | None = None,
) -> DeploymentResult:
    limiting = min(checks, key=lambda c: c.margin) if checks else None
    verdict = verdict or _Verdict()
    return DeploymentResult(
        name=entry.name,
        line=entry.line,
        status=status,
        outcome=verdict.outcome,
        worst_case_running=verdict.running,
        outcome_reason=verdict.reason,
        model=model or entry.model,
        engine=entry.settings.engine.value,
        gpu=entry.gpu.name,
        gpu_memory_bytes=entry.gpu.memory_bytes,
        settings=settings,
        checks=checks,
        limiting=limiting.name if limiting else None,
        margin=round(limiting.margin, 4) if limiting else None,
        figures=figures,
        fix=fix,
        error=error,
        caveats=caveats or [],
        simulated=simulated,
    )


def _at_least(name: str, resource: str, unit: str, required: float, actual: float) -> Check:
    margin = actual / required - 1 if required else math.inf
    return Check(name, resource, unit, required, actual, actual >= required, margin)


def _at_most(name: str, resource: str, unit: str, required: float, actual: float) -> Check:
    margin = required / actual - 1 if actual else math.inf
    return Check(name, resource, unit, required, actual, actual <= required, margin)


def _requirements(
    req: Requirements, concurrency: float, tokens: int, usage: float, dp: int = 1
) -> list[Check]:
    """The optional requirement checks, the same for every engine; ``dp`` ranks each hold
    ``tokens`` (vLLM: one engine and pool per data-parallel rank)."""
    checks = []
    if req.min_concurrency is not None:
        checks.append(
            _at_least("min_concurrency", "concurrency", "x", req.min_concurrency, concurrency)
        )
    if req.min_kv_tokens is not None:
        checks.append(_at_least("min_kv_tokens", "KV tokens", "tokens", req.min_kv_tokens, tokens))
    if req.max_kv_usage is not None:
        checks.append(_at_most("max_kv_usage", "KV usage", "ratio", req.max_kv_usage, usage))
    if req.min_cluster_kv_tokens is not None:
        checks.append(
            _at_least(
                "min_cluster_kv_tokens",
                f"KV tokens of {dp} DP rank(s)",
                "tokens",
                req.min_cluster_kv_tokens,
                dp * tokens,
            )
        )
    return checks


def _workload_checks(req: Requirements, sim: Simulated) -> list[Check]:
    """The workload requirements against what the replay measured."""
    checks = []
    if req.max_preemptions is not None:
        checks.append(
            _at_most(
                "max_preemptions",
                "preemptions replaying the workload",
                "preemptions",
                req.max_preemptions,
                sim.preemptions,
            )
        )
    if req.max_kv_usage_p90 is not None:
        checks.append(
            _at_most(
                "max_kv_usage_p90",
                "p90 KV usage replaying the workload",
                "ratio",
                req.max_kv_usage_p90,
                sim.usage_p90,
            )
        )
    if req.max_ttft_p90_s is not None:
        checks.append(
            _at_most(
                "max_ttft_p90_s",
                "p90 time to first token replaying the workload",
                "s",
                req.max_ttft_p90_s,
                sim.ttft_p90_s,
            )
        )
    if req.min_output_tokens_per_s is not None:
        checks.append(
            _at_least(
                "min_output_tokens_per_s",
                "output tokens per second replaying the workload",
                "tokens/s",
                req.min_output_tokens_per_s,
                sim.output_tokens_per_s,
            )
        )
    return checks


def _replay(dep: Deployment, workload: Workload) -> Simulated:
    """``workload`` replayed on ``dep`` as ``kvplan simulate`` replays it (the pool is vLLM's
    budget on the deployment's GPU)."""
    from planner.simulate.compare import simulate_model

    return Simulated.of(workload, simulate_model(dep, workload).runs[0].result)


class _Fix(NamedTuple):
    """One way to pass: the settings to change as data (``{"tp": 4}``) or a sentence, what
    they buy, and the further changes they need (``then``)."""

    change: Mapping[str, object] | str
    note: str = ""
    then: Mapping[str, object] | None = None

    def __str__(self) -> str:
        """As a plans file spells it: ``kv_cache_dtype: fp8 (6.30x, 206,438 tokens) with
        max_num_seqs: 5``."""
        text = render_changes(self.change, "yaml")
        if self.note:
            text += f" {self.note}"
        if self.then:
            text += f" with {as_yaml(self.then)}"
        return text

    @property
    def fp8_kv(self) -> bool:
        """Whether it suggests fp8 KV (which needs :func:`planner.deployment.fp8_kv_caveat`)."""
        return not isinstance(self.change, str) and self.change.get("kv_cache_dtype") == "fp8"


def _judged(
    entry: Entry,
    settings: dict[str, Any],
    checks: list[Check],
    figures: Figures,
    fixes: list[_Fix],
    verdict: _Verdict,
    model: str,
    simulated: Simulated | None = None,
) -> DeploymentResult:
    """A planned entry's result: pass when every check passed, else fail with the fixes (and
    the fp8 caveat for the entry's GPU when one suggests fp8 KV)."""
    return _result(
        entry,
        "pass" if all(c.passed for c in checks) else "fail",
        settings,
        checks,
        figures,
        "; or ".join(str(f) for f in fixes) or None,
        verdict,
        model=model,
        caveats=[fp8_kv_caveat(entry.gpu)] if any(f.fp8_kv for f in fixes) else [],
        simulated=simulated,
    )


def _check_vllm(
    entry: Entry, dep: Deployment, weights: Weights, settings: dict[str, Any]
) -> DeploymentResult:
    """vLLM: the same :func:`planner.recommend.plan` as ``kvplan estimate --gpu``, and the
    entry's workload replayed when vLLM starts."""
    spec, gmu = dep.spec, dep.settings.gmu
    settings["gpu_memory_utilization"] = gmu
    try:
        # no max_model_len x max_num_seqs grid: the check needs one cell
        p = plan(dep, PlanOptions(grid_lens=(), batch_sizes=()))
    except DoesNotFitError as exc:
        refusal = exc.refusal if isinstance(exc, WontStartError) else None
        if isinstance(refusal, Refusal) and refusal.check != "weights":
            return _refused(entry, refusal, settings)  # a kv_cache_memory over the GPU
        memory = dep.gpu.memory_bytes if dep.gpu else 0
        requested = math.ceil(memory * gmu)
        check = _at_most("weights", "weights", "bytes", requested, weights.bytes_per_rank)
        # the planner's suggestions are data; a plans file spells them as its keys
        fix = ", or ".join(_yaml_fix(change) for change in exc.changes) or None
        verdict = _Verdict(WONT_START, 0, str(exc))
        return _result(entry, "fail", settings, [check], None, fix, verdict, model=spec.name)
    cap = p.vllm
    est = p.estimate
    seqs = cap.max_num_seqs
    usable = max(cap.num_gpu_blocks - 1, 0)  # the null block is never handed out
    usage = seqs * cap.blocks_per_request / usable if usable else math.inf
    settings.update(
        max_model_len=est.max_model_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=cap.max_num_batched_tokens,
        kv_cache_dtype=est.kv_cache_dtype,
        block_size=est.block_size,
    )
    needed = cap.bytes_per_block * cap.blocks_per_request
    checks = [
        _at_least(
            "max_model_len",
            "KV memory for one max_model_len request",
            "bytes",
            needed,
            cap.available_kv_bytes - cap.bytes_per_block,  # vLLM's admission check
        )
    ]
    if cap.mamba_max_num_seqs is not None:  # a hybrid: vLLM refuses more seqs than blocks
        checks.append(
            _at_most(
                "max_num_seqs",
                "Mamba state blocks, one per running sequence",
                "seqs",
                cap.mamba_max_num_seqs,
                seqs,
            )
        )
    checks += _requirements(
        entry.requirements, cap.max_concurrency, cap.kv_cache_size_tokens, usage, dep.settings.dp
    )
    simulated = None
    if entry.workload is not None and p.outcome != WONT_START:
        simulated = _replay(dep, entry.workload)
        checks += _workload_checks(entry.requirements, simulated)
    figures = Figures(
        source="vllm",
        weights_bytes=cap.weights_bytes,
        available_kv_bytes=cap.available_kv_bytes,
        kv_cache_size_tokens=cap.kv_cache_size_tokens,
        max_concurrency=round(cap.max_concurrency, 4),
        num_gpu_blocks=cap.num_gpu_blocks,
        blocks_per_request=cap.blocks_per_request,
        kv_usage=round(usage, 4),
        setting=f"gpu_memory_utilization={gmu}",
    )
    ok = all(c.passed for c in checks)
    fixes = [] if ok else _vllm_fixes(entry, dep, p, checks)
    verdict = _Verdict(p.outcome, p.worst_case_running, p.outcome_reason)
    return _judged(entry, settings, checks, figures, fixes, verdict, spec.name, simulated)


def _refused(entry: Entry, refusal: Refusal, settings: dict[str, Any]) -> DeploymentResult:
    """An entry that won't start for a rule kvplan estimate applies first (a layout no node
    holds, heads that do not split, a ``kv_cache_memory`` pool over the GPU): one failed
    check named by the rule, the refusal's reason and its changes as the fix."""
    cap, gpu = refusal.vllm, refusal.gpu
    if refusal.check == "kv_cache_memory" and cap is not None and gpu is not None:
        need = cap.weights_bytes + cap.non_torch_bytes + cap.available_kv_bytes
        check = _at_most(
            "kv_cache_memory",
            "kv_cache_memory + weights + non-torch",
            "bytes",
            gpu.memory_bytes,
            need,
        )
    else:
        check = Check(refusal.check, "a layout the engine starts", "rule", 1, 0, False, -1.0)
    fix = ", or ".join(_yaml_fix(change) for change in refusal.changes) or None
    verdict = _Verdict(WONT_START, 0, refusal.reason)
    return _result(entry, "fail", settings, [check], None, fix, verdict, model=refusal.model)


def _yaml_fix(change: Mapping[str, object] | str) -> str:
    """One of the planner's suggestions as a plans file spells it."""
    text = render_changes(change, "yaml")
    return f"a bigger GPU ({text})" if not isinstance(change, str) and "gpu" in change else text


def _vllm_fixes(entry: Entry, dep: Deployment, p: Plan, checks: list[Check]) -> list[_Fix]:
    """What to change, from the planner's own numbers: vLLM's estimated maximum length, the
    max_num_seqs a hybrid's Mamba blocks hold, the max_num_seqs that meets max_kv_usage, and
    the fp8 / TP alternatives that pass every check (with the max_num_seqs each needs for
    max_kv_usage; when a workload requirement failed, replaying the workload on each)."""
    req = entry.requirements
    cap = p.vllm
    failed = {c.name for c in checks if not c.passed}
    per_request = cap.blocks_per_request

    def seqs_within(blocks: int) -> int:
        """Most full-length sequences whose blocks stay within max_kv_usage of the pool."""
        return int((req.max_kv_usage or 0) * max(blocks - 1, 0) // per_request)

    fixes: list[_Fix] = []
    if "max_model_len" in failed:
        if cap.estimated_max_model_len:
            fixes.append(_Fix({"max_model_len": cap.estimated_max_model_len}, "(vLLM's estimate)"))
        else:
            fixes.append(_Fix("more GPU memory: weights and activations leave no KV cache"))
    if "max_num_seqs" in failed and cap.mamba_max_num_seqs:
        fixes.append(_Fix({"max_num_seqs": cap.mamba_max_num_seqs}, "(one Mamba block each)"))
    if failed == {"max_kv_usage"} and seqs_within(cap.num_gpu_blocks) >= 1:
        fixes.append(_Fix({"max_num_seqs": seqs_within(cap.num_gpu_blocks)}))
    replayed = failed & set(WORKLOAD_KEYS)
    length = p.estimate.max_model_len
    for alt in p.alternatives:
        tokens = int(alt.max_concurrency * length)
        if not alt.fits or alt.max_concurrency < (req.min_concurrency or 0):
            continue
        if tokens < (req.min_kv_tokens or 0):
            continue
        note = f"({alt.max_concurrency:.2f}x, {tokens:,} tokens)"
        usable = max(alt.num_gpu_blocks - 1, 0)
        then = None
        if req.max_kv_usage is not None and cap.max_num_seqs * per_request > (
            req.max_kv_usage * usable
        ):
            if seqs_within(alt.num_gpu_blocks) < 1:
                continue
            then = {"max_num_seqs": seqs_within(alt.num_gpu_blocks)}
        if replayed:
            sim = _replay_with(dep, entry, {**alt.changes, **(then or {})})
            if sim is None or not all(c.passed for c in _workload_checks(req, sim)):
                continue
            note = f"{note[:-1]}; replayed: {_replayed(req, sim)})"
        fixes.append(_Fix(alt.changes, note, then=then))
    if replayed:
        assert entry.workload is not None
        fixes.append(
            _Fix(
                "more KV memory (a larger GPU, more TP) or another max_num_seqs (compare: "
                f"kvplan simulate {p.estimate.model} --gpu {dep.gpu.name if dep.gpu else '?'} "
                f"-w {entry.workload.source} --max-num-seqs 16,32,64)"
            )
        )
    if not fixes:
        fixes.append(_Fix("a larger GPU, more TP, or a shorter max_model_len"))
    return fixes


def _replay_with(dep: Deployment, entry: Entry, changes: Mapping[str, object]) -> Simulated | None:
    """The entry's workload replayed with ``changes`` (None when that cannot be planned)."""
    assert entry.workload is not None
    typed = {k: KVDtype(v) if k == "kv_cache_dtype" else v for k, v in changes.items()}
    try:
        return _replay(dep.with_settings(**typed), entry.workload)
    except KvplanError:
        return None


def _replayed(req: Requirements, sim: Simulated) -> str:
    """The replay's figures the workload requirements ask about, in words."""
    words = {
        "max_preemptions": f"{sim.preemptions:,} preemptions",
        "max_kv_usage_p90": f"KV p90 {sim.usage_p90:.0%}",
        "max_ttft_p90_s": f"TTFT p90 {sim.ttft_p90_s:.2f} s",
        "min_output_tokens_per_s": f"{sim.output_tokens_per_s:,.0f} output tok/s",
    }
    return ", ".join(words[key] for key in req.workload_keys)


def _check_other(
    entry: Entry, dep: Deployment, weights: Weights, settings: dict[str, Any]
) -> DeploymentResult:
    """SGLang / TRT-LLM: their budget models from :mod:`planner.budget` (the figures are the
    engine's, not vLLM's)."""
    spec, req = dep.spec, entry.requirements
    est = estimate(spec, dep.settings, dep.gpu, batch_sizes=())
    cap = engine_capacity(dep, est, weights)
    settings.update(
        max_model_len=est.max_model_len,
        kv_cache_dtype=est.kv_cache_dtype,
        block_size=est.block_size,
        gpu_memory_utilization=cap.fraction,
    )
    seqs = dep.settings.max_num_seqs  # the engines' own defaults admit until the pool is full
    usage = (seqs / cap.max_concurrency if cap.max_concurrency else math.inf) if seqs else math.nan
    checks = [
        _at_least("max_model_len", "requests of max_model_len", "x", 1.0, cap.max_concurrency)
    ]
    checks += _requirements(req, cap.max_concurrency, cap.max_total_tokens, usage, dep.settings.dp)
    figures = Figures(
        source=dep.settings.engine.value,
        weights_bytes=weights.bytes_per_rank,
        available_kv_bytes=cap.available_kv_bytes,
        kv_cache_size_tokens=cap.max_total_tokens,
        max_concurrency=round(cap.max_concurrency, 4),
        num_gpu_blocks=None,
        blocks_per_request=None,
        kv_usage=round(usage, 4) if seqs and math.isfinite(usage) else None,
        setting=cap.setting,
    )
    ok = all(c.passed for c in checks)
    fixes: list[_Fix] = []
    if not ok:
        failed = {c.name for c in checks if not c.passed}
        if "max_model_len" in failed and cap.max_total_tokens > 0:
            fixes.append(_Fix({"max_model_len": cap.max_total_tokens}, "(the whole KV pool)"))
        if "max_kv_usage" in failed and req.max_kv_usage is not None:
            seqs_ok = int(req.max_kv_usage * cap.max_concurrency)
            if seqs_ok >= 1:
                fixes.append(_Fix({"max_num_seqs": seqs_ok}))
        if est.kv_dtype_bytes > 1:
            fixes.append(_Fix({"kv_cache_dtype": KVDtype.FP8}, "(half the KV bytes per token)"))
        fixes.append(_Fix({"tp": dep.settings.tp * 2}, "or a larger GPU"))
    verdict = _other_verdict(cap, seqs, est.max_model_len)
    return _judged(entry, settings, checks, figures, fixes, verdict, spec.name)


def _other_verdict(cap: EngineCapacity, max_num_seqs: int | None, length: int) -> _Verdict:
    """SGLang / TRT-LLM in the same words, from their budgets: no room for one request of
    ``length`` is won't start; else as many full-length requests as the pool holds run, up to
    ``max_num_seqs`` (or the engine's own running limit when none is given)."""
    if cap.max_concurrency < 1:
        return _Verdict(
            WONT_START,
            0,
            f"the {cap.engine} KV pool holds {cap.max_total_tokens:,} tokens, less than one "
            f"{length:,}-token request",
        )
    limit = max_num_seqs or cap.max_running_requests
    running = min(limit, int(cap.max_concurrency))
    return _Verdict(FITS_AT_WORST_CASE if running >= limit else QUEUES_AT_WORST_CASE, running)


def engine_capacity(dep: Deployment, est: KVEstimate, weights: Weights) -> EngineCapacity:
    """SGLang or TRT-LLM capacity with the deployment's fraction (engine default when unset);
    headroom is memory the KV cache may not use, so it is counted with the weights.

    Args:
        dep: the deployment (its engine is SGLang or TRT-LLM; ``gpu`` is set).
        est: its KV estimate.
        weights: its per-rank weights.

    Returns:
        The engine's :class:`planner.budget.EngineCapacity`.
    """
    s = dep.settings
    memory = dep.gpu.memory_bytes if dep.gpu else 0
    taken = weights.bytes_per_rank + s.headroom_bytes
    if s.engine is Engine.SGLANG:
        return sglang_capacity(
            est,
            gpu_memory_bytes=memory,
            weights_bytes=taken,
            mem_fraction_static=s.gpu_memory_utilization,
        )
    # NOTE: as in recommend.plan, TRT-LLM's activation is vLLM's profile run at vLLM's default
    # token budget for this GPU.
    as_vllm = replace(
        s,
        engine=Engine.VLLM,
        block_size=None,
        max_model_len=est.max_model_len,
        max_num_seqs=None,
        max_num_batched_tokens=None,
    )
    vllm = estimate(dep.spec, as_vllm, dep.gpu, batch_sizes=()).vllm
    assert vllm is not None
    return trtllm_capacity(
        est,
        gpu_memory_bytes=memory,
        weights_bytes=taken,
        activation_bytes=activation_peak_bytes(
            dep.spec, vllm.max_num_batched_tokens, vllm.max_num_seqs
        ),
        free_gpu_memory_fraction=s.gpu_memory_utilization or 0.9,
    )


# --------------------------------------------------------------------------- JSON Schema
