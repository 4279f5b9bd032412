"""Time decode and prefill steps of a model's real geometry (``kvplan verify --step-times``).

One rank's layers at the planned TP (:func:`probes.weights.model_dims`) with random weights in
the model's dtype, a paged KV pool in the planned KV dtype and block size
(:mod:`probes.paged`), and the probe's own passes (:meth:`ProbeModel.decode_step`,
:meth:`ProbeModel.prefill` then the sampler): for each point of the grid
(:mod:`probes.stepgrid`) ``WARMUP`` untimed runs, then the median of ``REPEATS`` timed ones.
CUDA: CUDA events around each step (the GPU's time from the step's first kernel to its last,
waits for the host's launches included); CPU: ``time.perf_counter``.

What the steps are not: vLLM's kernels. Attention is :mod:`probes.attention`'s pure-torch
paged attention (gather by block table, online softmax over chunks), every op is launched
eagerly from Python (no CUDA graphs, no fused kernels), there is no rotary embedding, and MoE
tokens go to the first ``top_k`` experts. So a measured step is what this geometry costs in
eager PyTorch, an upper bound of what an engine pays for the same shapes.

Weights that take more than half the memory the probe may use are timed on the first ``k``
layers only (those whose weights fit in that half); each point is then also timed with no
layers at all (embedding and sampler: ``head``), and the step is scaled to every layer::

    seconds = head + (t_k - head) x num_layers / k

Worked example: 20 of 80 layers timed, ``t_k`` 30 ms, ``head`` 2 ms -> 2 + 28 x 4 = 114 ms.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import torch

from planner.errors import DoesNotFitError, UsageError
from planner.gpus import Gpu, lookup_gpu
from planner.model.specs import ModelSpec
from probes.alloc import CudaMemory
from probes.model import ProbeModel, allocate_weights, model_windows
from probes.paged import (
    PagedKVPool,
    PoolLayout,
    SequenceState,
    model_dtype,
    pool_layout,
    rank_layers,
)
from probes.plan import VerifyRequest, check_request
from probes.probe import check_device, device_gpu, estimate_for
from probes.stepgrid import (
    DEFAULT_BATCHES,
    DEFAULT_CONTEXTS,
    REPEATS,
    WARMUP,
    StepPoint,
    StepTimesResult,
    plan_grid,
    step_inputs,
    step_model,
    with_predictions,
)
from probes.weights import ModelDims, model_dims, total_weight_bytes

CUDA_CHUNK_BYTES = 256 << 20  # K/V gathered per attention chunk on CUDA: fewer Python loops
MIN_CHUNK_BYTES = 64 << 10
DEFAULT_COMPARE_GPU = "h100"  # on CPU, as kvplan simulate without --gpu


def compare_gpu(device: str, name: str | None) -> tuple[Gpu | None, bool, str]:
    """The GPU the measured steps are compared with, whether the comparison means anything
    (the steps ran on that GPU), and a note where there is none: ``name`` (``--step-gpu``) or
    the probed CUDA device's catalog entry; on CPU ``DEFAULT_COMPARE_GPU``."""
    on_cuda = device.startswith("cuda")
    here = torch.cuda.get_device_name(_index(device)) if on_cuda else ""
    local: Gpu | None = None
    if here:
        with contextlib.suppress(UsageError):
            local = lookup_gpu(here).gpu
    if name:
        gpu = lookup_gpu(name).gpu
        return gpu, local is not None and local.name == gpu.name, ""
    if on_cuda:
        if local is None:
            return None, False, f"{here} is not in the catalog: no prediction (--step-gpu NAME)"
        return local, True, ""
    return lookup_gpu(DEFAULT_COMPARE_GPU).gpu, False, ""


def _index(device: str) -> int:
    index = device.partition(":")[2]
    return int(index) if index else torch.cuda.current_device()


