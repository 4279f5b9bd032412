"""Plans files for CI: a YAML list of deployments, each checked with the planner.

``kvplan check deploy/plans.yaml`` exits 0 when every deployment fits its requirements, 1 when
any fails (or cannot be planned), 2 when the file is invalid. Schema (``examples/plans.yaml``)::

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

Validation errors name the file, the line (YAML marks) and the key; one invalid deployment does
not stop the others from being checked, but makes the run exit 2. The YAML is loaded with
``yaml.SafeLoader``; files over 1 MiB and alias expansions over a million nodes are refused.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from planner import files
from planner.errors import InputFileError, KvplanError, UsageError
from planner.files import MarkedMap as _Map
from planner.model.specs import Engine, KVDtype

if TYPE_CHECKING:
    from planner.budget import EngineCapacity
    from planner.deployment import Deployment as Planned
    from planner.kv_layout import KVEstimate
    from planner.model.load import LoadedModel
    from planner.recommend import Plan
    from planner.weights import Weights

T = TypeVar("T")
MAX_PLANS_BYTES = 1 << 20  # 1 MiB: a plans file is a few KiB
ENGINES = (Engine.VLLM, Engine.SGLANG, Engine.TRTLLM)
VLLM_ONLY = ("max_num_batched_tokens", "enable_prefix_caching", "enforce_eager")


class PlansFileError(InputFileError):
    """The plans file cannot be read as a whole (missing, binary, too large, not YAML)."""


def load_yaml(path: Path, *, limit_bytes: int = MAX_PLANS_BYTES) -> Any:
    """Parse a plans file (see :func:`planner.files.load_yaml`); errors name the file and line."""
    return files.load_yaml(path, limit_bytes=limit_bytes, what="plans file", error=PlansFileError)


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
class Deployment:
    """One validated entry of a plans file; ``None`` means the engine's default."""

    name: str
    line: int
    model: str
    engine: Engine
    gpu_name: str
    gpu_memory_bytes: int
    gpu_source: str
    tp: int = 1
    pp: int = 1
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: KVDtype = KVDtype.AUTO
    block_size: int | None = None
    enable_prefix_caching: bool = True
    enforce_eager: bool = False
    min_concurrency: float | None = None
    min_kv_tokens: int | None = None
    max_kv_usage: float | None = None
    headroom_bytes: int = 0


# key -> (kind, help). Kinds: str, int, number, fraction, bool, size, headroom.
SCHEMA: dict[str, tuple[str, str]] = {
    "name": ("str", "unique name of the deployment"),
    "model": ("str", "catalog name, hub id or ./path/to/model"),
    "engine": ("str", "vllm, sglang or trtllm"),
    "gpu": ("str", "catalog GPU (kvplan gpus)"),
    "gpu_memory": ("size", "total memory of a GPU not in the catalog"),
    "tp": ("int", "tensor-parallel size"),
    "pp": ("int", "pipeline-parallel size"),
    "max_model_len": ("int", "context length per request"),
    "max_num_seqs": ("int", "concurrent sequences"),
    "max_num_batched_tokens": ("int", "vLLM tokens per step"),
    "gpu_memory_utilization": ("fraction", "engine memory fraction"),
    "kv_cache_dtype": ("str", "auto, fp16, bf16, fp8, ..."),
    "block_size": ("int", "tokens per block"),
    "enable_prefix_caching": ("bool", "vLLM prefix caching"),
    "enforce_eager": ("bool", "vLLM without CUDA graphs"),
    "min_concurrency": ("number", "required requests at max_model_len"),
    "min_kv_tokens": ("int", "required KV cache tokens"),
    "max_kv_usage": ("fraction", "largest KV usage at max_num_seqs full-length requests"),
    "headroom": ("headroom", "memory kept free of KV cache: bytes, 2GiB or 5%"),
}
ALIASES = {"tensor_parallel_size": "tp", "pipeline_parallel_size": "pp"}
TOP_LEVEL = ("deployments",)


