"""Plans files for ``kvplan check``: the YAML a deployment list is written in, read bounded, every
key checked against the declared settings (:func:`parse_plans`), and its JSON Schema
(:func:`plans_json_schema`, ``kvplan schema plans``)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from planner import files
from planner.config import fields as config_fields
from planner.deployment import ServeSettings
from planner.errors import InputFileError, SettingError, UsageError, WorkloadError, one_line
from planner.files import MarkedMap as _Map
from planner.gpus import resolve_gpu
from planner.model.specs import Engine, KVDtype
from planner.units import MAX_COUNT, MAX_SIZE_BYTES, parse_size

if TYPE_CHECKING:
    from planner.errors import Rule
    from planner.gpus import Gpu
    from planner.simulate.workload import Workload


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


def load_once(store: dict[str, T | E], key: str, load: Callable[[], T], error: type[E]) -> T:
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
        return load_once(self.loaded, full, lambda: load_workload(full), WorkloadError)

    def top_level(self, value: Any, where: str) -> Workload:
        """The top-level ``workload``: every vLLM entry replays it, so one that cannot be read
        makes the whole file unusable (:class:`PlansFileError`)."""
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
