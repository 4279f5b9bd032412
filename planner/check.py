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

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from planner import files
from planner.config import fields as config_fields
from planner.deployment import ServeSettings, as_yaml, render_changes
from planner.errors import InputFileError, KvplanError, SettingError, UsageError, WorkloadError
from planner.files import MarkedMap as _Map
from planner.model.specs import Engine, KVDtype
from planner.units import MAX_COUNT

if TYPE_CHECKING:
    from planner.budget import EngineCapacity
    from planner.deployment import Deployment
    from planner.errors import Rule
    from planner.gpus import Gpu
    from planner.kv_layout import KVEstimate
    from planner.model.load import LoadedModel
    from planner.recommend import Plan, Refusal
    from planner.simulate.engine import SimResult
    from planner.simulate.workload import Workload
    from planner.weights import Weights

T = TypeVar("T")
E = TypeVar("E", bound=Exception)
MAX_PLANS_BYTES = 1 << 20  # 1 MiB: a plans file is a few KiB
ENGINES = (Engine.VLLM, Engine.SGLANG, Engine.TRTLLM)
VLLM_ONLY = ("max_num_batched_tokens", "enable_prefix_caching", "enforce_eager")


class PlansFileError(InputFileError):
    """The plans file cannot be read as a whole (missing, binary, too large, not YAML)."""


def load_yaml(path: Path, *, limit_bytes: int = MAX_PLANS_BYTES) -> Any:
    """Parse a plans file (see :func:`planner.files.load_yaml`); errors name the file and line."""
    return files.load_yaml(  # every value is range-checked by name: deployments[0] (a).tp
        path, limit_bytes=limit_bytes, what="plans file", error=PlansFileError, range_checked=False
    )


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class Problem:
    """One validation error: file, line, where (``deployments[2].tp``) and what is wrong."""

    file: str
    line: int
    where: str
    message: str
    index: int | None = None  # which deployment, None for the top level

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.where}: {self.message}"


@dataclass(frozen=True)
class Requirements:
    """What a deployment must reach besides holding one ``max_model_len`` request; None: not
    required.

    Attributes:
        min_concurrency: requests of ``max_model_len`` tokens that fit at once (8 means the
            KV cache holds 8 x 16,384 tokens for a 16,384-token ``max_model_len``).
        min_kv_tokens: KV cache size in tokens, of one DP rank (what vLLM logs per engine).
        min_cluster_kv_tokens: KV cache size in tokens of the whole deployment (dp pools).
        max_kv_usage: the most of the KV pool that ``max_num_seqs`` full-length requests may
            take: 0.9 with 16 x 1,024 blocks asks for at least 18,205 usable blocks.
        max_preemptions: the most preemptions while replaying the entry's workload (0: none).
        max_kv_usage_p90: the most KV usage (of the usable blocks) 90 % of the replay's time.
        max_ttft_p90_s: the longest 90th-percentile time to first token, in seconds.
        min_output_tokens_per_s: the least output tokens per second over the replay.

    The last four are :data:`WORKLOAD_KEYS`: they need a workload.
    """

    min_concurrency: float | None = None
    min_kv_tokens: int | None = None
    max_kv_usage: float | None = None
    min_cluster_kv_tokens: int | None = None
    max_preemptions: int | None = None
    max_kv_usage_p90: float | None = None
    max_ttft_p90_s: float | None = None
    min_output_tokens_per_s: float | None = None

    @property
    def workload_keys(self) -> list[str]:
        """The workload requirements this entry sets, in :data:`WORKLOAD_KEYS` order."""
        return [key for key in WORKLOAD_KEYS if getattr(self, key) is not None]


# The requirements a workload replay answers (Requirements fields and plans-file keys).
WORKLOAD_KEYS = ("max_preemptions", "max_kv_usage_p90", "max_ttft_p90_s", "min_output_tokens_per_s")


@dataclass(frozen=True)
class Entry:
    """One validated deployment of a plans file: what :func:`check_deployment` plans.

    Attributes:
        name: the entry's unique ``name``.
        line: the line of its first key, for reports.
        model: the model argument as :func:`planner.model.load.load_model` takes it (a
            ``./relative`` path already resolved against the plans file's folder).
        gpu: the catalog GPU, a ``gpu_memory`` total ("custom"), or the catalog GPU with that
            total (:func:`planner.gpus.resolve_gpu`).
        settings: the engine flags; a ``headroom`` percentage is already bytes of ``gpu``'s
            memory (5% of an H100's 85,018,877,624 B is 4,250,943,881 B).
        requirements: what it must reach.
        workload: the workload replayed on it (its own ``workload``, else the top level's;
            loaded once per file), or None. Its ``source`` is the path as the plans file's
            folder joins it: ``workloads/chat.yaml`` in ``deploy/plans.yaml`` is
            ``deploy/workloads/chat.yaml``.
    """

    name: str
    line: int
    model: str
    gpu: Gpu
    settings: ServeSettings
    requirements: Requirements = field(default_factory=Requirements)
    workload: Workload | None = None