class _Entry:
    """Reads typed values out of one deployment mapping, collecting problems."""

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

    def get(self, key: str) -> Any:
        """The checked value of ``key`` (None when absent or wrong; problems are recorded)."""
        if key not in self.data:
            return None
        value = self.data[key]
        kind = SCHEMA[key][0]
        checker = _CHECKS[kind]
        try:
            return checker(value)
        except _Bad as exc:
            self.fail(key, f"{exc} (got {_show(value)})")
            return None


class _Bad(Exception):
    pass


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37] + "...")
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _check_str(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise _Bad("must be a non-empty string")
    return v.strip()


def _check_int(v: Any) -> int:
    from planner.deployment import MAX_COUNT

    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad("must be a whole number")
    if v < 1:
        raise _Bad("must be at least 1")
    if v > MAX_COUNT:
        raise _Bad(f"must be at most {MAX_COUNT:,}")
    return v


def _check_number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise _Bad("must be a number")
    if v <= 0:
        raise _Bad("must be positive")
    return float(v)


def _check_fraction(v: Any) -> float:
    value = _check_number(v)
    if value > 1:
        raise _Bad("must be in (0, 1]; write 0.9, not 90")
    return value


def _check_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Bad("must be true or false")
    return v


def _check_size(v: Any) -> int:
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


def _check_headroom(v: Any) -> int | float:
    """Bytes (int), or a float percent of GPU memory (the caller resolves it)."""
    if isinstance(v, str) and v.strip().endswith("%"):
        try:
            pct = float(v.strip()[:-1])
        except ValueError:
            raise _Bad("a percentage must look like 5%") from None
        if not (math.isfinite(pct) and 0 <= pct < 100):
            raise _Bad("a percentage must be in [0, 100)")
        return pct / 100
    return _check_size(v)


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "str": _check_str,
    "int": _check_int,
    "number": _check_number,
    "fraction": _check_fraction,
    "bool": _check_bool,
    "size": _check_size,
    "headroom": _check_headroom,
}


