"""``kvplan diagnose``: the boot log against the plan for the same model, GPU and settings."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.diagnose.boot_log import SETTINGS, BootLog, parse_log
from planner.diagnose.findings import Finding, explain, troubleshoot
from planner.errors import InputFileError, KvplanError
from planner.files import read_text_file
from planner.model.specs import KVDtype

if TYPE_CHECKING:
    from planner.deployment import Gpu
    from planner.recommend import Plan

MAX_LOG_BYTES = 50 << 20


class LogFileError(InputFileError):
    """The log cannot be read (missing, binary, too large): exit 2."""


class NothingRecognisedError(KvplanError):
    """The file is text but holds no vLLM line kvplan knows."""


@dataclass(frozen=True)
class Term:
    """One figure in the log and in the plan. ``unit``: bytes, tokens, blocks or x."""

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
    """``kvplan diagnose``: what the log says, the plan for the same settings, and findings."""

    file: str
    log: BootLog
    settings: dict[str, Any]  # what the plan used, and where each value came from
    sources: dict[str, str]
    terms: list[Term]
    findings: list[Finding]
    notes: list[str]


def diagnose_file(
    path: str | Path,
    *,
    model: str | None = None,
    gpu: Gpu | None = None,
    tp: int | None = None,
    pp: int | None = None,
    max_model_len: int | None = None,
    gpu_memory_utilization: float | None = None,
    kv_cache_dtype: KVDtype | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    enforce_eager: bool | None = None,
    offline: bool | None = None,
) -> Diagnosis:
    """Parse the log at ``path`` and compare it with the plan for the same model and settings.

    Settings given here win; then the values the log states; then vLLM's defaults.

    Args:
        path: the vLLM log.
        model: the model (default: the one the log names).
        gpu: the GPU (default: the total the log reports, if it does).
        tp, pp, max_model_len, gpu_memory_utilization, kv_cache_dtype, max_num_batched_tokens,
            max_num_seqs, enforce_eager: as ``vllm serve`` takes them.
        offline: only the catalog and the local HF cache for the model.

    Returns:
        The :class:`Diagnosis`; raises :class:`LogFileError` for an unreadable file and
        :class:`NothingRecognisedError` when no line is a vLLM line kvplan knows.
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
    given = {
        "model": model,
        "tp": tp,
        "pp": pp,
        "max_model_len": max_model_len,
        "gpu_memory_utilization": gpu_memory_utilization,
        "kv_cache_dtype": kv_cache_dtype.value if kv_cache_dtype else None,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
        "enforce_eager": enforce_eager,
    }
    notes: list[str] = []
    settings, sources = _settings(log, given, notes)
    gpu = gpu or _gpu_from_log(log, settings)
    if gpu is not None:
        settings["gpu"], settings["gpu_memory_bytes"] = gpu.name, gpu.memory_bytes
        where = "log" if gpu.source == "log" else "command line"
        sources["gpu"] = sources["gpu_memory_bytes"] = where
    the_plan = None
    findings: list[Finding] = []
    if settings.get("model") and gpu is not None:
        strict = any(value is not None for value in given.values()) or gpu.source != "log"
        the_plan = _plan_for(log, settings, gpu, offline, findings, notes, strict, sources)
    elif not settings.get("model"):
        notes.append("no model: pass --model (the log names none) to compare with the plan")
    else:
        notes.append("no GPU: pass --gpu or --gpu-memory (the log states no total) to compare")
    terms = _terms(log, the_plan)
    if the_plan is not None:
        findings += explain(log, the_plan)
    findings += troubleshoot(log, the_plan, settings)
    return Diagnosis(str(path), log, settings, sources, terms, findings, notes)


def _settings(
    log: BootLog, given: dict[str, Any], notes: list[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The plan's settings: the command line's, else the log's (a value the log states that
    vLLM could not have run with is left out, with a note), else vLLM's defaults."""
    settings: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in dict.fromkeys((*given, *SETTINGS)):
        if given.get(key) is not None:
            settings[key], sources[key] = given[key], "command line"
        elif key == "model" and log.model:
            settings[key], sources[key] = log.model, f"log line {log.lines['model']}"
        elif key in log.settings:
            where = f"log line {log.lines[key]}"
            if not _usable_log_setting(key, log.settings[key]):
                notes.append(f"ignored {key} {log.settings[key]!r} ({where}): not a valid value")
                continue
            settings[key], sources[key] = log.settings[key], where
    if "gpu_memory_utilization" not in settings:
        from planner.deployment import VLLM_DEFAULT_GMU

        # NOTE: V0 engines defaulted to 0.9; V1 (0.33) to 0.92.
        settings["gpu_memory_utilization"] = 0.9 if log.engine == "V0" else VLLM_DEFAULT_GMU
        sources["gpu_memory_utilization"] = f"vLLM {log.engine or 'V1'} default"
    return settings, sources


# The log's settings that shape the plan (gpu_memory_utilization is checked as it is read).
_LOG_PLAN_KEYS = (
    "tp",
    "pp",
    "max_model_len",
    "kv_cache_dtype",
    "max_num_batched_tokens",
    "max_num_seqs",
    "block_size",
    "enforce_eager",
    "enable_prefix_caching",
)


def _usable_log_setting(key: str, value: Any) -> bool:
    """Whether a setting read from the log is one vLLM could have run with."""
    from planner.deployment import MAX_COUNT

    if key == "gpu_memory_utilization":
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and 0 < value <= 1
        )
    if key == "kv_cache_dtype":
        try:
            KVDtype.parse(str(value))
        except KvplanError:
            return False
        return True
    if key in ("enforce_eager", "enable_prefix_caching"):
        return value in (True, False, "True", "False", "true", "false")
    number = _as_int(value)
    return number is not None and 1 <= number <= MAX_COUNT


