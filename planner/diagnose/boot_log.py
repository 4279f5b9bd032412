"""The vLLM boot-log parser: every startup and runtime fact ``kvplan diagnose`` reads.

:func:`parse_log` runs each line through :data:`RULES` (a literal the line must contain, a
pattern, and a handler that stores what it matched on a :class:`BootLog`); lines no rule knows
are ignored. Every memory figure a log prints is GiB rounded to 0.01 (``format_gib``).

With ``--data-parallel-size N`` vLLM runs one engine per DP rank, and each prefixes its lines
``(EngineCore_DP1 pid=...)`` (before 0.10: ``(EngineCore_1 pid=...)``; a rank's TP workers
``(Worker_DP1_TP0 pid=...)``), so every startup figure can come once per rank. A line's rank is
read from that prefix (:func:`rank_of`; none is rank 0): a figure of one GPU's budget
(:data:`RANK_FIELDS`) goes to that rank's :class:`RankFigures`, the rest (settings, errors,
runtime) to the log as a whole.
"""

from __future__ import annotations

import ast
import contextlib
import math
import re
from collections.abc import Callable
from typing import Any

from planner.config import fields as config_fields
from planner.diagnose.log_figures import (
    MAX_DP_RANKS,
    RANK_FIELDS,
    BootLog,
    RankFigures,
    SpecDecodeLog,
)
from planner.units import GIB, MIB


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


def _flag(name: str) -> Handler:
    def handler(log: BootLog, m: re.Match[str], line: int) -> None:
        setattr(log, name, True)
        log.lines[name] = line

    return handler


_consumed_figures = _many(
    ("consumed_bytes", _g(1)),
    ("activation_bytes", _g(2)),
    ("cuda_graph_capture_bytes", _g(3)),
)


def _consumed(log: BootLog, m: re.Match[str], line: int) -> None:
    """vLLM >= 0.27's "Actual usage is X GiB for consumed memory (weights + non-torch), Y GiB
    for peak activation, and Z GiB for CUDAGraph memory": Y holds the subtracted graph
    estimate, Z is the capture after sizing (:class:`BootLog`)."""
    _consumed_figures(log, m, line)
    log.activation_includes_graph_estimate = True


_extended_figures = _many(
    ("num_gpu_blocks", lambda m: int(m.group(1))), ("available_kv_bytes", _g(2))
)


def _extended(log: BootLog, m: re.Match[str], line: int) -> None:
    """ "Extended KV cache to 31166 blocks (60.87 GiB).": the pool itself (the "Available KV
    cache memory" before it is only the address range reserved)."""
    if log.available_kv_bytes is not None:
        log.reserved_kv_bytes = log.available_kv_bytes
    _extended_figures(log, m, line)
    log.measured_pool = True


def _graph_modes(log: BootLog, m: re.Match[str], line: int) -> None:
    """vLLM >= 0.21's "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35
    (largest=256)" (``gpu_model_runner.py`` 0.30.0:6683-6697): each mode's graph count and its
    largest size, in tokens (``ENCODER`` for a vision encoder's graphs)."""
    log.cuda_graph_modes = {
        mode: (int(count), int(largest))
        for mode, count, largest in re.findall(r"([A-Z_]+)=(\d+) \(largest=(\d+)\)", m.group(1))
    }
    log.lines["cuda_graph_modes"] = line


def _config(log: BootLog, m: re.Match[str], line: int) -> None:
    """``Initializing a V1 LLM engine (v0.10.1) with config: model='...', max_seq_len=...``."""
    log.engine = "V0" if "an LLM engine" in m.group(0) else "V1"
    log.version = m.group(1)
    pairs: dict[str, str] = {}
    for key, value in re.findall(r"(\w+)=('[^']*'|[^,]+)", m.string[m.end() :]):
        # the first is the engine's: speculative_config=SpeculativeConfig(method='eagle',
        # model='<the draft>', ...) comes after the target's model='...'
        pairs.setdefault(key, value)
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
    _parallel(log, {"data_parallel_size": _literal(pairs.get("data_parallel_size", "None"))}, line)
    spec = re.search(r"speculative_config=SpeculativeConfig\(([^)]*)\)", m.string)
    if spec:
        found = {k: _literal(v.strip()) for k, v in re.findall(r"(\w+)=('[^']*'|[^,]+)", spec[1])}
        _speculative(log, found.get("method"), found.get("num_spec_tokens"), found.get("model"))