def measure_step_times(
    spec: ModelSpec,
    req: VerifyRequest,
    batches: tuple[int, ...] = DEFAULT_BATCHES,
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS,
    *,
    out: str,
    gpu_name: str | None = None,
    on_point: Callable[[str], None] | None = None,
) -> StepTimesResult:
    """Time ``grid``'s steps of ``spec`` on ``req.device`` and compare them with the
    step-time model (module docstring).

    Args:
        spec: the model.
        req: serving settings (TP, dtypes, block size, limits) and the device and budget.
        batches, contexts: the grid, capped by the plan (:func:`probes.stepgrid.plan_grid`).
        out: the file the points will be written to (for the report).
        gpu_name: the catalog GPU to predict for (``--step-gpu``); default the device's.
        on_point: called with each point's label before it is timed (progress).

    Returns:
        The :class:`StepTimesResult`; points that do not fit in memory are listed in
        ``skipped``. Raises :class:`DoesNotFitError` when not one fits.
    """
    check_request(req)
    check_device(req)
    clock = time.perf_counter()
    gpu_here = device_gpu(req.device)
    est = estimate_for(spec, req, gpu_here)
    assert est.vllm is not None
    grid = plan_grid(
        batches, contexts, max_model_len=est.max_model_len, max_num_seqs=est.vllm.max_num_seqs
    )
    target, comparable, compare_note = compare_gpu(req.device, gpu_name)
    model_of_steps = step_model(spec, req.settings, target) if target is not None else None
    budget = req.memory_budget_bytes
    if budget is None:
        assert gpu_here is not None  # check_request: CPU needs --memory-budget
        budget = math.ceil(gpu_here.memory_bytes * req.settings.gmu)
    limit = min(budget, req.max_memory_bytes or budget)
    dtype = model_dtype(spec)
    item = torch.empty((), dtype=dtype).element_size()
    dims = model_dims(spec, req.settings.tp, est.kv_heads_per_rank or None)
    num_layers = len(dims.layers)
    timed = _layers_that_fit(dims, item, limit // 2)
    if timed == 0:
        raise DoesNotFitError(
            f"{spec.name}: not even one layer's weights fit in half the {limit:,} B the probe "
            "may use; raise --memory-budget (or --max-memory), or use --tp"
        )
    sub = replace(dims, layers=dims.layers[:timed])
    layout = _subset_layout(pool_layout(spec, est), {layer.index for layer in sub.layers})
    on_cuda = req.device.startswith("cuda")
    device = torch.device(req.device)
    # K/V gathered per attention chunk: at most an eighth of the budget
    chunk = max(
        MIN_CHUNK_BYTES, min(CUDA_CHUNK_BYTES if on_cuda else req.max_chunk_bytes, limit // 8)
    )
    memory = CudaMemory(limit, _index(req.device)) if on_cuda else contextlib.nullcontext()
    notes = [*grid.notes]
    if compare_note:
        notes.append(compare_note)
    if timed < num_layers:
        notes.append(
            f"timed {timed} of {num_layers} layers (the weights of all do not fit in half the "
            f"budget) and scaled: head + (step - head) x {num_layers} / {timed}"
        )
    notes.append(
        "steps are eager PyTorch with the probe's pure-torch paged attention (probes/"
        "attention.py), not vLLM's kernels or CUDA graphs"
    )
    skipped: list[str] = []
    with torch.inference_mode(), memory:
        try:
            weights, owners = allocate_weights(sub, dtype, device)
        except torch.OutOfMemoryError:
            raise DoesNotFitError(
                f"{spec.name}: the weights of {timed} layers do not fit on {device} under "
                f"{limit:,} B; raise --memory-budget / --max-memory or free the device"
            ) from None
        weights_bytes = sum(t.numel() * t.element_size() for t in owners)
        model = ProbeModel(sub, weights, dtype)
        specs = {i: s for i, s in enumerate(rank_layers(spec, est)) if s is not None}
        model.set_windows(model_windows(dict(specs)))
        head = ProbeModel(replace(sub, layers=()), weights, dtype) if timed < num_layers else None
        free = limit - weights_bytes
        timer = _cuda_timer(device) if on_cuda else _cpu_timer
        points: list[StepPoint] = []
        for context in grid.contexts:
            wanted = [b for b, c in grid.decode if c == context]
            prefill = context in grid.prefill
            fits = [
                b
                for b in wanted
                if _pool_bytes(layout, b, context, prefill) + _reserve(sub, item, b, b, chunk)
                <= free
            ]
            for b in wanted:
                if b not in fits:
                    skipped.append(f"decode {b} x {context:,}: its KV does not fit")
            if prefill and (
                _pool_bytes(layout, 0, context, True) + _reserve(sub, item, context, 1, chunk)
                > free
            ):
                skipped.append(f"prefill {context:,}: its KV and activations do not fit")
                prefill = False
            if not fits and not prefill:
                continue
            if on_point:
                on_point(f"context {context:,}")
            while fits or prefill:  # out of memory: again without the largest batch
                try:
                    points += _time_context(
                        model, head, layout, context, fits, prefill, timer, chunk, num_layers
                    )
                    break
                except torch.OutOfMemoryError:
                    _release(on_cuda)
                    if fits:
                        skipped.append(f"decode {fits.pop()} x {context:,}: out of memory")
                    else:
                        skipped.append(f"prefill {context:,}: out of memory")
                        prefill = False
            _release(on_cuda)
        del model, head, weights, owners
        _release(on_cuda)
    if not points:
        raise DoesNotFitError(
            f"{spec.name}: no step of the grid fits in {limit:,} B after {weights_bytes:,} B of "
            "weights; raise --memory-budget or give smaller --step-batches / --step-contexts"
        )
    return StepTimesResult(
        model=spec.name,
        device=str(device),
        device_name=torch.cuda.get_device_name(device) if on_cuda else "CPU",
        predicted_for=target.name if target is not None else "",
        comparable=comparable,
        tensor_parallel_size=est.tensor_parallel_size,
        dtype=str(dtype).removeprefix("torch."),
        kv_cache_dtype=est.kv_cache_dtype,
        block_size=est.block_size,
        max_model_len=est.max_model_len,
        num_layers=num_layers,
        layers_timed=timed,
        warmup=WARMUP,
        repeats=REPEATS,
        timer="CUDA events" if on_cuda else "time.perf_counter",
        out=out,
        points=with_predictions(points, model_of_steps, comparable=comparable),
        skipped=skipped,
        notes=notes,
        timings_s={"total": round(time.perf_counter() - clock, 2)},
    )


def _time_context(
    model: ProbeModel,
    head: ProbeModel | None,
    layout: PoolLayout,
    context: int,
    batches: list[int],
    prefill: bool,
    timer: Timer,
    chunk: int,
    num_layers: int,
) -> list[StepPoint]:
    """The decode points of ``batches`` at ``context`` (one pool for the largest batch,
    sequences of ``context - 1`` cached tokens) and its prefill point."""
    timed = len(model.dims.layers)
    largest = max(batches, default=0)
    pool = PagedKVPool(layout, _blocks(layout, largest, context, prefill), model.device)
    seqs = [pool.add_sequence(context - 1, context) for _ in range(largest)]
    points = []
    for b in batches:
        run = _decode(model, pool, seqs[:b], context, chunk)
        base = _decode(head, pool, seqs[:b], context, chunk) if head is not None else None
        points.append(_point("decode", b, context, _scaled(timer, run, base, num_layers, timed)))
    if prefill:
        seq = pool.add_sequence(0, context)
        ids = torch.randint(0, model.dims.vocab, (context,), device=model.device)
        run = _prefill(model, pool, seq, ids, chunk)
        base = _prefill(head, pool, seq, ids, chunk) if head is not None else None
        points.append(_point("prefill", 1, context, _scaled(timer, run, base, num_layers, timed)))
    return points


def _point(kind: str, batch: int, context: int, seconds: float) -> StepPoint:
    tokens, kv, pairs = step_inputs(kind, batch, context)
    return StepPoint(kind, batch, context, tokens, kv, pairs, seconds)


def _layers_that_fit(dims: ModelDims, item: int, cap: int) -> int:
    """The most leading layers whose weights (with embedding and head) fit in ``cap``."""
    lo, hi = 0, len(dims.layers)
    if total_weight_bytes(dims, item) <= cap:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if total_weight_bytes(replace(dims, layers=dims.layers[:mid]), item) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _subset_layout(layout: PoolLayout, layers: set[int]) -> PoolLayout:
    """``layout`` holding only ``layers``' pages (the raw tensors the others would use
    dropped), so a pool for a subset of layers costs only their bytes."""
    group = {i: g for i, g in layout.layer_group.items() if i in layers}
    position = {i: p for i, p in layout.layer_position.items() if i in layers}
    width = max(position.values(), default=-1) + 1
    return replace(
        layout,
        layer_group=group,
        layer_position=position,
        position_bytes=layout.position_bytes[:width],
    )


def _blocks(layout: PoolLayout, batch: int, context: int, prefill: bool) -> int:
    """Blocks for ``batch`` decoding sequences of ``context`` tokens (and one prefilling
    sequence), plus vLLM's null block."""
    per = layout.blocks_per_request(context)
    return (batch + (1 if prefill else 0)) * per + 1


def _pool_bytes(layout: PoolLayout, batch: int, context: int, prefill: bool) -> int:
    return _blocks(layout, batch, context, prefill) * layout.bytes_per_block


def _reserve(dims: ModelDims, item: int, tokens: int, sampled: int, chunk: int) -> int:
    """Activation bytes to leave free for a step of ``tokens`` tokens of which ``sampled``
    are sampled (a bound, not a measurement: the hidden states, the widest projection, the
    logits with their float32 softmax, and the attention chunks)."""
    widest = 0
    for layer in dims.layers:
        if layer.mixer is not None:
            m = layer.mixer
            widest = max(widest, (m.q_heads + 2 * m.kv_heads) * max(m.head_dim, 1), m.state_in)
        if layer.mlp is not None:
            widest = max(widest, 2 * layer.mlp.intermediate * max(1, layer.mlp.top_k))
    per_token = item * (8 * dims.hidden + 3 * widest)
    return tokens * per_token + sampled * dims.vocab * (item + 8) + 2 * chunk


def _decode(
    model: ProbeModel, pool: PagedKVPool, seqs: list[SequenceState], context: int, chunk: int
) -> Callable[[], object]:
    def run() -> object:
        for s in seqs:
            s.num_tokens = context - 1  # each step reads the same context
        return model.decode_step(pool, seqs, max_chunk_bytes=chunk)

    return run


def _prefill(
    model: ProbeModel, pool: PagedKVPool, seq: SequenceState, ids: torch.Tensor, chunk: int
) -> Callable[[], object]:
    def run() -> object:
        seq.num_tokens = 0  # a prompt from an empty cache, every run
        last = model.prefill(pool, seq, ids, chunk_tokens=ids.shape[0], max_chunk_bytes=chunk)
        return model.sample(last)

    return run


Timer = Callable[[Callable[[], object]], float]


def _scaled(
    timer: Timer,
    run: Callable[[], object],
    head: Callable[[], object] | None,
    num_layers: int,
    timed: int,
) -> float:
    """The step's seconds, scaled to every layer when only ``timed`` were run."""
    seconds = timer(run)
    if head is None or timed >= num_layers:
        return seconds
    base = timer(head)
    return base + max(0.0, seconds - base) * num_layers / timed


def _cpu_timer(run: Callable[[], object]) -> float:
    for _ in range(WARMUP):
        run()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(statistics.median(times))


def _cuda_timer(device: torch.device) -> Timer:
    def timer(run: Callable[[], object]) -> float:
        with torch.cuda.device(device):  # the events on the probed device's stream
            for _ in range(WARMUP):
                run()
            torch.cuda.synchronize(device)
            times = []
            for _ in range(REPEATS):
                start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                start.record()
                run()
                end.record()
                end.synchronize()
                times.append(float(start.elapsed_time(end)) / 1000)  # ms -> s
        return float(statistics.median(times))

    return timer


def _release(on_cuda: bool) -> None:
    gc.collect()
    if on_cuda:
        torch.cuda.empty_cache()