def _suggest(key: str, names: list[str]) -> str:
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def parse_plans(data: Any, *, file: str, base_dir: Path) -> tuple[list[Deployment], list[Problem]]:
    """Validate a loaded plans document.

    A document that is not a mapping with a non-empty ``deployments`` list raises
    :class:`PlansFileError`; problems inside deployments are returned, so the valid ones can
    still be checked.

    Args:
        data: what :func:`load_yaml` returned.
        file: the file name used in messages.
        base_dir: where ``./relative`` model paths start.

    Returns:
        The valid deployments and the problems of the others.
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
    entries = data["deployments"]
    line = data.key_lines["deployments"]
    if not isinstance(entries, list):
        raise PlansFileError(f"{file}:{line}: deployments must be a list, not {_show(entries)}")
    if not entries:
        raise PlansFileError(f"{file}:{line}: deployments is empty")
    deployments: list[Deployment] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(entries):
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
        entry = _Entry(file, index, raw, problems)
        dep = _deployment(entry, base_dir)
        if entry.name is not None:
            if entry.name in seen:
                entry.fail(
                    "name", f"duplicate name {entry.name!r} (first on line {seen[entry.name]})"
                )
                dep = None
            else:
                seen[entry.name] = entry.line("name")
        if dep is not None and entry.ok:
            deployments.append(dep)
    return deployments, problems


def _parsed(e: _Entry, key: str, value: str | None, parse: Callable[[str], T], default: T) -> T:
    """An enum parsed at the boundary; its UsageError becomes a problem on ``key``."""
    if value is None:
        return default
    try:
        return parse(value)
    except UsageError as exc:
        e.fail(key, str(exc))
        return default


def _deployment(e: _Entry, base_dir: Path) -> Deployment | None:
    from planner.gpus import get_gpu

    for key in list(e.data):
        canonical = ALIASES.get(str(key))
        if canonical is not None:
            if canonical in e.data:
                e.fail(str(key), f"same setting as {canonical!r}; give only one")
                continue
            e.data[canonical] = e.data[key]
            e.data.key_lines[canonical] = e.data.key_lines.get(key, e.data.line)
            continue
        if key not in SCHEMA:
            names = list(SCHEMA) + list(ALIASES)
            e.fail(str(key), "unknown key" + _suggest(str(key), names))
    values = {key: e.get(key) for key in SCHEMA}
    for key in ("name", "model"):
        if key not in e.data:
            e.fail(None, f"missing required key {key!r}")
    engine = _parsed(e, "engine", values["engine"], Engine.parse, Engine.VLLM)
    if engine not in ENGINES:
        e.fail("engine", f"engine must be one of {', '.join(x.value for x in ENGINES)}")
    dtype = _parsed(e, "kv_cache_dtype", values["kv_cache_dtype"], KVDtype.parse, KVDtype.AUTO)
    if dtype is KVDtype.FP32:
        e.fail("kv_cache_dtype", "fp32 KV is only meaningful for transformers")
    if engine is not Engine.VLLM:
        for key in VLLM_ONLY:
            if key in e.data:
                e.fail(key, f"is a vLLM setting; engine {engine.value} has no such knob")
        if "max_kv_usage" in e.data and "max_num_seqs" not in e.data:
            e.fail("max_kv_usage", f"needs max_num_seqs with engine {engine.value}")
    gpu_name, memory, source = "", 0, ""
    if values["gpu"] is not None:
        try:
            g = get_gpu(values["gpu"])
            gpu_name, memory, source = g.name, g.memory_bytes, g.source
        except UsageError as exc:
            e.fail("gpu", str(exc).replace("Use --gpu-memory 24GiB", "Use gpu_memory: 24GiB"))
    if values["gpu_memory"] is not None:
        if values["gpu_memory"] <= 0:
            e.fail("gpu_memory", "must be positive")
        memory, source = values["gpu_memory"], "gpu_memory"
        gpu_name = gpu_name or "custom"
    elif "gpu" not in e.data and "gpu_memory" not in e.data:
        e.fail(None, "missing 'gpu' (a catalog GPU) or 'gpu_memory' (e.g. 80GiB)")
    headroom = values["headroom"]
    if isinstance(headroom, float):  # a fraction of GPU memory
        headroom = int(memory * headroom)
    model = values["model"]
    if isinstance(model, str) and model.startswith(("./", "../")):
        model = str((base_dir / model).resolve())
    if not e.ok:
        return None
    return Deployment(
        name=values["name"],
        line=e.line(),
        model=model,
        engine=engine,
        gpu_name=gpu_name,
        gpu_memory_bytes=memory,
        gpu_source=source,
        tp=values["tp"] or 1,
        pp=values["pp"] or 1,
        max_model_len=values["max_model_len"],
        max_num_seqs=values["max_num_seqs"],
        max_num_batched_tokens=values["max_num_batched_tokens"],
        gpu_memory_utilization=values["gpu_memory_utilization"],
        kv_cache_dtype=dtype,
        block_size=values["block_size"],
        enable_prefix_caching=True
        if values["enable_prefix_caching"] is None
        else values["enable_prefix_caching"],
        enforce_eager=bool(values["enforce_eager"]),
        min_concurrency=values["min_concurrency"],
        min_kv_tokens=values["min_kv_tokens"],
        max_kv_usage=values["max_kv_usage"],
        headroom_bytes=headroom or 0,
    )


# --------------------------------------------------------------------------- checking


@dataclass(frozen=True)
class Check:
    """One requirement of a deployment: ``actual`` against ``required``.

    ``unit`` says how to show the numbers: ``bytes``, ``x`` (requests), ``tokens`` or ``ratio``.
    ``margin`` is relative: +0.25 means 25 % to spare, negative means failed by that much.
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
    """The capacity figures a deployment was judged on, per GPU rank."""

    source: str  # whose formulas: "vllm", "sglang", "trtllm"
    weights_bytes: int
    available_kv_bytes: int
    kv_cache_size_tokens: int
    max_concurrency: float
    num_gpu_blocks: int | None
    blocks_per_request: int | None
    kv_usage: float | None
    setting: str  # the engine knob that set the budget, e.g. gpu_memory_utilization=0.92


@dataclass(frozen=True)
class DeploymentResult:
    """The verdict on one deployment: pass, fail (a requirement is not met) or error (it could
    not be planned: unknown model, invalid TP for the model ...)."""

    name: str
    line: int
    status: str
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


