"""Read a vLLM boot log, compare it with the plan term by term, and say what to change.

``kvplan diagnose vllm.log --model llama-3.1-8b --gpu h100`` parses the startup lines of both
engines (V0: ``# GPU blocks: N``; V1: ``Model loading took``, ``Available KV cache memory``,
``GPU KV cache size``, ``Maximum concurrency``, the memory-profiling breakdown, CUDA-graph
capture, the "estimated maximum model length" error) and the runtime lines (``GPU KV cache
usage``, preemption warnings, prefix-cache hit rates, CUDA OOM). Settings the log states (model,
max_seq_len, TP, gpu_memory_utilization, GPU total) fill in what the command line leaves out.

Every memory figure a log prints is GiB rounded to 0.01 (``format_gib``), so a logged value is
exact only to +-0.005 GiB; comparisons allow for that.
"""

from __future__ import annotations

import ast
import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import InputFileError, KvplanError
from planner.files import read_text_file
from planner.model.specs import KVDtype

if TYPE_CHECKING:
    from planner.deployment import Gpu
    from planner.recommend import Plan

GIB = 1 << 30
MIB = 1 << 20
MAX_LOG_BYTES = 50 << 20
LOG_ROUNDING_BYTES = GIB // 200  # format_gib rounds to 0.01 GiB: +-0.005 GiB
PINNED_PCT = 95.0  # "KV usage pinned near 100 %"
LOW_PCT = 50.0  # "usage under 50 %"
MIN_SAMPLES = 3  # runtime stat lines needed before judging usage


class LogFileError(InputFileError):
    """The log cannot be read (missing, binary, too large): exit 2."""


class NothingRecognisedError(KvplanError):
    """The file is text but holds no vLLM line kvplan knows."""


# --------------------------------------------------------------------------- parsing


@dataclass
class BootLog:
    """What a vLLM log states, in bytes (from its GiB) and counts; None when not logged.

    ``lines`` maps each fact to the 1-based line it came from (the last occurrence wins: a log
    with several boots describes the last one).
    """

    engine: str | None = None  # "V1" or "V0"
    version: str | None = None
    model: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    total_gpu_bytes: int | None = None
    requested_bytes: int | None = None
    weights_bytes: int | None = None
    activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    consumed_bytes: int | None = None  # weights + non-torch, as vLLM >= 0.2x logs it
    cuda_graph_bytes: int | None = None
    cuda_graph_capture_bytes: int | None = None  # "Graph capturing finished ..., took X GiB"
    available_kv_bytes: int | None = None
    num_gpu_blocks: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_len: int | None = None
    error_max_model_len: int | None = None
    error_needed_bytes: int | None = None
    error_available_bytes: int | None = None
    estimated_max_model_len: int | None = None
    no_kv_memory: bool = False
    oom_tried_bytes: int | None = None
    oom_free_bytes: int | None = None
    oom_reserved_unallocated_bytes: int | None = None
    kv_usage_pct: list[float] = field(default_factory=list)
    max_waiting: int = 0
    prefix_hit_pct: list[float] = field(default_factory=list)
    preemptions: int = 0
    lines: dict[str, int] = field(default_factory=dict)
    recognised: int = 0

    @property
    def has_startup(self) -> bool:
        return any(
            v is not None
            for v in (
                self.available_kv_bytes,
                self.num_gpu_blocks,
                self.kv_cache_tokens,
                self.weights_bytes,
                self.estimated_max_model_len,
            )
        )


