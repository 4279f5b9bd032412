"""What ``kvplan verify --step-times OUT`` times, what the step-time model predicts for the same
steps, and the file it writes. No torch here (the timing itself is :mod:`probes.steptimes`):
the CLI parses and checks the grid, and render prints a result, without importing it.

The grid: decode steps of ``batch`` sequences, each attending to ``context`` keys (its cached
tokens plus the new one), for every batch size x context; and one prefill step per context,
one sequence of ``context`` tokens from an empty cache in one chunk. Each point is written
the way :mod:`planner.simulate.steptimes` looks a step up, so ``kvplan simulate --step-times
OUT`` replays with the measured clock: ``tokens`` is what the step schedules (the batch size;
the prompt length), ``context`` the KV tokens each scheduled sequence reads, the engine's
``kv_tokens / seqs`` (``planner/simulate/engine.py``: ``kv`` counts the new tokens too). A
prefill of ``t`` tokens from scratch is therefore looked up at context ``t``, so the prefill
of each context lands in that context's table next to its decode rows.

Worked example (batches 1, 8; contexts 512, 2048): rows (512, 1), (512, 8), (512, 512 prefill),
(2048, 1), (2048, 8), (2048, 2048 prefill). A 16-sequence decode step at context 1,000 is
interpolated between the two contexts' tables, each extrapolated from its 8-token row on.

The prediction is :class:`planner.simulate.clock.StepModel` for the GPU the comparison is
for (``step_s(tokens, kv_tokens, pairs, seqs)``, the same arguments the simulator passes):
a decode point reads ``batch x context`` KV tokens and scores as many pairs; a prefill of
``t`` tokens reads ``t`` and scores ``t (t + 1) / 2`` (causal).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from planner.errors import UsageError

if TYPE_CHECKING:
    from planner.deployment import ServeSettings
    from planner.gpus import Gpu
    from planner.model.specs import ModelSpec
    from planner.simulate.clock import StepModel

DEFAULT_BATCHES = (1, 8, 32, 128)
DEFAULT_CONTEXTS = (512, 2048, 8192)
WARMUP = 2  # untimed runs before each point (allocator, kernel selection, caches)
REPEATS = 5  # timed runs of each point; the median is written
MAX_POINTS = 64  # each point is a step through every timed layer


def parse_counts(text: str | None, flag: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """A comma list of whole numbers >= 1 (``1,8,32``), ascending and without repeats; the
    default when not given."""
    if text is None:
        return default
    values: list[int] = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if not part.isascii() or not part.isdigit() or int(part) < 1:
            raise UsageError(f"{flag} {text!r}: give whole numbers >= 1 separated by commas")
        values.append(int(part))
    if not values:
        raise UsageError(f"{flag} {text!r}: give at least one number")
    return tuple(sorted(set(values)))


def check_grid(batches: tuple[int, ...], contexts: tuple[int, ...]) -> None:
    """Refuse a grid of more than ``MAX_POINTS`` steps (each decode batch at each context,
    and a prefill per context) before anything is loaded."""
    count = len(batches) * len(contexts) + len(contexts)
    if count > MAX_POINTS:
        raise UsageError(
            f"{count} steps to time ({len(batches)} batch sizes x {len(contexts)} contexts + "
            f"{len(contexts)} prefills); at most {MAX_POINTS}: give fewer --step-batches or "
            "--step-contexts"
        )


@dataclass(frozen=True)
class StepGrid:
    """The steps to time: decode ``(batch, context)`` pairs and prefill lengths."""

    decode: tuple[tuple[int, int], ...]
    prefill: tuple[int, ...]
    notes: tuple[str, ...] = ()

    @property
    def contexts(self) -> tuple[int, ...]:
        return tuple(sorted({c for _, c in self.decode} | set(self.prefill)))


def plan_grid(
    batches: tuple[int, ...],
    contexts: tuple[int, ...],
    *,
    max_model_len: int,
    max_num_seqs: int,
) -> StepGrid:
    """The grid for ``batches`` x ``contexts`` under the plan's limits: contexts above
    ``max_model_len`` dropped (``max_model_len`` itself when none is left), batches above
    ``max_num_seqs`` dropped (``max_num_seqs`` itself when none is left), and a context's
    prefill dropped where it would be the same ``(context, tokens)`` row as a decode batch.
    (What memory holds is decided on the device: points that do not fit are skipped there.)"""
    notes: list[str] = []
    ctx = tuple(c for c in contexts if c <= max_model_len) or (max_model_len,)
    if len(ctx) < len(contexts) or ctx[0] not in contexts:
        notes.append(f"contexts capped at max_model_len {max_model_len:,}")
    bat = tuple(b for b in batches if b <= max_num_seqs) or (max_num_seqs,)
    if len(bat) < len(batches) or bat[0] not in batches:
        notes.append(f"batch sizes capped at max_num_seqs {max_num_seqs:,}")
    prefill = tuple(c for c in ctx if c not in bat)
    for c in ctx:
        if c in bat:
            notes.append(
                f"no prefill of {c:,} tokens: the row (context {c:,}, tokens {c:,}) is the "
                f"{c:,}-sequence decode step"
            )
    check_grid(bat, ctx)
    decode = tuple((b, c) for c in ctx for b in bat)
    return StepGrid(decode=decode, prefill=prefill, notes=tuple(notes))


@dataclass(frozen=True)
class StepPoint:
    """One timed step and its prediction (a row of the table and of OUT).

    Attributes:
        kind: ``decode`` or ``prefill``.
        batch: sequences in the step (1 for a prefill).
        context: KV tokens each sequence reads (``kv_tokens / batch``), OUT's ``context``.
        tokens: tokens the step schedules, OUT's ``tokens``.
        kv_tokens: KV tokens the step reads in all.
        pairs: (query, key) pairs it scores.
        seconds: the measured median, OUT's ``seconds`` (scaled to every layer when a subset
            was timed).
        predicted_s: the step-time model's seconds for the same step (None without a GPU
            to predict for).
        ratio: ``predicted_s / seconds``.
    """

    kind: str
    batch: int
    context: int
    tokens: int
    kv_tokens: int
    pairs: int
    seconds: float
    predicted_s: float | None = None
    ratio: float | None = None


def step_inputs(kind: str, batch: int, context: int) -> tuple[int, int, int]:
    """(tokens, kv_tokens, pairs) of a point, as the simulator counts a step."""
    if kind == "decode":
        return batch, batch * context, batch * context
    return context, context, context * (context + 1) // 2


@dataclass
class StepTimesResult:
    """``kvplan verify --step-times OUT``'s result (``--json``)."""

    model: str
    device: str
    device_name: str
    predicted_for: str
    comparable: bool
    tensor_parallel_size: int
    dtype: str
    kv_cache_dtype: str
    block_size: int
    max_model_len: int
    num_layers: int
    layers_timed: int
    warmup: int
    repeats: int
    timer: str
    out: str
    points: list[StepPoint]
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)