def _speculative(log: BootLog, method: Any, tokens: Any, model: Any) -> None:
    """``--speculative-config`` as the config line or the non-default args state it."""
    if not isinstance(method, str) or not method:
        return
    spec = log.speculative = log.speculative or SpecDecodeLog()
    spec.method = method
    if isinstance(tokens, int) and not isinstance(tokens, bool):
        spec.num_speculative_tokens = tokens
    if isinstance(model, str) and model:
        spec.draft_model = model


def _spec_metrics(log: BootLog, m: re.Match[str], line: int) -> None:
    """``SpecDecoding metrics: Mean acceptance length: 2.37, ..., Accepted: 89 tokens,
    Drafted: 975 tokens, ...`` (the acceptance rate first before vLLM 0.11)."""
    length = _float(m.group(1))
    accepted = re.search(r"Accepted: (\d{1,15}) tokens", m.string)  # a count, not 400 digits
    drafted = re.search(r"Drafted: (\d{1,15}) tokens", m.string)
    spec = log.speculative = log.speculative or SpecDecodeLog()
    spec.mean_acceptance_length.append(length)
    if accepted and drafted:
        spec.accepted_tokens += int(accepted.group(1))
        spec.drafted_tokens += int(drafted.group(1))
    log.lines.setdefault("spec_decode_first", line)


def _parallel(log: BootLog, args: dict[str, Any], line: int) -> None:
    """``data_parallel_size`` and ``enable_expert_parallel`` as the log states them; a DP size
    above 1 and EP on are also settings the plan takes (``dp``, ``enable_expert_parallel``)."""
    size, expert = args.get("data_parallel_size"), args.get("enable_expert_parallel")
    if isinstance(size, int) and not isinstance(size, bool) and 1 <= size <= MAX_DP_RANKS:
        log.data_parallel_size = size
        if size > 1:
            log.settings["dp"], log.lines["dp"] = size, line
    if isinstance(expert, bool):
        log.expert_parallel = expert
        if expert:
            log.settings["enable_expert_parallel"] = True
            log.lines["enable_expert_parallel"] = line


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text.strip("'")  # TypeError: {[1]: 2}, {[1]} (unhashable keys and members)


def _non_default(log: BootLog, m: re.Match[str], line: int) -> None:
    """``non-default args: {'model': ..., 'max_model_len': 16000, ...}`` (newer vLLM).

    vLLM 0.2x prints some values as objects (``'attention_config': AttentionConfig(...)``),
    which are not Python literals: then the top-level ``'key': value`` pairs are read one by
    one (:func:`_top_level_pairs`), and those that are literals kept.
    """
    text = m.group(1)
    if len(text) > 20_000:
        return
    args = _literal(text[: text.rfind("}") + 1])
    if not isinstance(args, dict):
        args = _top_level_pairs(text)
    if not args:
        return
    _parallel(log, args, line)
    spec = args.get("speculative_config")
    if isinstance(spec, dict):
        _speculative(log, spec.get("method"), spec.get("num_speculative_tokens"), spec.get("model"))
    if isinstance(args.get("model"), str):
        log.model = args["model"]
        log.lines["model"] = line
    for key, value in args.items():
        name = _LOG_NAMES.get(str(key))
        scalar = isinstance(value, int | float | str | bool)
        mapping = name in _MAPPINGS and isinstance(value, dict)
        listed = name in _LISTS and isinstance(value, list | tuple)
        if name in _SETTINGS and (scalar or mapping or listed):
            log.settings[name] = value
            log.lines[name] = line