def _float(text: str) -> float:
    """A logged number; ValueError for what is not one (``1.2.3``, ``.``, 400 digits): the line
    is then not recognised."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text[:20]!r}")
    return value


def _gib(text: str, unit: str = "GiB") -> int:
    """Bytes of a logged size (vLLM's V0 ``GB`` is GiB: it divides by 2**30)."""
    scale = MIB if unit.lower().startswith("m") else GIB
    value = _float(text) * scale
    if not math.isfinite(value):
        raise ValueError(f"not a size: {text[:20]!r}")
    return round(value)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


_NUM = r"(-?[\d.]+)"
Handler = Callable[[BootLog, "re.Match[str]", int], None]


def _many(*pairs: tuple[str, Callable[[re.Match[str]], Any]]) -> Handler:
    def handler(log: BootLog, m: re.Match[str], line: int) -> None:
        values = [(name, convert(m)) for name, convert in pairs]  # all parse, or none is set
        for name, value in values:
            setattr(log, name, value)
            log.lines[name] = line

    return handler


def _set(name: str, convert: Callable[[re.Match[str]], Any]) -> Handler:
    return _many((name, convert))


def _g(i: int, unit: int | None = None) -> Callable[[re.Match[str]], int]:
    return lambda m: _gib(m.group(i), m.group(unit) if unit else "GiB")


def _config(log: BootLog, m: re.Match[str], line: int) -> None:
    """``Initializing a V1 LLM engine (v0.10.1) with config: model='...', max_seq_len=...``."""
    log.engine = "V0" if "an LLM engine" in m.group(0) else "V1"
    log.version = m.group(1)
    pairs = dict(re.findall(r"(\w+)=('[^']*'|[^,]+)", m.string[m.end() :]))
    model = pairs.get("model", "").strip("'")
    if model:
        log.model = model
        log.lines["model"] = line
    for key, name in (
        ("max_seq_len", "max_model_len"),
        ("tensor_parallel_size", "tp"),
        ("pipeline_parallel_size", "pp"),
        ("kv_cache_dtype", "kv_cache_dtype"),
        ("enforce_eager", "enforce_eager"),
        ("enable_prefix_caching", "enable_prefix_caching"),
    ):
        if key in pairs:
            log.settings[name] = _literal(pairs[key].strip())
            log.lines[name] = line


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text.strip("'")


def _non_default(log: BootLog, m: re.Match[str], line: int) -> None:
    """``non-default args: {'model': ..., 'max_model_len': 16000, ...}`` (newer vLLM)."""
    if len(m.group(1)) > 20_000:
        return
    args = _literal(m.group(1))
    if not isinstance(args, dict):
        return
    if isinstance(args.get("model"), str):
        log.model = args["model"]
        log.lines["model"] = line
    names = {"tensor_parallel_size": "tp", "pipeline_parallel_size": "pp"}
    for key, value in args.items():
        name = names.get(key, key)
        if name in _SETTINGS and isinstance(value, int | float | str | bool):
            log.settings[name] = value
            log.lines[name] = line


_SETTINGS = (
    "max_model_len",
    "tp",
    "pp",
    "kv_cache_dtype",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enforce_eager",
    "enable_prefix_caching",
    "block_size",
)


def _gmu(log: BootLog, m: re.Match[str], line: int, gmu: str, requested: str) -> None:
    fraction, requested_bytes = _float(gmu), _gib(requested)
    log.settings["gpu_memory_utilization"] = fraction
    log.lines["gpu_memory_utilization"] = line
    log.requested_bytes = requested_bytes
    log.lines["requested_bytes"] = line


def _v0_budget(log: BootLog, m: re.Match[str], line: int) -> None:
    """``total_gpu_memory (23.58GiB) x gpu_memory_utilization (0.90) = 21.22GiB`` (V0)."""
    total = _gib(m.group(1))
    _gmu(log, m, line, m.group(2), m.group(3))
    log.total_gpu_bytes = total
    log.lines["total_gpu_bytes"] = line


def _usage(log: BootLog, m: re.Match[str], line: int) -> None:
    log.kv_usage_pct.append(_float(m.group(1)))
    log.lines.setdefault("kv_usage_first", line)
    log.lines["kv_usage_last"] = line
    waiting = re.search(r"(?:Waiting|Pending): (\d+) reqs", m.string)
    if waiting:
        log.max_waiting = max(log.max_waiting, int(waiting.group(1)))
    hit = re.search(r"[Pp]refix cache hit rate: (?:GPU: )?([\d.]+)%", m.string)
    if hit:
        with contextlib.suppress(ValueError):
            log.prefix_hit_pct.append(_float(hit.group(1)))


def _preempted(log: BootLog, m: re.Match[str], line: int) -> None:
    log.preemptions += 1
    log.lines.setdefault("preemption_first", line)
    total = re.search(r"total_num_cumulative_preemption=(\d+)", m.string)
    if total:
        log.preemptions = max(log.preemptions, int(total.group(1)))


def _oom(log: BootLog, m: re.Match[str], line: int) -> None:
    log.oom_tried_bytes = _gib(m.group(1), m.group(2))
    log.lines["oom"] = line
    text = m.string
    with contextlib.suppress(ValueError):  # the optional figures, each on its own
        free = re.search(r"of which ([\d.]+) (GiB|MiB) is free", text)
        if free:
            log.oom_free_bytes = _gib(free.group(1), free.group(2))
    with contextlib.suppress(ValueError):
        unallocated = re.search(r"([\d.]+) (GiB|MiB) is reserved by PyTorch but unallocated", text)
        if unallocated:
            log.oom_reserved_unallocated_bytes = _gib(unallocated.group(1), unallocated.group(2))
    with contextlib.suppress(ValueError):
        total = re.search(r"total capacity of ([\d.]+) GiB", text)
        if total and log.total_gpu_bytes is None:
            log.total_gpu_bytes = _gib(total.group(1))


def _v0_profile(log: BootLog, m: re.Match[str], line: int) -> None:
    """``Memory profiling results: total_gpu_memory=44.53GiB, ..., kv_cache_size=17.11GiB``."""
    values = dict(re.findall(r"(\w+)=([\d.]+)", m.string[m.end() :]))
    for key, name in (
        ("total_gpu_memory", "total_gpu_bytes"),
        ("non_torch_memory", "non_torch_bytes"),
        ("kv_cache_size", "available_kv_bytes"),
    ):
        if key in values:
            with contextlib.suppress(ValueError):
                setattr(log, name, _gib(values[key]))
                log.lines[name] = line
    if "gpu_memory_utilization" in values:
        with contextlib.suppress(ValueError):
            log.settings["gpu_memory_utilization"] = _float(values["gpu_memory_utilization"])
            log.lines["gpu_memory_utilization"] = line
    log.engine = log.engine or "V0"


# (literal that must be in the line, pattern, handler); the literal keeps 50 MiB logs fast.
RULES: list[tuple[str, re.Pattern[str], Handler]] = [
    (
        "with config:",
        re.compile(r"Initializing (?:a V1 LLM engine|an LLM engine) \(v([^)]+)\) with config:"),
        _config,
    ),
    ("non-default args", re.compile(r"non-default args: (\{.*\})"), _non_default),
    (
        "took",
        re.compile(rf"(?:Model loading|Loading model weights) took {_NUM} ?(GiB|GB)"),
        _set("weights_bytes", _g(1)),
    ),
    (
        "Available KV cache memory",
        re.compile(rf"Available KV cache memory: {_NUM} ?GiB"),
        _set("available_kv_bytes", _g(1)),
    ),
    (
        "GPU KV cache size",
        re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
        _set("kv_cache_tokens", lambda m: _int(m.group(1))),
    ),
    (
        "Maximum concurrency",
        re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x?"),
        _many(
            ("concurrency_len", lambda m: _int(m.group(1))),
            ("max_concurrency", lambda m: _float(m.group(2))),
        ),
    ),
    (
        "blocks:",
        re.compile(r"# (?:GPU|gpu|cuda|CUDA) blocks: (\d+), # CPU blocks: (\d+)"),
        _set("num_gpu_blocks", lambda m: int(m.group(1))),
    ),
    # V1 DEBUG: "Memory profiling takes 5.12 seconds. Total non KV cache memory: 19.88GiB;
    # torch peak memory increase: 4.76GiB; non-torch forward increase memory: 0.13GiB; ..."
    (
        "torch peak memory increase",
        re.compile(rf"torch peak memory increase: {_NUM} ?GiB"),
        _set("activation_bytes", _g(1)),
    ),
    (
        "non-torch",
        re.compile(
            rf"(?:non-torch forward increase memory|Total non-torch memory used): {_NUM} ?GiB"
        ),
        _set("non_torch_bytes", _g(1)),
    ),
    ("weights memory:", re.compile(rf"weights memory: {_NUM} ?GiB"), _set("weights_bytes", _g(1))),
    # vLLM >= 0.11: "Actual usage is 14.99 GiB for weight, 4.76 GiB for peak activation, ..."
    (
        "for weight,",
        re.compile(
            rf"Actual usage is {_NUM} GiB for weight, {_NUM} GiB for peak activation, "
            rf"{_NUM} GiB for non-torch memory, and {_NUM} GiB for CUDAGraph memory"
        ),
        _many(
            ("weights_bytes", _g(1)),
            ("activation_bytes", _g(2)),
            ("non_torch_bytes", _g(3)),
            ("cuda_graph_bytes", _g(4)),
        ),
    ),
    (
        "for consumed memory",
        re.compile(
            rf"Actual usage is {_NUM} GiB for consumed memory \(weights \+ non-torch\), "
            rf"{_NUM} GiB for peak activation, and {_NUM} GiB for CUDAGraph memory"
        ),
        _many(
            ("consumed_bytes", _g(1)),
            ("activation_bytes", _g(2)),
            ("cuda_graph_bytes", _g(3)),
        ),
    ),
    (
        "Free memory on device",
        re.compile(rf"Free memory on device \({_NUM}/{_NUM} GiB\) on startup"),
        _set("total_gpu_bytes", _g(2)),
    ),
    (
        "Desired GPU memory utilization",
        re.compile(r"Desired GPU memory utilization is \(([\d.]+), ([\d.]+) GiB\)"),
        lambda log, m, line: _gmu(log, m, line, m.group(1), m.group(2)),
    ),
    (
        "Requested memory",
        re.compile(r"Requested memory: ([\d.]+) \(util\), ([\d.]+) GiB"),
        lambda log, m, line: _gmu(log, m, line, m.group(1), m.group(2)),
    ),
    # V0 0.6.4+: "the current vLLM instance can use total_gpu_memory (39.38GiB) x
    # gpu_memory_utilization (0.90) = 35.44GiB" / "model weights take 14.25GiB; ..."
    (
        "x gpu_memory_utilization",
        re.compile(
            r"total_gpu_memory \(([\d.]+) ?GiB\) x gpu_memory_utilization \(([\d.]+)\) = "
            r"([\d.]+) ?GiB"
        ),
        _v0_budget,
    ),
    (
        "model weights take",
        re.compile(rf"model weights take {_NUM} ?GiB"),
        _set("weights_bytes", _g(1)),
    ),
    (
        "non_torch_memory takes",
        re.compile(rf"non_torch_memory takes {_NUM} ?GiB"),
        _set("non_torch_bytes", _g(1)),
    ),
    (
        "activation peak memory takes",
        re.compile(rf"activation peak memory takes {_NUM} ?GiB"),
        _set("activation_bytes", _g(1)),
    ),
    (
        "reserved for KV Cache is",
        re.compile(rf"reserved for KV Cache is {_NUM} ?GiB"),
        _set("available_kv_bytes", _g(1)),
    ),
    ("Memory profiling results:", re.compile(r"Memory profiling results:"), _v0_profile),
    (
        "Graph capturing finished",
        re.compile(rf"Graph capturing finished in [\d.]+ secs?, took {_NUM} ?GiB"),
        _set("cuda_graph_capture_bytes", _g(1)),
    ),
    (
        "KV cache is needed",
        re.compile(
            rf"max seq len \((\d+)\), \({_NUM} GiB KV cache is needed, which is larger than the "
            rf"available KV cache memory \({_NUM} GiB\)"
        ),
        _many(
            ("error_max_model_len", lambda m: int(m.group(1))),
            ("error_needed_bytes", _g(2)),
            ("error_available_bytes", _g(3)),
        ),
    ),
    (
        "estimated maximum model length is",
        re.compile(r"estimated maximum model length is (\d+)"),
        _set("estimated_max_model_len", lambda m: int(m.group(1))),
    ),
    (  # V0: "The model's max seq len (32768) is larger than the maximum number of tokens ..."
        "maximum number of tokens that can be stored in KV cache",
        re.compile(
            r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be "
            r"stored in KV cache \((\d+)\)"
        ),
        _many(
            ("error_max_model_len", lambda m: int(m.group(1))),
            ("estimated_max_model_len", lambda m: int(m.group(2))),
        ),
    ),
    (
        "No available memory for the cache blocks",
        re.compile(r"No available memory for the cache blocks"),
        _set("no_kv_memory", lambda m: True),
    ),
    ("KV cache usage", re.compile(r"GPU KV cache usage: ([\d.]+)%"), _usage),
    ("is preempted by", re.compile(r"is preempted by PreemptionMode\.\w+"), _preempted),
    (
        "CUDA out of memory",
        re.compile(r"CUDA out of memory\. Tried to allocate ([\d.]+) (GiB|MiB)"),
        _oom,
    ),
]
_PREFILTER = re.compile("|".join(re.escape(lit) for lit, _, _ in RULES))
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def parse_log(text: str) -> BootLog:
    """Every vLLM fact in ``text``; unknown lines are ignored.

    Args:
        text: the log (startup and runtime lines, any prefix: timestamps, ``(EngineCore pid=)``).

    Returns:
        The :class:`BootLog`; ``recognised`` counts the lines that matched.
    """
    log = BootLog()
    for number, raw in enumerate(text.splitlines(), start=1):
        if not _PREFILTER.search(raw):
            continue
        line = _ANSI.sub("", raw)
        matched = False
        for literal, pattern, handler in RULES:
            if literal in line:
                m = pattern.search(line)
                if m:
                    try:
                        handler(log, m, number)
                    except ValueError:  # a number that is not one: not a line kvplan knows
                        continue
                    matched = True
        log.recognised += matched
    if log.engine is None:
        if log.num_gpu_blocks is not None:
            log.engine = "V0"
        elif log.kv_cache_tokens is not None or log.available_kv_bytes is not None:
            log.engine = "V1"
    if log.concurrency_len and "max_model_len" not in log.settings:
        log.settings["max_model_len"] = log.concurrency_len
        log.lines["max_model_len"] = log.lines["concurrency_len"]
    if log.error_max_model_len and "max_model_len" not in log.settings:
        log.settings["max_model_len"] = log.error_max_model_len
        log.lines["max_model_len"] = log.lines["error_max_model_len"]
    return log


# --------------------------------------------------------------------------- comparison


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
class Finding:
    """A conclusion with the numbers behind it (``data``, integer bytes) and what to change.

    ``kind`` names the rule: ``budget`` (which term explains the KV difference), ``layout``,
    ``startup-max-len``, ``startup-no-memory``, ``oom-fragmentation``, ``oom``, ``kv-pinned``,
    ``kv-low``, ``prefix-off``, ``prefix-low-hit``, ``matches``.
    """

    kind: str
    severity: str  # info, warning, error
    data: dict[str, Any]
    fix: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)


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
        findings += _explain(log, the_plan)
    findings += _troubleshoot(log, the_plan, settings)
    return Diagnosis(str(path), log, settings, sources, terms, findings, notes)