@dataclass(frozen=True)
class CheckReport:
    """``kvplan check``: every deployment's verdict plus the file's problems.

    ``exit_code`` is 2 when the file has problems, else 1 when any deployment failed or could
    not be planned, else 0.
    """

    file: str
    results: list[DeploymentResult]
    problems: list[Problem] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.problems:
            return 2
        return 0 if all(r.status == "pass" for r in self.results) else 1

    @property
    def counts(self) -> dict[str, int]:
        statuses = [r.status for r in self.results]
        invalid = len({p.index for p in self.problems if p.index is not None})
        return {
            "deployments": len(self.results) + invalid,
            "passed": statuses.count("pass"),
            "failed": statuses.count("fail"),
            "errors": statuses.count("error"),
            "invalid": invalid,
        }


class _Cache:
    """Models shared by the deployments of one run (fetched once each)."""

    def __init__(self, offline: bool | None) -> None:
        self.offline = offline
        self.models: dict[str, LoadedModel | KvplanError] = {}

    def model(self, model: str) -> LoadedModel:
        from planner.model.load import load_model

        if model not in self.models:
            try:
                self.models[model] = load_model(model, offline=self.offline)
            except KvplanError as exc:
                self.models[model] = exc
        found = self.models[model]
        if isinstance(found, KvplanError):
            raise found
        return found


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
    deployments, problems = parse_plans(data, file=str(path), base_dir=file.parent)
    cache = _Cache(offline)
    results = [check_deployment(d, cache=cache) for d in deployments]
    return CheckReport(str(path), results, problems)


def check_deployment(dep: Deployment, *, cache: _Cache | None = None) -> DeploymentResult:
    """Plan one deployment with its engine's formulas and judge it against its requirements."""
    from planner.deployment import Deployment as Planned
    from planner.deployment import Gpu, ServeSettings
    from planner.weights import per_rank

    cache = cache or _Cache(None)
    gpu = Gpu(name=dep.gpu_name, memory_bytes=dep.gpu_memory_bytes, source=dep.gpu_source)
    settings: dict[str, Any] = {
        "tp": dep.tp,
        "pp": dep.pp,
        "max_model_len": dep.max_model_len,
        "max_num_seqs": dep.max_num_seqs,
        "gpu_memory_utilization": dep.gpu_memory_utilization,
        "kv_cache_dtype": dep.kv_cache_dtype.value,
    }
    try:
        loaded = cache.model(dep.model)
        serve = ServeSettings(
            engine=dep.engine,
            tp=dep.tp,
            pp=dep.pp,
            kv_cache_dtype=dep.kv_cache_dtype,
            block_size=dep.block_size,
            max_model_len=dep.max_model_len,
            max_num_batched_tokens=dep.max_num_batched_tokens,
            max_num_seqs=dep.max_num_seqs,
            enable_prefix_caching=dep.enable_prefix_caching,
            gpu_memory_utilization=dep.gpu_memory_utilization,
            cuda_graph_bytes=0 if dep.enforce_eager else None,
            headroom_bytes=dep.headroom_bytes,
        )
        planned = Planned(model=loaded, gpu=gpu, settings=serve)
        weights = per_rank(loaded, tp=dep.tp, pp=dep.pp)
        if dep.engine is Engine.VLLM:
            return _check_vllm(dep, planned, weights, settings)
        return _check_other(dep, planned, weights, settings)
    except KvplanError as exc:
        return _result(dep, "error", settings, [], None, None, error=str(exc))


def _result(
    dep: Deployment,
    status: str,
    settings: dict[str, Any],
    checks: list[Check],
    figures: Figures | None,
    fix: str | None,
    error: str | None = None,
    model: str | None = None,
) -> DeploymentResult:
    limiting = min(checks, key=lambda c: c.margin) if checks else None
    return DeploymentResult(
        name=dep.name,
        line=dep.line,
        status=status,
        model=model or dep.model,
        engine=dep.engine.value,
        gpu=dep.gpu_name,
        gpu_memory_bytes=dep.gpu_memory_bytes,
        settings=settings,
        checks=checks,
        limiting=limiting.name if limiting else None,
        margin=round(limiting.margin, 4) if limiting else None,
        figures=figures,
        fix=fix,
        error=error,
    )