# The keys a plans file reads itself, with what each is; the serve settings between them are
# the declarations' (planner.config.fields), so a plans file takes every setting the CLI does.
_HEAD: dict[str, str] = {
    "name": "unique name of the deployment",
    "model": "catalog name, hub id or ./path/to/model",
    "gpu": "catalog GPU (kvplan gpus)",
    "gpu_memory": "total memory of a GPU not in the catalog",
}
_TAIL: dict[str, str] = {
    "min_concurrency": "required requests at max_model_len",
    "min_kv_tokens": "required KV cache tokens (per DP rank)",
    "min_cluster_kv_tokens": "required KV cache tokens of all dp ranks together",
    "max_kv_usage": "largest KV usage at max_num_seqs full-length requests",
    "headroom": "memory kept free of KV cache: bytes, 2GiB or 5%",
    "workload": "trace (.jsonl) or spec (.yaml) to replay, relative to the plans file",
    "max_preemptions": "most preemptions replaying the workload",
    "max_kv_usage_p90": "largest p90 KV usage replaying the workload",
    "max_ttft_p90_s": "longest p90 time to first token replaying the workload, seconds",
    "min_output_tokens_per_s": "least output tokens/s replaying the workload",
}
# The serve settings among them: ServeSettings.from_mapping reads them (each key is the
# setting's yaml spelling). headroom is one too, but a plans file may give it as a percentage
# of the GPU's memory, so it is read here.
SETTINGS: tuple[str, ...] = tuple(
    s.yaml for s in config_fields.SETTINGS if s.name != "headroom_bytes"
)
# The keys of a deployment, in the order their values are checked, and what each is.
SCHEMA: dict[str, str] = {
    **_HEAD,
    **{s.yaml: s.help for s in config_fields.SETTINGS if s.name != "headroom_bytes"},
    **_TAIL,
}
# Keys vLLM no longer has, refused with the reason instead of "unknown key".
REFUSED = {
    "swap_space": "vLLM 0.33 has no swap space: the V1 engine preempts by recomputing, never by "
    "swapping blocks to the CPU; for a CPU tier of prefix blocks use kv_offloading_size",
}
ALIASES = {
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "decode_context_parallel_size": "dcp",
}
TOP_LEVEL = ("deployments", "workload")
# How a plans file words a refused value, by the rule it broke (SettingError.rule); the value
# follows as "(got 90)".
WORDS: dict[Rule, str] = {
    "whole": "must be a whole number",
    "min": "must be at least 1",
    "max": f"must be at most {MAX_COUNT:,}",
    "number": "must be a number",
    "positive": "must be positive",
    "fraction": "must be in (0, 1]; write 0.9, not 90",
    "bool": "must be true or false",
    "name": "must be a non-empty string",
}


class _Bad(Exception):
    """A value refused in a plans file's own words; the reader adds ``(got ...)``."""


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37] + "...")
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _word(exc: SettingError) -> str:
    """The settings parser's refusal as a plans file words it: ``must be at least 1 (got 0)``."""
    return f"{WORDS[exc.rule]} (got {_show(exc.value)})"


class _Reader:
    """Reads one deployment mapping, recording its problems."""

    def __init__(self, file: str, index: int, data: _Map, problems: list[Problem]) -> None:
        self.file, self.index, self.data, self.problems = file, index, data, problems
        name = data.get("name")
        self.label = f"deployments[{index}]" + (f" ({name})" if isinstance(name, str) else "")
        self.name = name if isinstance(name, str) else None
        self.ok = True

    def line(self, key: str | None = None) -> int:
        return self.data.key_lines.get(key, self.data.line) if key else self.data.line

    def fail(self, key: str | None, message: str) -> None:
        self.ok = False
        where = f"{self.label}.{key}" if key else self.label
        self.problems.append(Problem(self.file, self.line(key), where, message, self.index))

    def fold_keys(self) -> None:
        """Refuse unknown keys (with a suggestion) and read an alias as its key:
        ``tensor_parallel_size`` is ``tp``, reported on the alias's line."""
        for key in list(self.data):
            canonical = ALIASES.get(str(key))
            if canonical is not None:
                if canonical in self.data:
                    self.fail(str(key), f"same setting as {canonical!r}; give only one")
                    continue
                self.data[canonical] = self.data[key]
                self.data.key_lines[canonical] = self.data.key_lines.get(key, self.data.line)
                continue
            if key in REFUSED:
                self.fail(str(key), REFUSED[str(key)])
                continue
            if key not in SCHEMA:
                names = list(SCHEMA) + list(ALIASES)
                self.fail(str(key), "unknown key" + _suggest(str(key), names))