def step_model(spec: ModelSpec, settings: ServeSettings, gpu: Gpu) -> StepModel:
    """The simulator's step-time model of ``spec`` on one ``gpu`` rank with ``settings``
    (as ``kvplan simulate --gpu`` builds it: release, async scheduling, eager mode, TP)."""
    from planner.kv_layout import estimate
    from planner.simulate.clock import step_model_for
    from planner.simulate.roofline import estimate_params
    from planner.vllm_rules import NEWEST_VERSION, parse_version

    est = estimate(spec, settings, gpu)
    return step_model_for(
        spec,
        est,
        gpu,
        estimate_params(spec),
        release=parse_version(settings.vllm_version or NEWEST_VERSION),
        async_scheduling=settings.rules.async_scheduling,
        enforce_eager=settings.enforce_eager,
    )


def with_predictions(
    points: list[StepPoint], model: StepModel | None, *, comparable: bool
) -> list[StepPoint]:
    """``points`` with the model's seconds and, where the steps ran on the GPU predicted for
    (``comparable``), predicted / measured of each (None elsewhere: a CPU's step says nothing
    of an H100's)."""
    if model is None:
        return points
    out = []
    for p in points:
        predicted = model.step_s(p.tokens, p.kv_tokens, p.pairs, p.batch)
        ratio = predicted / p.seconds if comparable and p.seconds > 0 else None
        out.append(replace(p, predicted_s=predicted, ratio=ratio))
    return out


def file_text(result: StepTimesResult, *, as_json: bool) -> str:
    """OUT's text: the format ``kvplan simulate --step-times`` reads (CSV ``context,tokens,
    seconds`` plus ``kind`` and ``batch`` columns it ignores, with ``#`` comment lines saying
    what was timed; or a JSON list of objects with the same keys)."""
    rows = sorted(result.points, key=lambda p: (p.context, p.tokens))
    if as_json:
        items = [
            {
                "context": p.context,
                "tokens": p.tokens,
                "seconds": float(f"{p.seconds:.6g}"),
                "kind": p.kind,
                "batch": p.batch,
            }
            for p in rows
        ]
        return json.dumps(items, indent=2) + "\n"
    lines = [
        f"# kvplan verify --step-times: {result.model} on {result.device_name or result.device}, "
        f"TP {result.tensor_parallel_size}, {result.dtype}, KV {result.kv_cache_dtype}, "
        f"{result.layers_timed} of {result.num_layers} layers timed",
        "# decode: `tokens` sequences each reading `context` keys; prefill: one sequence of "
        "`tokens` tokens from an empty cache (context = tokens)",
        f"# median of {result.repeats} after {result.warmup} warm-up runs ({result.timer})",
        "context,tokens,seconds,kind,batch",
    ]
    lines += [f"{p.context},{p.tokens},{p.seconds:.6g},{p.kind},{p.batch}" for p in rows]
    return "\n".join(lines) + "\n"