def _gpu_from_log(log: BootLog, settings: dict[str, Any]) -> Gpu | None:
    from planner.deployment import Gpu

    total = log.total_gpu_bytes
    gmu = settings.get("gpu_memory_utilization")
    if total is None and log.requested_bytes and gmu:
        total = round(log.requested_bytes / float(gmu))
    return Gpu(name="from the log", memory_bytes=total, source="log") if total else None


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _plan_for(
    log: BootLog,
    s: dict[str, Any],
    gpu: Gpu,
    offline: bool | None,
    findings: list[Finding],
    notes: list[str],
    strict: bool,
    sources: dict[str, str],
) -> Plan | None:
    """The plan for the log's settings (None, with a note or finding, when there is none).

    ``strict``: the user named settings, so their mistakes are errors; settings that only the
    log states become a note instead.
    """
    from planner.deployment import Deployment, ServeSettings
    from planner.errors import DoesNotFitError, UsageError
    from planner.model.load import load_model
    from planner.recommend import PlanOptions, plan

    try:
        loaded = load_model(s["model"], offline=offline)
    except KvplanError as exc:
        if not sources.get("model", "").startswith("log"):
            raise
        notes.append(f"cannot load {s['model']!r} named in the log ({exc}); pass --model")
        return None
    spec = loaded.spec
    dtype = s.get("kv_cache_dtype") or "auto"
    eager = s.get("enforce_eager") in (True, "True", "true")
    # NOTE: V0 captured CUDA graphs after sizing the KV cache, so they never reduced it.
    graphs = 0 if eager or log.engine == "V0" else None
    try:
        settings = ServeSettings(
            tp=_as_int(s.get("tp")) or 1,
            pp=_as_int(s.get("pp")) or 1,
            kv_cache_dtype=KVDtype.parse(str(dtype)),
            block_size=_as_int(s.get("block_size")),
            max_model_len=_as_int(s.get("max_model_len")),
            max_num_batched_tokens=_as_int(s.get("max_num_batched_tokens")),
            max_num_seqs=_as_int(s.get("max_num_seqs")),
            gpu_memory_utilization=float(s["gpu_memory_utilization"]),
            cuda_graph_bytes=graphs,
            enable_prefix_caching=s.get("enable_prefix_caching") not in (False, "False", "false"),
        )
        options = PlanOptions(
            batch_sizes=(), grid_lens=[_as_int(s.get("max_model_len")) or spec.max_model_len]
        )
        return plan(Deployment(model=loaded, gpu=gpu, settings=settings), options)
    except DoesNotFitError as exc:
        findings.append(Finding("plan-does-not-fit", "error", {"message": str(exc)}))
        return None
    except UsageError as exc:
        from_log = [k for k in _LOG_PLAN_KEYS if sources.get(k, "").startswith("log")]
        if strict and not from_log:
            raise  # the command line's own mistake
        notes.append(f"cannot plan with the settings the log states: {exc}")
        if not strict:
            return None
        # The user named other settings; plan with theirs and vLLM's defaults for the log's.
        for key in from_log:
            del s[key], sources[key]
        notes[-1] += f"; planned with vLLM's defaults for {', '.join(from_log)}"
        return _plan_for(log, s, gpu, offline, findings, notes, strict, sources)


def _terms(log: BootLog, p: Plan | None) -> list[Term]:
    cap = p.vllm if p else None

    def plan_of(attr: str) -> float | None:
        return getattr(cap, attr) if cap is not None else None

    terms = [
        Term("GPU total", "bytes", log.total_gpu_bytes, plan_of("gpu_memory_bytes")),
        Term("requested", "bytes", log.requested_bytes, plan_of("requested_bytes")),
        Term("weights", "bytes", log.weights_bytes, plan_of("weights_bytes")),
        Term("activation peak", "bytes", log.activation_bytes, plan_of("activation_peak_bytes")),
        Term("non-torch", "bytes", log.non_torch_bytes, plan_of("non_torch_bytes")),
    ]
    if log.consumed_bytes is not None:
        both = cap.weights_bytes + cap.non_torch_bytes if cap else None
        terms.append(Term("weights + non-torch", "bytes", log.consumed_bytes, both))
    graphs = log.cuda_graph_bytes
    note = ""
    if graphs is None and log.cuda_graph_capture_bytes is not None:
        graphs, note = log.cuda_graph_capture_bytes, "captured after sizing"
    terms += [
        Term("CUDA graphs", "bytes", graphs, plan_of("cuda_graph_bytes"), note),
        Term("available KV", "bytes", log.available_kv_bytes, plan_of("available_kv_bytes")),
        Term("GPU blocks", "blocks", log.num_gpu_blocks, plan_of("num_gpu_blocks")),
        Term("KV cache tokens", "tokens", log.kv_cache_tokens, plan_of("kv_cache_size_tokens")),
        Term("max concurrency", "x", log.max_concurrency, plan_of("max_concurrency")),
    ]
    return [t for t in terms if t.log is not None or (t.plan is not None and t.plan != 0)]