def _text(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise _Bad(WORDS["name"])
    return v.strip()


def _count(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(WORDS["whole"])
    if v < 1:
        raise _Bad(WORDS["min"])
    if v > MAX_COUNT:
        raise _Bad(WORDS["max"])
    return v


def _positive(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _Bad(WORDS["number"])
    try:
        value = float(v)
    except OverflowError:  # an int past 1.8e308
        raise _Bad(WORDS["max"]) from None
    if not math.isfinite(value):
        raise _Bad(WORDS["number"])
    if value <= 0:
        raise _Bad(WORDS["positive"])
    return value


def _fraction(v: Any) -> float:
    if isinstance(v, int) and not isinstance(v, bool) and v > 1:  # before float() overflows
        raise _Bad(WORDS["fraction"])
    value = _positive(v)
    if value > 1:
        raise _Bad(WORDS["fraction"])
    return value


def _size(v: Any) -> int:
    from planner.units import MAX_SIZE_BYTES, parse_size

    if isinstance(v, bool) or not isinstance(v, int | str):
        raise _Bad("must be bytes or a size like 24GiB")
    try:
        size = v if isinstance(v, int) else parse_size(v, flag="size")
    except UsageError as exc:
        raise _Bad(str(exc).removeprefix("size ")) from None
    if size < 0:
        raise _Bad("must not be negative")
    if size > MAX_SIZE_BYTES:
        raise _Bad("is too large (at most 1 EiB)")
    return size


def _at_least_0(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(WORDS["whole"])
    if v < 0:
        raise _Bad("must not be negative")
    if v > MAX_COUNT:
        raise _Bad(WORDS["max"])
    return v


def _headroom(v: Any) -> int | float:
    """Bytes (int), or a float fraction of GPU memory (the caller resolves it)."""
    if isinstance(v, str) and v.strip().endswith("%"):
        try:
            pct = float(v.strip()[:-1])
        except ValueError:
            raise _Bad("a percentage must look like 5%") from None
        if not (math.isfinite(pct) and 0 <= pct < 100):
            raise _Bad("a percentage must be in [0, 100)")
        return pct / 100
    return _size(v)


# The keys a plans file reads itself (the others are SETTINGS), with their checks.
_OWN: dict[str, Callable[[Any], Any]] = {
    "name": _text,
    "model": _text,
    "gpu": _text,
    "gpu_memory": _size,
    "min_concurrency": _positive,
    "min_kv_tokens": _count,
    "min_cluster_kv_tokens": _count,
    "max_kv_usage": _fraction,
    "headroom": _headroom,
    "workload": _text,
    "max_preemptions": _at_least_0,
    "max_kv_usage_p90": _fraction,
    "max_ttft_p90_s": _positive,
    "min_output_tokens_per_s": _positive,
}


def _suggest(key: str, names: list[str]) -> str:
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def parse_plans(data: Any, *, file: str, base_dir: Path) -> tuple[list[Entry], list[Problem]]:
    """Validate a loaded plans document.

    A document that is not a mapping with a non-empty ``deployments`` list raises
    :class:`PlansFileError`; problems inside deployments are returned, so the valid ones can
    still be checked.

    Args:
        data: what :func:`load_yaml` returned.
        file: the file name used in messages.
        base_dir: where ``./relative`` model paths start.

    Returns:
        The valid entries and the problems of the others.
    """
    if data is None:
        raise PlansFileError(f"{file}: empty; it needs a top-level `deployments:` list")
    if not isinstance(data, _Map):
        raise PlansFileError(
            f"{file}:1: the top level must be a mapping with a `deployments:` list, "
            f"not {_show(data)}"
        )
    problems: list[Problem] = []
    for key in data:
        if key not in TOP_LEVEL:
            problems.append(
                Problem(
                    file,
                    data.key_lines.get(key, 1),
                    str(key),
                    "unknown top-level key" + _suggest(str(key), list(TOP_LEVEL)),
                )
            )
    if "deployments" not in data:
        raise PlansFileError(f"{file}:{data.line}: no `deployments:` list")
    workloads = _Workloads(base_dir)
    top = None
    if "workload" in data:
        top = workloads.top_level(data["workload"], f"{file}:{data.key_lines.get('workload', 1)}")
    raw_entries = data["deployments"]
    line = data.key_lines["deployments"]
    if not isinstance(raw_entries, list):
        raise PlansFileError(f"{file}:{line}: deployments must be a list, not {_show(raw_entries)}")
    if not raw_entries:
        raise PlansFileError(f"{file}:{line}: deployments is empty")
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raw_entries):
        if not isinstance(raw, _Map):
            problems.append(
                Problem(
                    file,
                    line,
                    f"deployments[{index}]",
                    f"each deployment must be a mapping, not {_show(raw)}",
                    index,
                )
            )
            continue
        reader = _Reader(file, index, raw, problems)
        entry = _entry(reader, base_dir, workloads, top)
        if reader.name is not None:
            if reader.name in seen:
                reader.fail(
                    "name", f"duplicate name {reader.name!r} (first on line {seen[reader.name]})"
                )
                entry = None
            else:
                seen[reader.name] = reader.line("name")
        if entry is not None and reader.ok:
            entries.append(entry)
    return entries, problems


def _once(store: dict[str, T | E], key: str, load: Callable[[], T], error: type[E]) -> T:
    """``load()`` the first time ``key`` is asked for, kept with its error: each model or
    workload file of a run is read once, and one that fails fails every entry naming it."""
    if key not in store:
        try:
            store[key] = load()
        except error as exc:
            store[key] = exc
    found = store[key]
    if isinstance(found, error):
        raise found
    return found  # type: ignore[return-value]


class _Workloads:
    """The workloads of one plans file, each read once, paths relative to the file's folder."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.loaded: dict[str, Workload | WorkloadError] = {}

    def load(self, path: str) -> Workload:
        """The workload at ``path`` (relative to the plans file); WorkloadError if unreadable."""
        from planner.simulate.trace import load_workload

        full = str(self.base_dir / path)
        return _once(self.loaded, full, lambda: load_workload(full), WorkloadError)

    def top_level(self, value: Any, where: str) -> Workload:
        """The top-level ``workload``: every vLLM entry replays it, so one that cannot be read
        makes the whole file unusable (:class:`PlansFileError`)."""
        from planner.errors import one_line

        try:
            return self.load(_text(value))
        except _Bad as exc:
            raise PlansFileError(f"{where}: workload {exc} (got {_show(value)})") from None
        except WorkloadError as exc:
            raise PlansFileError(f"{where}: workload: {one_line(str(exc))}") from None


def _entry(r: _Reader, base_dir: Path, workloads: _Workloads, top: Workload | None) -> Entry | None:
    """One deployment's :class:`Entry`, or None when it has a problem (recorded on ``r``).

    Each key's value is checked in :data:`SCHEMA` order: the serve settings by
    :meth:`ServeSettings.from_mapping` (typed, so ``tp: "2"`` is refused; no ``-1`` auto-fit),
    the rest here. Then the rules across keys: the engines a plans file checks, vLLM-only
    keys, the GPU, the workload the workload requirements need (the entry's, else ``top``).
    """
    r.fold_keys()
    refused: dict[str, str] = {}
    own: dict[str, Any] = {}
    for key, check in _OWN.items():
        if key in r.data:
            try:
                own[key] = check(r.data[key])
            except _Bad as exc:
                refused[key] = f"{exc} (got {_show(r.data[key])})"
    given = {key: r.data[key] for key in SETTINGS if key in r.data}
    adapter = given.get("lora_adapter")
    if isinstance(adapter, str) and adapter.strip():  # a folder next to the plans file
        given["lora_adapter"] = str((base_dir / adapter.strip()).resolve())
    settings, problems = ServeSettings.from_mapping(
        given,
        spelling="yaml",
        typed=True,
        auto_fit=False,
        word=_word,
    )
    refused.update(problems)
    for key in SCHEMA:
        if key in refused:
            r.fail(key, refused[key])
    if "" in refused:  # a combination of settings no engine runs
        r.fail(None, refused[""])
    for key in ("name", "model"):
        if key not in r.data:
            r.fail(None, f"missing required key {key!r}")
    engine = settings.engine
    if engine not in ENGINES:
        r.fail("engine", f"engine must be one of {', '.join(x.value for x in ENGINES)}")
    if settings.kv_cache_dtype is KVDtype.FP32:
        r.fail("kv_cache_dtype", "fp32 KV is only meaningful for transformers")
    if engine is not Engine.VLLM:
        for key in VLLM_ONLY:
            if key in r.data:
                r.fail(key, f"is a vLLM setting; engine {engine.value} has no such knob")
        if "max_kv_usage" in r.data and "max_num_seqs" not in r.data:
            r.fail("max_kv_usage", f"needs max_num_seqs with engine {engine.value}")
    requirements = Requirements(
        **{
            key: own.get(key)
            for key in ("min_concurrency", "min_kv_tokens", "max_kv_usage", "min_cluster_kv_tokens")
        },
        **{key: own.get(key) for key in WORKLOAD_KEYS},
    )
    gpu = _gpu(r, own.get("gpu"), own.get("gpu_memory"))
    workload = _workload(r, settings, gpu, requirements, workloads, own.get("workload"), top)
    headroom = own.get("headroom", 0)
    if isinstance(headroom, float):  # a fraction of GPU memory
        headroom = int(gpu.memory_bytes * headroom) if gpu else 0
    model = own.get("model")
    if isinstance(model, str) and model.startswith(("./", "../")):
        model = str((base_dir / model).resolve())
    if not r.ok or gpu is None or model is None:
        return None
    return Entry(
        name=own["name"],
        line=r.line(),
        model=model,
        gpu=gpu,
        settings=settings.but(headroom_bytes=headroom),
        requirements=requirements,
        workload=workload,
    )


def _workload(
    r: _Reader,
    settings: ServeSettings,
    gpu: Gpu | None,
    req: Requirements,
    workloads: _Workloads,
    path: str | None,
    top: Workload | None,
) -> Workload | None:
    """The workload an entry replays (its own, else the top level's; none for an engine other
    than vLLM, whose scheduler is the one replayed), recording the problems: an unreadable
    file; a workload requirement with no workload; a workload or its requirements on another
    engine, with pp > 1 (the replay has no pipeline stages) or on a GPU known only by its
    memory (the replay times steps with the GPU's bandwidth and FLOPS). The top level's
    workload is not replayed on the entries that cannot take it."""
    from planner.errors import one_line

    keys, engine = req.workload_keys, settings.engine
    asked = "workload" if path is not None else keys[0] if keys else None
    refusal = None
    if engine is not Engine.VLLM:
        refusal = "needs engine vllm: the workload is replayed on vLLM's scheduler"
    elif settings.pp > 1:
        refusal = f"needs pp 1: the replay has one pipeline stage (got pp {settings.pp})"
    elif gpu is not None and not (gpu.bandwidth_bytes_per_s and gpu.bf16_flops):
        refusal = (
            "needs a catalog `gpu:` (with gpu_memory if you like): the replay times its steps "
            "with the GPU's bandwidth and FLOPS"
        )
    if refusal is not None:
        if asked is not None:
            r.fail(asked, refusal)
        return None
    workload = top
    if path is not None:
        try:
            workload = workloads.load(path)
        except WorkloadError as exc:
            r.fail("workload", one_line(str(exc)))
            return None
    elif "workload" in r.data:  # refused as a value; already reported
        return None
    if keys and workload is None:
        r.fail(
            keys[0],
            f"needs a workload: add `workload: <trace.jsonl or spec.yaml>` to this deployment "
            f"or the top level ({', '.join(keys)} come from replaying it)",
        )
    return workload


def _gpu(r: _Reader, name: str | None, memory_bytes: int | None) -> Gpu | None:
    """The entry's GPU (:func:`planner.gpus.resolve_gpu`): a catalog GPU, a ``gpu_memory``
    total, or the catalog GPU with that total (an A100 stays an A100)."""
    from planner.gpus import resolve_gpu

    positive = memory_bytes is None or memory_bytes > 0
    gpu = None
    try:
        gpu = resolve_gpu(
            name,
            memory_bytes if positive else None,
            source="gpu_memory",
            memory_hint="gpu_memory: 24GiB",
            where=f"{r.file}:{r.line('gpu')}: {r.label}.gpu: ",
        )
    except UsageError as exc:  # an unknown name
        r.fail("gpu", str(exc))
    if not positive:
        r.fail("gpu_memory", "must be positive")
        return None
    if "gpu" not in r.data and "gpu_memory" not in r.data:
        r.fail(None, "missing 'gpu' (a catalog GPU) or 'gpu_memory' (e.g. 80GiB)")
    return gpu


# --------------------------------------------------------------------------- checking


@dataclass(frozen=True)
class Check:
    """One requirement of a deployment: ``actual`` against ``required``.

    Attributes:
        name: what is checked: ``max_model_len`` (one request of that length fits; every
            plannable deployment has it), ``weights`` (the only check when the weights alone
            exceed the engine's budget), ``max_num_seqs`` (a vLLM hybrid: each running
            sequence holds a Mamba state block), a rule ``kvplan estimate`` refuses by
            (unit ``rule``, required 1, actual 0: ``node``, ``divisibility``;
            ``kv_cache_memory`` in bytes: the pool, weights and non-torch memory against the
            GPU's total), or a requirement of the plans file: ``min_concurrency``,
            ``min_kv_tokens``, ``max_kv_usage``, and the workload's ``max_preemptions``,
            ``max_kv_usage_p90``, ``max_ttft_p90_s``, ``min_output_tokens_per_s``.
        resource: the same in words, e.g. ``KV memory for one max_model_len request``.
        unit: how to show the numbers: ``bytes``, ``x`` (requests), ``tokens``, ``ratio``,
            ``seqs``, ``preemptions``, ``s``, ``tokens/s`` or ``rule`` (no numbers).
        required: the bound: the plans file's, or what one ``max_model_len`` request needs.
        actual: what the deployment gets.
        passed: ``actual >= required``; ``actual <= required`` for ``weights``,
            ``max_num_seqs`` and the ``max_`` requirements.
        margin: relative room: +0.25 means 25 % to spare, negative means failed by that much
            (``actual / required - 1``, or ``required / actual - 1`` for an upper bound).
            Qwen2.5-7B on an RTX 4090 with 8 x 32,768-token requests uses 2.5409 of its KV
            blocks against a ``max_kv_usage`` of 0.9: 0.9 / 2.5409 - 1 = -0.6458.
    """

    name: str
    resource: str
    unit: str
    required: float
    actual: float
    passed: bool
    margin: float


@dataclass(frozen=True)
class Figures:
    """The capacity figures a deployment was judged on, per GPU rank.

    Attributes:
        source: whose formulas: ``vllm``, ``sglang`` or ``trtllm``.
        weights_bytes: the weights one rank holds.
        available_kv_bytes: the engine's KV pool on one rank.
        kv_cache_size_tokens: the pool in tokens (vLLM's "GPU KV cache size").
        max_concurrency: requests of ``max_model_len`` tokens the pool holds at once.
        num_gpu_blocks: vLLM's KV blocks (None for the other engines).
        blocks_per_request: blocks one ``max_model_len`` request takes (vLLM only).
        kv_usage: what ``max_num_seqs`` full-length requests take of the pool: with vLLM
            ``max_num_seqs x blocks_per_request / (num_gpu_blocks - 1)`` (the null block is
            never handed out), else ``max_num_seqs / max_concurrency``; None when an engine
            other than vLLM is given no ``max_num_seqs``.
        setting: the engine knob that set the budget, e.g. ``gpu_memory_utilization=0.92``
            or ``mem_fraction_static=0.8``.

    Qwen2.5-7B on an RTX 4090 (vLLM, 32,768 tokens, 8 sequences): 6,449 blocks of 16 tokens
    are 103,184 tokens; a request takes 2,048 blocks, so 103,184 / 32,768 = 3.1489 requests
    fit at once, and 8 x 2,048 / 6,448 = 2.5409 is the KV usage.
    """

    source: str
    weights_bytes: int
    available_kv_bytes: int
    kv_cache_size_tokens: int
    max_concurrency: float
    num_gpu_blocks: int | None
    blocks_per_request: int | None
    kv_usage: float | None
    setting: str


@dataclass(frozen=True)
class Simulated:
    """What replaying the entry's workload on its deployment measured
    (:func:`planner.simulate.compare.simulate_model`; ``kvplan simulate -w`` with the same
    settings prints the same figures).

    Attributes:
        workload: the workload's file, joined to the plans file's folder.
        requests: requests replayed, rejected ones included.
        completed: requests that finished.
        rejected_too_long: requests longer than ``max_model_len`` (vLLM's API server rejects
            them; they are never scheduled).
        preemptions: preemption events.
        usage_p90, usage_max: KV usage of the usable blocks: 90 % of the time at most
            ``usage_p90``; the peak.
        max_running: most requests running in one step.
        ttft_p90_s, tpot_p90_s: 90th percentiles of time to first token and time per output
            token (roofline times, not measurements).
        output_tokens_per_s: output tokens over the replay's duration.
        duration_s: simulated seconds from the first arrival to the last finish.

    The JSON rounds the floats to 4 places. A pool too small for the traffic must preempt: two
    requests arriving together whose prompts fit the usable blocks together but whose full
    lengths (prompt + output) do not both start decoding and run out of blocks, so
    ``preemptions`` is at least 1; a pool that holds both at full length never preempts
    (``tests/test_check_workload.py``).
    """

    workload: str
    requests: int
    completed: int
    rejected_too_long: int
    preemptions: int
    usage_p90: float
    usage_max: float
    max_running: int
    ttft_p90_s: float
    tpot_p90_s: float
    output_tokens_per_s: float
    duration_s: float

    @classmethod
    def of(cls, workload: Workload, r: SimResult) -> Simulated:
        return cls(
            workload=workload.source,
            requests=r.requests,
            completed=r.completed,
            rejected_too_long=r.rejected_too_long,
            preemptions=r.preemptions,
            usage_p90=r.usage_p90,
            usage_max=r.usage_max,
            max_running=r.max_concurrency,
            ttft_p90_s=r.ttft_s.p90,
            tpot_p90_s=r.tpot_s.p90,
            output_tokens_per_s=r.output_tokens_per_s,
            duration_s=r.duration_s,
        )


@dataclass(frozen=True)
class DeploymentResult:
    """The verdict on one deployment: pass, fail (a requirement is not met) or error (it could
    not be planned: unknown model, invalid TP for the model ...).

    Attributes:
        name: the entry's ``name``.
        line: the line of the entry's first key.
        status: ``pass``, ``fail`` or ``error``.
        outcome: what vLLM does with the settings (SGLang / TRT-LLM: what their budgets
            say), the words of ``kvplan estimate``: ``wont_start`` (weights, one
            ``max_model_len`` request, or a hybrid's Mamba blocks < ``max_num_seqs``),
            ``queues_at_worst_case`` (with every request ``max_model_len`` tokens long, fewer
            than ``max_num_seqs`` run at once; the rest wait or are preempted) or
            ``fits_at_worst_case``; None on an error. Qwen2.5-7B on 24 GiB at gmu 0.9,
            8,192 x 32: 6,274 usable blocks // 512 per request = 12 of 32, so it queues.
        worst_case_running: how many ``max_model_len`` requests run at once, capped by
            ``max_num_seqs`` (SGLang / TRT-LLM without one: by the engine's own running
            limit); 0 when it won't start; None on an error.
        outcome_reason: why it won't start, in vLLM's words where vLLM has them; else None.
        model: the model as loaded (``Qwen/Qwen2.5-7B-Instruct`` for ``qwen2.5-7b``); on an
            error, the entry's model argument.
        engine: ``vllm``, ``sglang`` or ``trtllm``.
        gpu: the GPU's name; ``custom`` for a bare ``gpu_memory``.
        gpu_memory_bytes: the GPU's total memory, which the budget starts from.
        settings: the settings judged, as the engine resolves them: ``tp``, ``pp``,
            ``max_model_len``, ``max_num_seqs``, ``gpu_memory_utilization`` (the fraction in
            effect, e.g. vLLM's 0.92 when not given), ``kv_cache_dtype`` (``auto`` resolved,
            e.g. ``bf16``), then ``max_num_batched_tokens`` (vLLM) and ``block_size``. On an
            error, what the entry gave (None: the engine's default).
        checks: ``max_model_len`` first, then the requirements; only ``weights`` when the
            weights do not fit.
        limiting: the check with the smallest margin (None without checks).
        margin: that check's margin, rounded to 4 places.
        figures: the capacity figures (None on an error, or when the weights do not fit).
        fix: what to change, in plans-file keys, alternatives joined by ``; or `` (``, or ``
            when the weights do not fit): ``kv_cache_dtype: fp8 (6.30x, 206,438 tokens) with
            max_num_seqs: 5; or tp: 2 (13.92x, 456,130 tokens)``. None on a pass.
        error: why it could not be planned (status ``error`` only).
        caveats: what a fix needs said beside it: :func:`planner.deployment.fp8_kv_caveat`
            for the GPU when a fix suggests fp8 KV; else empty.
        simulated: the workload replay's figures (None without a workload, or when vLLM
            won't start).
    """

    name: str
    line: int
    status: str
    outcome: str | None
    worst_case_running: int | None
    outcome_reason: str | None
    model: str
    engine: str
    gpu: str
    gpu_memory_bytes: int
    settings: dict[str, Any]
    checks: list[Check]
    limiting: str | None
    margin: float | None
    figures: Figures | None
    fix: str | None
    error: str | None = None
    caveats: list[str] = field(default_factory=list)
    simulated: Simulated | None = None


@dataclass(frozen=True)
class CheckReport:
    """``kvplan check``: every deployment's verdict plus the file's problems.

    Attributes:
        file: the plans file as it was named.
        results: one :class:`DeploymentResult` per valid entry, in file order.
        problems: the file's validation errors; an entry with any is not checked.

    ``examples/plans.yaml`` has one deployment that passes and one that does not; both
    start, the failing one queues at worst case: counts ``{"deployments": 2, "passed": 1,
    "failed": 1, "errors": 0, "invalid": 0, "wont_start": 0, "queues_at_worst_case": 1,
    "fits_at_worst_case": 1}``, exit code 1.
    """

    file: str
    results: list[DeploymentResult]
    problems: list[Problem] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """2 when the file has problems, else 1 when any deployment failed or could not be
        planned, else 0."""
        if self.problems:
            return 2
        return 0 if all(r.status == "pass" for r in self.results) else 1

    @property
    def counts(self) -> dict[str, int]:
        """Deployments (valid entries and invalid ones), passed, failed, errors, invalid, then
        the checked ones by outcome (the entries in error have none)."""
        from planner.recommend import FITS_AT_WORST_CASE, QUEUES_AT_WORST_CASE, WONT_START

        statuses = [r.status for r in self.results]
        outcomes = [r.outcome for r in self.results]
        invalid = len({p.index for p in self.problems if p.index is not None})
        return {
            "deployments": len(self.results) + invalid,
            "passed": statuses.count("pass"),
            "failed": statuses.count("fail"),
            "errors": statuses.count("error"),
            "invalid": invalid,
            WONT_START: outcomes.count(WONT_START),
            QUEUES_AT_WORST_CASE: outcomes.count(QUEUES_AT_WORST_CASE),
            FITS_AT_WORST_CASE: outcomes.count(FITS_AT_WORST_CASE),
        }


class ModelCache:
    """Models shared by the deployments of one run (fetched once each)."""

    def __init__(self, offline: bool | None) -> None:
        self.offline = offline
        self.models: dict[str, LoadedModel | KvplanError] = {}
        self.results: dict[Any, DeploymentResult] = {}  # per distinct deployment (_checked)

    def model(self, model: str) -> LoadedModel:
        from planner.model.load import load_model

        return _once(
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
    from planner.deployment import Deployment
    from planner.model.load import load_draft
    from planner.recommend import physical_refusal
    from planner.weights import for_deployment

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
    from planner.deployment import fp8_kv_caveat

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
    from planner.errors import DoesNotFitError, WontStartError
    from planner.recommend import WONT_START, PlanOptions, Refusal, plan

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
    from planner.recommend import WONT_START

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
    from planner.kv_layout import estimate

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
    from planner.recommend import FITS_AT_WORST_CASE, QUEUES_AT_WORST_CASE, WONT_START

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
    from planner.budget import activation_peak_bytes, sglang_capacity, trtllm_capacity
    from planner.kv_layout import estimate

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

_OWN_SCHEMA: dict[str, dict[str, Any]] = {
    "name": {"type": "string", "minLength": 1},
    "model": {"type": "string", "minLength": 1},
    "gpu": {"type": "string", "minLength": 1},
    "gpu_memory": config_fields.settings_json_schema()["kv_cache_memory"] | {},
    "min_concurrency": {"type": "number", "exclusiveMinimum": 0},
    "min_kv_tokens": {"type": "integer", "minimum": 1},
    "min_cluster_kv_tokens": {"type": "integer", "minimum": 1},
    "max_kv_usage": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "headroom": {
        "oneOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": r"^\s*[0-9.]+\s*(%|[KMGTPE]i?B|[kKMGTPE]B?)\s*$"},
        ]
    },
    "workload": {"type": "string", "minLength": 1},
    "max_preemptions": {"type": "integer", "minimum": 0},
    "max_kv_usage_p90": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "max_ttft_p90_s": {"type": "number", "exclusiveMinimum": 0},
    "min_output_tokens_per_s": {"type": "number", "exclusiveMinimum": 0},
}


def plans_json_schema() -> dict[str, Any]:
    """The plans file's JSON Schema (draft 2020-12), generated from the setting declarations
    and the keys a plans file reads itself: what ``kvplan schema plans`` prints, so editors
    (the YAML language server's ``# yaml-language-server: $schema=...``) validate a plans
    file as ``kvplan check`` reads it. Checks across keys (vLLM-only keys with another
    engine, a workload requirement without a workload) stay ``check``'s."""
    settings = config_fields.settings_json_schema()
    properties: dict[str, Any] = {}
    for key, description in SCHEMA.items():
        schema = dict(_OWN_SCHEMA.get(key) or settings[key])
        schema["description"] = schema.get("description") or description
        properties[key] = schema
    for alias, key in ALIASES.items():
        properties[alias] = {"$ref": f"#/$defs/deployment/properties/{key}"} | {
            "description": f"same as {key}"
        }
    deployment = {
        "type": "object",
        "required": ["name", "model"],
        "additionalProperties": False,
        "properties": properties,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "kvplan plans file",
        "description": "Deployments for `kvplan check`: each names a model, a GPU and serve "
        "settings, and the requirements it must meet.",
        "type": "object",
        "required": ["deployments"],
        "additionalProperties": False,
        "properties": {
            "deployments": {
                "type": "array",
                "minItems": 1,
                "items": {"$ref": "#/$defs/deployment"},
            },
            "workload": {
                "type": "string",
                "description": "trace or spec every vLLM deployment replays, relative to the file",
            },
        },
        "$defs": {"deployment": deployment},
    }