def _at_least(name: str, resource: str, unit: str, required: float, actual: float) -> Check:
    margin = actual / required - 1 if required else math.inf
    return Check(name, resource, unit, required, actual, actual >= required, margin)


def _at_most(name: str, resource: str, unit: str, required: float, actual: float) -> Check:
    margin = required / actual - 1 if actual else math.inf
    return Check(name, resource, unit, required, actual, actual <= required, margin)


def _requirements(dep: Deployment, concurrency: float, tokens: int, usage: float) -> list[Check]:
    """The optional requirement checks, the same for every engine."""
    checks = []
    if dep.min_concurrency is not None:
        checks.append(
            _at_least("min_concurrency", "concurrency", "x", dep.min_concurrency, concurrency)
        )
    if dep.min_kv_tokens is not None:
        checks.append(_at_least("min_kv_tokens", "KV tokens", "tokens", dep.min_kv_tokens, tokens))
    if dep.max_kv_usage is not None:
        checks.append(_at_most("max_kv_usage", "KV usage", "ratio", dep.max_kv_usage, usage))
    return checks


def _check_vllm(
    dep: Deployment, planned: Planned, weights: Weights, settings: dict[str, Any]
) -> DeploymentResult:
    """vLLM: the same :func:`planner.recommend.plan` as ``kvplan estimate --gpu``."""
    from planner.errors import DoesNotFitError
    from planner.recommend import PlanOptions, plan

    spec, gmu = planned.spec, planned.settings.gmu
    settings["gpu_memory_utilization"] = gmu
    try:
        # no max_model_len x max_num_seqs grid: the check needs one cell
        p = plan(planned, PlanOptions(grid_lens=(), batch_sizes=()))
    except DoesNotFitError as exc:
        memory = planned.gpu.memory_bytes if planned.gpu else 0
        requested = math.ceil(memory * gmu)
        check = _at_most("weights", "weights", "bytes", requested, weights.bytes_per_rank)
        # the planner's suggestions are data; a plans file spells them as its keys
        fix = ", or ".join(_yaml_fix(change) for change in exc.changes) or None
        return _result(dep, "fail", settings, [check], None, fix, model=spec.name)
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
    checks += _requirements(dep, cap.max_concurrency, cap.kv_cache_size_tokens, usage)
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
    fix = None if ok else _vllm_fix(dep, p, checks)
    return _result(dep, "pass" if ok else "fail", settings, checks, figures, fix, model=spec.name)


def _yaml_fix(change: dict[str, object] | str) -> str:
    """One of the planner's suggestions as a plans file spells it."""
    from planner.deployment import render_changes

    text = render_changes(change, "yaml")
    return f"a bigger GPU ({text})" if isinstance(change, dict) and "gpu" in change else text