def _settings(
    log: BootLog, given: dict[str, Any], notes: list[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The plan's settings: the command line's, else the log's (a value the log states that
    vLLM could not have run with is left out, with a note), else vLLM's defaults."""
    settings: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in dict.fromkeys((*given, *_SETTINGS)):
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


def _explain(log: BootLog, p: Plan) -> list[Finding]:
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
        terms.append(("activation peak", log.activation_bytes, cap.activation_peak_bytes))
        if log.engine != "V0":  # V0 captured graphs after sizing the cache (the plan has 0)
            terms.append(("CUDA graphs", log.cuda_graph_bytes, cap.cuda_graph_bytes))
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
                "budget" if abs(difference) > 2 * LOG_ROUNDING_BYTES else "matches",
                "info",
                {
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
        per_token_plan = cap.bytes_per_block / block
        # tokens = int(num_blocks / blocks_per_request * max_model_len); num_blocks = kv // bpb
        expect_lo = int((lo // cap.bytes_per_block) / cap.blocks_per_request * cap.max_model_len)
        expect_hi = int((hi // cap.bytes_per_block) / cap.blocks_per_request * cap.max_model_len)
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
        "layout-matches" if ok else "layout",
        "info" if ok else "warning",
        {
            "log_tokens": logged_tokens,
            "expected_tokens_low": expect_lo,
            "expected_tokens_high": expect_hi,
            "log_bytes_per_token": round(per_token_log, 1),
            "plan_bytes_per_token": round(per_token_plan, 1),
            "ratio": round(ratio, 3),
            "kv_heads_per_rank": p.estimate.kv_heads_per_rank,
        },
        []
        if ok
        else [
            "compare num_key_value_heads, head_dim, kv_cache_dtype and tp with what vLLM loaded "
            "(a KV-head count read wrongly changes bytes per token by a whole factor)"
        ],
        [line],
    )


def _troubleshoot(log: BootLog, p: Plan | None, s: dict[str, Any]) -> list[Finding]:
    """The troubleshooting table, applied to what the log shows."""
    out: list[Finding] = []
    cap = p.vllm if p else None
    if log.estimated_max_model_len is not None or log.error_max_model_len is not None:
        fix = []
        if log.estimated_max_model_len:
            fix.append(f"max_model_len {log.estimated_max_model_len} (vLLM's estimate)")
        fix += ["kv_cache_dtype fp8", "a higher gpu_memory_utilization or more TP"]
        out.append(
            Finding(
                "startup-max-len",
                "error",
                {
                    "max_model_len": log.error_max_model_len,
                    "needed_bytes": log.error_needed_bytes,
                    "available_bytes": log.error_available_bytes,
                    "estimated_max_model_len": log.estimated_max_model_len,
                    "plan_estimated_max_model_len": cap.estimated_max_model_len if cap else None,
                },
                fix,
                [log.lines.get("estimated_max_model_len") or log.lines["error_max_model_len"]],
            )
        )
    if log.no_kv_memory:
        out.append(
            Finding(
                "startup-no-memory",
                "error",
                {},
                ["a higher gpu_memory_utilization", "more TP", "a smaller max_num_batched_tokens"],
                [log.lines["no_kv_memory"]],
            )
        )
    if log.oom_tried_bytes is not None:
        out.append(_oom_finding(log, p))
    out += _usage_findings(log, p, s)
    return out


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
            "oom-fragmentation",
            "error",
            data,
            [
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (fragmentation)",
                "check the KV-head count: num_key_value_heads in config.json against what the "
                "engine loaded (kvplan's layout check above)",
                "a lower gpu_memory_utilization leaves the allocator room",
            ],
            [log.lines["oom"]],
        )
    return Finding(
        "oom",
        "error",
        data,
        [
            "a lower gpu_memory_utilization",
            "a smaller max_num_batched_tokens (the activation peak)",
            "fewer max_num_seqs",
        ],
        [log.lines["oom"]],
    )


def _usage_findings(log: BootLog, p: Plan | None, s: dict[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    usage = log.kv_usage_pct
    high = sum(u >= PINNED_PCT for u in usage)
    pinned = log.preemptions > 0 or (
        len(usage) >= MIN_SAMPLES and (high * 4 >= len(usage) or max(usage) >= 99.0)
    )
    lines = [n for n in (log.lines.get("kv_usage_first"), log.lines.get("preemption_first")) if n]
    if pinned:
        fix = []
        if p is not None and p.recommended is not None:
            fix.append(
                f"fewer sequences: max_num_seqs {p.recommended.max_num_seqs} keeps "
                f"{p.estimate.max_model_len:,}-token requests at ~90 % of the blocks"
            )
        else:
            fix.append("fewer max_num_seqs")
        fp8 = next((a for a in p.alternatives if "fp8" in a.change), None) if p else None
        fix.append(
            f"fp8 KV (--kv-cache-dtype fp8: {fp8.max_concurrency:.2f}x concurrency)"
            if fp8
            else "fp8 KV (--kv-cache-dtype fp8)"
        )
        fix += [
            "more KV memory: a higher gpu_memory_utilization, or more TP",
            "prefix sharing: enable prefix caching and put the shared part of prompts first",
        ]
        out.append(
            Finding(
                "kv-pinned",
                "warning",
                {
                    "samples": len(usage),
                    "high_samples": high,
                    "peak_pct": max(usage) if usage else None,
                    "preemptions": log.preemptions,
                    "max_waiting": log.max_waiting,
                },
                fix,
                lines,
            )
        )
    elif len(usage) >= MIN_SAMPLES and max(usage) < LOW_PCT:
        gmu = _lower_gmu(log, p, s, max(usage))
        out.append(
            Finding(
                "kv-low",
                "info",
                {"samples": len(usage), "peak_pct": max(usage), "suggested_gmu": gmu},
                [f"gpu_memory_utilization {gmu}" if gmu else "a lower gpu_memory_utilization"],
                lines,
            )
        )
    prefix = s.get("enable_prefix_caching")
    if prefix in (False, "False", "false"):
        out.append(
            Finding(
                "prefix-off",
                "info",
                {},
                [
                    "--enable-prefix-caching",
                    "put the fixed part of the prompt (system prompt, tools) first",
                ],
                [log.lines.get("enable_prefix_caching", 0)],
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
                    "prefix-low-hit",
                    "info",
                    {"mean_hit_pct": round(mean, 1), "samples": len(busy)},
                    ["put the fixed part of the prompt first so requests share whole blocks"],
                    lines,
                )
            )
    return out


def _lower_gmu(log: BootLog, p: Plan | None, s: dict[str, Any], peak_pct: float) -> float | None:
    """The gpu_memory_utilization that keeps the observed peak at 80 % of a smaller cache:
    requested - (available - peak_used / 0.8), over the GPU total, rounded up to 0.01."""
    total = log.total_gpu_bytes or (p.vllm.gpu_memory_bytes if p else None)
    gmu = float(s["gpu_memory_utilization"])
    requested = log.requested_bytes or (math.ceil(total * gmu) if total else None)
    available = log.available_kv_bytes or (p.vllm.available_kv_bytes if p else None)
    if not (total and requested and available):
        return None
    keep = available * peak_pct / 100 / 0.8
    new = math.ceil((requested - (available - keep)) / total * 100) / 100
    return new if new < gmu else None