def _top_level_pairs(text: str) -> dict[str, Any]:
    """The ``'key': value`` pairs at the top level of a printed dict whose values are Python
    literals; a nested dict is one value, and the last pair of a line cut short is dropped.

    ``{'model': 'Qwen/Qwen3-30B-A3B', 'attention_config': AttentionConfig(backend=None),
    'data_parallel_size': 3}`` -> ``{'model': 'Qwen/Qwen3-30B-A3B', 'data_parallel_size': 3}``.
    """
    pieces: list[str] = []
    depth, quote, start = 0, "", 1  # text[0] is the dict's "{"
    for i, char in enumerate(text):
        if quote:
            if char == quote and text[i - 1] != "\\":
                quote = ""
            continue
        if char in "'\"":
            quote = char
        elif char in "{[(":
            depth += 1
        elif char in "}])":
            depth -= 1
        if depth == 0 or (char == "," and depth == 1):
            pieces.append(text[start:i])
            start = i + 1
        if depth == 0:
            break
    pairs: dict[str, Any] = {}
    for piece in pieces:
        key, colon, value = piece.partition(":")
        key = key.strip()
        if not (colon and len(key) > 2 and key[0] == key[-1] == "'"):
            continue
        try:
            pairs[key[1:-1]] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue  # an object's repr: AttentionConfig(backend=None)
    return pairs


# The settings a log may state, in the order diagnose lists them: every declared setting with a
# log spelling (planner.config.fields), so diagnose reads what estimate takes.
SETTING_KEYS: tuple[str, ...] = config_fields.log_keys()
_SETTINGS = SETTING_KEYS
# logged as dicts (JSON settings) or lists (module names)
_MAPPINGS = config_fields.names_of("json")
_LISTS = config_fields.names_of("modules")
# the log's key -> the setting
_LOG_NAMES = {s.log: s.name for s in config_fields.SETTINGS if s.log}


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
    prompt = re.search(r"Avg prompt throughput: ([\d.]{1,12}) tokens/s", m.string)
    generation = re.search(r"Avg generation throughput: ([\d.]{1,12}) tokens/s", m.string)
    if prompt and generation:
        with contextlib.suppress(ValueError):
            log.throughput.append((_float(prompt.group(1)), _float(generation.group(1))))
    running = re.search(r"Running: (\d{1,9}) reqs", m.string)
    if running:
        log.max_running = max(log.max_running, int(running.group(1)))
    log.milestones.setdefault("serving", line)
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


def _banner(log: BootLog, m: re.Match[str], line: int) -> None:
    """``vLLM API server version 0.11.0``: the release, wherever it is printed (a log that
    fails before the engine's config line has only this)."""
    if log.version is None:
        log.version = m.group(1)
        log.lines["version"] = line


def _sampler(choice: str) -> Handler:
    """The top-k/top-p sampler ``TopKTopPSampler.__init__`` chose, as ``--sampler`` names it
    (``v1/sample/ops/topk_topp_sampler.py``): "Using FlashInfer for top-p & top-k sampling."
    (info, 0.10.1.1-0.33: :51 in 0.18.1/0.19.0) is ``flashinfer``; vLLM's own is ``native``:
    through 0.11.0 the warnings "FlashInfer is not available. Falling back to the
    PyTorch-native implementation of top-p & top-k sampling. ..." and "FlashInfer is
    available, but it is not enabled. Falling back to the PyTorch-native implementation of
    top-p & top-k sampling. ..." (0.11.0:62-71) or "FlashInfer version >= 0.2.3 required.
    Falling back to default sampling implementation." (0.11.0:43-45); from 0.11.1 only the
    DEBUG line "FlashInfer top-p/top-k sampling is available but disabled by default. ..."
    (0.18.1/0.19.0:57-60). ROCm's aiter sampler is neither and is not read."""

    def handler(log: BootLog, m: re.Match[str], line: int) -> None:
        log.sampler = choice
        log.lines["sampler"] = line

    return handler


def _mxfp4(log: BootLog, m: re.Match[str], line: int) -> None:
    """The MoE kernel ``get_mxfp4_backend`` chose for MXFP4 experts (gpt-oss), as
    ``--mxfp4-backend`` names it: "Using Marlin backend" / "Using Triton backend"
    (``quantization/mxfp4.py`` 0.11.0:98/101, 0.18.1:166/169; 0.18.1:102/105 prefix
    "[get_mxfp4_backend_with_lora] "). On CUDA Marlin is what an install without
    triton_kernels runs on Hopper, and it pads the experts (planner.weights); FlashInfer's and
    ROCm's CK lines name other kernels and are not read."""
    log.mxfp4_backend = m.group(1).lower()
    log.lines["mxfp4_backend"] = line