def _vllm_fix(dep: Deployment, p: Plan, checks: list[Check]) -> str:
    """What to change, from the planner's own numbers: vLLM's estimated maximum length, the
    max_num_seqs that meets max_kv_usage, and the fp8 / TP alternatives that pass every check
    (with the max_num_seqs each needs for max_kv_usage)."""
    cap = p.vllm
    failed = {c.name for c in checks if not c.passed}
    per_request = cap.blocks_per_request

    def seqs_within(blocks: int) -> int:
        """Most full-length sequences whose blocks stay within max_kv_usage of the pool."""
        return int((dep.max_kv_usage or 0) * max(blocks - 1, 0) // per_request)

    from planner.deployment import as_yaml

    fixes: list[str] = []
    if "max_model_len" in failed:
        if cap.estimated_max_model_len:
            fixes.append(f"max_model_len: {cap.estimated_max_model_len} (vLLM's estimate)")
        else:
            fixes.append("more GPU memory: weights and activations leave no KV cache")
    if failed == {"max_kv_usage"} and seqs_within(cap.num_gpu_blocks) >= 1:
        fixes.append(f"max_num_seqs: {seqs_within(cap.num_gpu_blocks)}")
    length = p.estimate.max_model_len
    for alt in p.alternatives:
        tokens = int(alt.max_concurrency * length)
        if not alt.fits or alt.max_concurrency < (dep.min_concurrency or 0):
            continue
        if tokens < (dep.min_kv_tokens or 0):
            continue
        knob = as_yaml(alt.changes)
        text = f"{knob} ({alt.max_concurrency:.2f}x, {tokens:,} tokens)"
        usable = max(alt.num_gpu_blocks - 1, 0)
        if dep.max_kv_usage is not None and cap.max_num_seqs * per_request > (
            dep.max_kv_usage * usable
        ):
            if seqs_within(alt.num_gpu_blocks) < 1:
                continue
            text += f" with max_num_seqs: {seqs_within(alt.num_gpu_blocks)}"
        fixes.append(text)
    if not fixes:
        fixes.append("a larger GPU, more TP, or a shorter max_model_len")
    return "; or ".join(fixes)


def _check_other(
    dep: Deployment, planned: Planned, weights: Weights, settings: dict[str, Any]
) -> DeploymentResult:
    """SGLang / TRT-LLM: their budget models from :mod:`planner.budget` (the figures are the
    engine's, not vLLM's)."""
    from planner.kv_layout import estimate

    spec = planned.spec
    est = estimate(spec, planned.settings, planned.gpu, batch_sizes=())
    cap = engine_capacity(dep, planned, est, weights)
    settings.update(
        max_model_len=est.max_model_len,
        kv_cache_dtype=est.kv_cache_dtype,
        block_size=est.block_size,
        gpu_memory_utilization=cap.fraction,
    )
    seqs = dep.max_num_seqs  # the engines' own defaults admit until the pool is full
    usage = (seqs / cap.max_concurrency if cap.max_concurrency else math.inf) if seqs else math.nan
    checks = [
        _at_least("max_model_len", "requests of max_model_len", "x", 1.0, cap.max_concurrency)
    ]
    checks += _requirements(dep, cap.max_concurrency, cap.max_total_tokens, usage)
    figures = Figures(
        source=dep.engine.value,
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
    fix = None
    if not ok:
        fixes = []
        failed = {c.name for c in checks if not c.passed}
        if "max_model_len" in failed and cap.max_total_tokens > 0:
            fixes.append(f"max_model_len: {cap.max_total_tokens} (the whole KV pool)")
        if "max_kv_usage" in failed and dep.max_kv_usage is not None:
            seqs_ok = int(dep.max_kv_usage * cap.max_concurrency)
            if seqs_ok >= 1:
                fixes.append(f"max_num_seqs: {seqs_ok}")
        if est.kv_dtype_bytes > 1:
            fixes.append("kv_cache_dtype: fp8 (half the KV bytes per token)")
        fixes.append(f"tp: {dep.tp * 2} or a larger GPU")
        fix = "; or ".join(fixes)
    return _result(dep, "pass" if ok else "fail", settings, checks, figures, fix, model=spec.name)


def engine_capacity(
    dep: Deployment, planned: Planned, est: KVEstimate, weights: Weights
) -> EngineCapacity:
    """SGLang or TRT-LLM capacity with the deployment's fraction (engine default when unset);
    headroom is memory the KV cache may not use, so it is counted with the weights."""
    from planner.budget import activation_peak_bytes, sglang_capacity, trtllm_capacity
    from planner.kv_layout import estimate

    taken = weights.bytes_per_rank + dep.headroom_bytes
    if dep.engine is Engine.SGLANG:
        return sglang_capacity(
            est,
            gpu_memory_bytes=dep.gpu_memory_bytes,
            weights_bytes=taken,
            mem_fraction_static=dep.gpu_memory_utilization,
        )
    # NOTE: as in recommend.plan, TRT-LLM's activation is vLLM's profile run at vLLM's default
    # token budget for this GPU.
    as_vllm = replace(
        planned.settings,
        engine=Engine.VLLM,
        block_size=None,
        max_model_len=est.max_model_len,
        max_num_seqs=None,
        max_num_batched_tokens=None,
    )
    vllm = estimate(planned.spec, as_vllm, planned.gpu, batch_sizes=()).vllm
    assert vllm is not None
    return trtllm_capacity(
        est,
        gpu_memory_bytes=dep.gpu_memory_bytes,
        weights_bytes=taken,
        activation_bytes=activation_peak_bytes(planned.spec, vllm.max_num_batched_tokens),
        free_gpu_memory_fraction=dep.gpu_memory_utilization or 0.9,
    )