# Start-up milestones, in the order vLLM V1 reaches them (gpu_worker: load_model,
# determine_available_memory, initialize_from_config, compile_or_warm_up_model), each by a line
# it prints once the step is done or under way; "serving" last.
STAGES = (
    ("Starting to load model", "weights load"),
    ("Model loading took", "profiling"),
    ("Loading model weights took", "profiling"),
    ("Available KV cache memory", "KV allocation"),
    ("# GPU blocks:", "KV allocation"),
    ("GPU KV cache size", "KV allocation"),
    ("Capturing CUDA graph", "CUDA-graph capture"),
    ("Graph capturing finished", "sampler warm-up"),
    ("init engine (profile, create kv cache, warmup model) took", "serving"),
    ("Starting vLLM API server", "serving"),
    ("Application startup complete", "serving"),
    ("Avg prompt throughput", "serving"),
)


def _milestone(stage: str) -> Handler:
    def handler(log: BootLog, m: re.Match[str], line: int) -> None:
        log.milestones.setdefault(stage, line)
        rank = re.search(r"\((?:\w*_)?PP(\d{1,3})(?=[_\s])[^)]*pid=", m.string)
        if rank and stage == "profiling":
            size = re.search(rf"took {_NUM} ?(?:GiB|GB)", m.string)
            if size:
                log.pp_weights[int(rank.group(1))] = _gib(size.group(1))

    handler.quiet = True  # type: ignore[attr-defined]  # a milestone alone: not recognised
    return handler


# vLLM's own error lines: an exception's last line, the sampler warm-up's message
_ERROR = re.compile(
    r"\b((?:torch\.)?(?:OutOfMemoryError|(?:torch\.cuda\.)?OutOfMemoryError|RuntimeError|"
    r"ValueError|AssertionError|NotImplementedError|KeyError|TypeError|"
    r"torch\.AcceleratorError)): (.{1,400})"
)


def _error(log: BootLog, m: re.Match[str], line: int) -> None:
    """The first error line vLLM printed, as it printed it (cut at 400 characters)."""
    if log.error is None:
        log.error = m.group(0).strip()
        log.lines["error"] = line


# (literal that must be in the line, pattern, handler); the literal keeps 50 MiB logs fast.
RULES: list[tuple[str, re.Pattern[str], Handler]] = [
    (
        "with config:",
        re.compile(r"Initializing (?:a V1 LLM engine|an LLM engine) \(v([^)]+)\) with config:"),
        _config,
    ),
    ("non-default args", re.compile(r"non-default args: (\{.*)"), _non_default),
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
    # vLLM >= 0.34's extensible KV cache: the pool measured after warm-up, logged after the
    # reservation's "Available KV cache memory" (v1/worker/extensible_kv_cache.py 0.34.0:536-540)
    (
        "Extended KV cache to",
        re.compile(rf"Extended KV cache to (\d+) blocks \({_NUM} GiB\)"),
        _extended,
    ),
    (
        "Current kv cache memory in use",
        re.compile(rf"Current kv cache memory in use is {_NUM} ?GiB"),
        _set("kv_in_use_bytes", _g(1)),
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
        _consumed,
    ),
    (
        "Estimated CUDA graph memory",
        re.compile(rf"Estimated CUDA graph memory: {_NUM} GiB total"),
        _set("cuda_graph_estimate_bytes", _g(1)),
    ),
    (
        "Profiling CUDA graph memory",
        re.compile(r"Profiling CUDA graph memory: ((?:[A-Z_]+=\d+ \(largest=\d+\)(?:, )?)+)"),
        _graph_modes,
    ),
    (
        "CUDA graph pool memory",
        re.compile(rf"CUDA graph pool memory: {_NUM} GiB \(actual\), {_NUM} GiB \(estimated\)"),
        _many(("cuda_graph_capture_bytes", _g(1)), ("cuda_graph_estimate_bytes", _g(2))),
    ),
    (
        "CUDA graph memory profiling is disabled",
        re.compile(r"CUDA graph memory profiling is disabled"),
        _flag("graph_estimate_disabled"),
    ),
    (
        "Free memory on device",
        re.compile(rf"Free memory on device (?:\S+ )?\({_NUM}/{_NUM} GiB\) on startup"),
        _many(("startup_free_bytes", _g(1)), ("total_gpu_bytes", _g(2))),
    ),
    ("version", re.compile(r"vLLM API server version ([\w.+-]+)"), _banner),
    (
        "top-p & top-k sampling",
        re.compile(r"Using FlashInfer for top-p & top-k sampling"),
        _sampler("flashinfer"),
    ),
    (
        "top-p & top-k sampling",
        re.compile(r"Falling back to the PyTorch-native implementation of top-p & top-k"),
        _sampler("native"),
    ),
    (
        "FlashInfer version >= 0.2.3 required",
        re.compile(r"FlashInfer version >= 0\.2\.3 required\. Falling back to default sampling"),
        _sampler("native"),
    ),
    (
        "top-p/top-k sampling is available but disabled",
        re.compile(r"FlashInfer top-p/top-k sampling is available but disabled by default"),
        _sampler("native"),
    ),
    (
        "mxfp4.py",
        re.compile(
            r"\[mxfp4\.py:\d+\] (?:\[get_mxfp4_backend_with_lora\] )?Using (Marlin|Triton) backend"
        ),
        _mxfp4,
    ),
    *[(literal, re.compile(re.escape(literal)), _milestone(stage)) for literal, stage in STAGES],
    ("Error: ", _ERROR, _error),
    (
        "Engine core initialization failed",
        re.compile(r"Engine core initialization failed.*"),
        _error,
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
    (
        "Encoder cache will be initialized",
        re.compile(
            r"Encoder cache will be initialized with a budget of (\d+) tokens, and profiled "
            r"with (\d+) (\w+) items"
        ),
        _many(
            ("encoder_budget_tokens", lambda m: int(m.group(1))),
            ("encoder_profile_items", lambda m: int(m.group(2))),
            ("encoder_profile_modality", lambda m: m.group(3)),
        ),
    ),
    ("KV cache usage", re.compile(r"GPU KV cache usage: ([\d.]+)%"), _usage),
    (
        "SpecDecoding metrics",
        re.compile(r"SpecDecoding metrics: .*?Mean acceptance length: ([\d.]+)"),
        _spec_metrics,
    ),
    ("is preempted by", re.compile(r"is preempted by PreemptionMode\.\w+"), _preempted),
    (
        "CUDA out of memory",
        re.compile(r"CUDA out of memory\. Tried to allocate ([\d.]+) (GiB|MiB)"),
        _oom,
    ),
]
PREFILTER = re.compile("|".join(re.escape(lit) for lit, _, _ in RULES))
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# "(EngineCore_DP1 pid=5302)", "(Worker_DP1_TP0_EP2 pid=2303)", vLLM 0.8/0.9 "(EngineCore_1 pid=9)"
_RANK = re.compile(r"\((?:[A-Za-z]+_DP(\d+)(?:_[A-Z]+\d+)*|EngineCore_(\d+)) pid=\d+")


def rank_of(line: str) -> int:
    """The data-parallel rank whose process printed ``line``, from vLLM's process prefix; 0
    for a line without one (a single engine's, the API server's, an unprefixed line).

    ``rank_of("(Worker_DP1_TP0_EP2 pid=2303) INFO ... Available KV cache memory: 49.58 GiB")``
    is 1; ``(EngineCore pid=1)`` (vLLM 0.2x without DP) and ``(Worker_TP1 pid=2)`` are 0, and
    so is a rank of :data:`MAX_DP_RANKS` or more (a corrupt prefix).
    """
    m = _RANK.search(line)
    if not m:
        return 0
    digits = m.group(1) or m.group(2)
    if len(digits) > len(str(MAX_DP_RANKS)) or int(digits) >= MAX_DP_RANKS:
        return 0  # a corrupt prefix
    return int(digits)


def parse_log(text: str) -> BootLog:
    """Every vLLM fact in ``text``; unknown lines are ignored.

    Args:
        text: the log (startup and runtime lines, any prefix: timestamps, ``(EngineCore pid=)``).

    Returns:
        The :class:`BootLog`; ``recognised`` counts the lines that matched.
    """
    log = BootLog()
    for number, raw in enumerate(text.splitlines(), start=1):
        if not PREFILTER.search(raw):
            continue
        line = _ANSI.sub("", raw)
        rank = rank_of(line)
        matched = False
        for literal, pattern, handler in RULES:
            if literal in line:
                m = pattern.search(line)
                if m:
                    before = _budget(log) if rank else None
                    try:
                        handler(log, m, number)
                    except ValueError:  # a number that is not one: not a line kvplan knows
                        continue
                    if before is not None:
                        _move_to_rank(log, before, rank)
                    matched = matched or not getattr(handler, "quiet", False)
        log.recognised += matched
    if log.data_parallel:
        _rank_zero(log)
    else:
        log.ranks.clear()
    for figures in log.ranks.values():
        _available_from_in_use(figures)
    log.available_from_in_use = _available_from_in_use(log)
    if log.engine is None:
        if log.num_gpu_blocks is not None:
            log.engine = "V0"
        elif log.kv_cache_tokens is not None or log.available_kv_bytes is not None:
            log.engine = "V1"
    if len(log.pp_weights) > 1:  # PP ranks: the plan is the most-loaded stage's
        log.weights_bytes = max(log.pp_weights.values())
    if log.concurrency_len and "max_model_len" not in log.settings:
        log.settings["max_model_len"] = log.concurrency_len
        log.lines["max_model_len"] = log.lines["concurrency_len"]
    if log.error_max_model_len and "max_model_len" not in log.settings:
        log.settings["max_model_len"] = log.error_max_model_len
        log.lines["max_model_len"] = log.lines["error_max_model_len"]
    return log


def _available_from_in_use(figures: BootLog | RankFigures) -> bool:
    """Take "Current kv cache memory in use" as the available KV (the same figure,
    :class:`BootLog`) where no "Available KV cache memory" line gave it; whether it did."""
    if figures.available_kv_bytes is not None or figures.kv_in_use_bytes is None:
        return False
    figures.available_kv_bytes = figures.kv_in_use_bytes
    figures.lines["available_kv_bytes"] = figures.lines.get("kv_in_use_bytes", 0)
    return True


def _budget(log: BootLog) -> list[tuple[Any, int | None]]:
    """The log's :data:`RANK_FIELDS`, each value with its line."""
    return [(getattr(log, name), log.lines.get(name)) for name in RANK_FIELDS]


def _move_to_rank(log: BootLog, before: list[tuple[Any, int | None]], rank: int) -> None:
    """What a line of DP rank ``rank`` set of the budget is that rank's: move it from the log
    to ``log.ranks[rank]`` and put back what the log had."""
    for (name, key), (value, line) in zip(RANK_FIELDS.items(), before, strict=True):
        new_value, new_line = getattr(log, name), log.lines.get(name)
        if new_value == value and new_line == line:
            continue
        figures = log.ranks.setdefault(rank, RankFigures(rank))
        setattr(figures, key, new_value)
        figures.lines[key] = new_line or 0
        setattr(log, name, value)
        if line is None:
            log.lines.pop(name, None)
        else:
            log.lines[name] = line


def _rank_zero(log: BootLog) -> None:
    """In a data-parallel log, the budget the log kept is rank 0's (unprefixed lines count as
    rank 0's); a figure rank 0 did not log becomes the lowest rank's that did."""
    figures = RankFigures(0)
    for name, key in RANK_FIELDS.items():
        if getattr(log, name) is not None:
            setattr(figures, key, getattr(log, name))
            figures.lines[key] = log.lines.get(name, 0)
    if figures.lines:
        log.ranks[0] = figures
    log.ranks = dict(sorted(log.ranks.items()))
    for name, key in RANK_FIELDS.items():
        if getattr(log, name) is None:
            lowest = next((f for f in log.ranks.values() if getattr(f, key) is not None), None)
            if lowest is not None:
                setattr(log, name, getattr(lowest, key))
                log.lines[name] = lowest.lines[key]
