"""The probe: live the plan on a real allocator and report predicted vs measured.

Steps, as vLLM starts an engine (ENGINES.md section 1.2):

1. **Budget.** CUDA: ``ceil(total x gpu_memory_utilization)`` (or ``--memory-budget``); CPU:
   ``--memory-budget``, enforced by :class:`~probes.alloc.BudgetedAllocator`. ``--max-memory``
   caps either; the probe never asks torch for more than the cap.
2. **Weights.** Occupy the rank's weight bytes (:mod:`probes.weights`): real-shaped random
   tensors, or one buffer with ``weights_buffer``. Refused up front when the weights alone
   exceed the budget.
3. **Profile.** One step of ``max_num_batched_tokens`` through real-shaped attention + MLP and
   the sampler (:meth:`ProbeModel.profile_step`). As ``memory_profiling`` does: non-KV memory =
   what stays allocated + (peak - what stays) + non-torch growth.
4. **Prediction.** ``num_gpu_blocks = (budget - non_kv) // bytes_per_block``
   (:func:`probes.plan.predict_num_gpu_blocks`), or a plan file's own ``num_gpu_blocks``.
5. **Planned run.** (Decode gathers K/V in chunks of at most a quarter of the measured
   activation headroom.) Allocate that pool, admit ``max_num_seqs`` sequences at
   ``max_model_len`` (as many as the pool holds, plus one shorter sequence in the leftover
   blocks), fill the pool, run ``decode_steps`` decode steps; record the peak, ``mem_get_info``
   and non-torch memory.
6. **Frontier.** Bisect the largest pool that allocates and runs one decode step
   (:mod:`probes.frontier`), releasing memory after every out-of-memory trial and checking it
   returns to the baseline.

The measured figures come from step 6 (blocks, and from them tokens and concurrency) and from
steps 3 and 5 (peak bytes); predicted ones from step 4. ``passed`` is false when the measured
frontier is below the prediction by more than ``tolerance_pct``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

import torch

import planner
from planner.errors import DoesNotFitError, UsageError
from planner.gpus import Gpu
from planner.kv_layout import KVEstimate
from planner.model.specs import ModelSpec
from probes.alloc import CudaMemory, DeviceMemory, open_device, require_cuda
from probes.frontier import FrontierSearch, find_frontier, oom_trial
from probes.model import ProbeModel, allocate_weights, model_windows
from probes.paged import (
    NoFreeBlocksError,
    PagedKVPool,
    PoolLayout,
    SequenceState,
    model_dtype,
    pool_layout,
    rank_layers,
)
from probes.plan import (
    MemoryReport,
    PlannedRun,
    ProbeResult,
    Trial,
    VerifyRequest,
    capacity,
    check_device_free,
    check_one_request,
    check_request,
    error_pct,
    planner_num_gpu_blocks,
    predict_num_gpu_blocks,
)
from probes.weights import ModelDims, model_dims, total_weight_bytes

MIN_CHUNK_BYTES = 64 << 10


def estimate_for(spec: ModelSpec, req: VerifyRequest, gpu: Gpu | None) -> KVEstimate:
    """The vLLM estimate the probe verifies (the one ``kvplan estimate`` prints for the same
    settings on the same GPU: an A100 gets vLLM's small batch defaults here too)."""
    return planner.estimate(spec, req.settings, gpu)


def device_gpu(device: str) -> Gpu | None:
    """The CUDA device as a :class:`~planner.deployment.Gpu` (its driver name and total), or
    None on CPU or without CUDA."""
    if not device.startswith("cuda"):
        return None
    if not torch.cuda.is_available():
        return None  # open_device raises the user-facing error
    index = int(device.partition(":")[2] or torch.cuda.current_device())
    total = int(torch.cuda.mem_get_info(index)[1])
    name = torch.cuda.get_device_name(index)
    return Gpu(name=name, memory_bytes=total, source="torch.cuda.mem_get_info")


def check_device(req: VerifyRequest) -> None:
    """On CUDA, refuse a budget the device cannot allocate now (``mem_get_info``'s free
    bytes, :func:`probes.plan.check_device_free`) before the model is loaded; on CPU
    :func:`probes.plan.check_request` has checked ``MemAvailable``."""
    if not req.device.startswith("cuda"):
        return
    require_cuda()
    index = req.device.partition(":")[2]
    count = torch.cuda.device_count()
    if index and int(index) >= count:
        raise UsageError(
            f"--device {req.device}: torch sees {count} CUDA device(s) (cuda:0 to "
            f"cuda:{count - 1}); pick one of them or set CUDA_VISIBLE_DEVICES"
        )
    free, total = torch.cuda.mem_get_info(int(index) if index else torch.cuda.current_device())
    check_device_free(req, int(free), int(total))


def verify(
    spec: ModelSpec,
    req: VerifyRequest,
    *,
    on_trial: Callable[[Trial], None] | None = None,
    memory: DeviceMemory | None = None,
) -> ProbeResult:
    """Prove (or refute) the vLLM plan for ``spec`` on ``req.device``.

    Args:
        spec: the model.
        req: serving flags and probe settings.
        on_trial: called after each bisection trial (progress).
        memory: the device memory to use (tests pass a budgeted allocator they can inspect);
            by default :func:`probes.alloc.open_device` with the request's budget.

    Returns:
        The :class:`ProbeResult`. Raises :class:`DoesNotFitError` when the weights, the
        profile or one request do not fit, and ``KvplanError`` when CUDA is missing.
    """
    check_request(req)
    check_device(req)
    gpu = device_gpu(req.device)
    total = gpu.memory_bytes if gpu is not None else None
    est = estimate_for(spec, req, gpu)
    assert est.vllm is not None
    budget = req.memory_budget_bytes
    if budget is None:
        if total is None:
            require_cuda()
            raise UsageError(f"--device {req.device}: no device to take a budget from")
        budget = math.ceil(total * req.settings.gmu)
    limit = min(budget, req.max_memory_bytes or budget)
    dtype = model_dtype(spec)
    item = torch.empty((), dtype=dtype).element_size()
    dims = model_dims(spec, req.settings.tp, est.kv_heads_per_rank or None)
    weights_bytes = req.weights_bytes or total_weight_bytes(dims, item)
    if weights_bytes >= limit:
        raise DoesNotFitError(
            f"{spec.name}: the weights of one rank take {weights_bytes:,} B but the memory "
            f"budget is {limit:,} B; raise --memory-budget (or --max-memory), or use --tp"
        )
    layout = pool_layout(spec, est)
    mem = memory or open_device(req.device, limit)
    with torch.inference_mode(), mem:
        return _probe(
            spec, est, req, gpu, layout, dims, dtype, mem, budget, weights_bytes, on_trial
        )


def _probe(
    spec: ModelSpec,
    est: KVEstimate,
    req: VerifyRequest,
    gpu: Gpu | None,
    layout: PoolLayout,
    dims: ModelDims,
    dtype: torch.dtype,
    mem: DeviceMemory,
    budget: int,
    weights_bytes: int,
    on_trial: Callable[[Trial], None] | None,
) -> ProbeResult:
    assert est.vllm is not None
    vllm = est.vllm
    device = mem.device
    clock = _Clock()
    mem.release(full=True)
    baseline = mem.allocated()
    non_torch_start = mem.non_torch_bytes()
    buffered = req.weights_buffer or req.weights_bytes is not None
    try:
        weights, owners = allocate_weights(
            dims, dtype, device, buffer_bytes=weights_bytes if buffered else None
        )
    except torch.OutOfMemoryError:
        mem.release()
        raise DoesNotFitError(
            f"{spec.name}: {weights_bytes:,} B of weights do not fit in the {mem.limit_bytes:,} B "
            "the probe may use; raise --memory-budget / --max-memory"
        ) from None
    clock.lap("weights")
    model = ProbeModel(dims, weights, dtype)
    specs = {i: s for i, s in enumerate(rank_layers(spec, est)) if s is not None}
    model.set_windows(model_windows(dict(specs)))
    weights_held = mem.allocated() - baseline
    all_layers = req.all_layers_profile
    if all_layers is None:
        all_layers = device.type == "cuda"

    # 3. profile step
    mem.reset_peak()
    try:
        model.profile_step(
            vllm.max_num_batched_tokens,
            vllm.max_num_seqs,
            all_layers=all_layers,
            max_chunk_bytes=req.max_chunk_bytes,
        )
        _sync(device)
    except torch.OutOfMemoryError:
        del model, weights, owners
        mem.release()
        raise DoesNotFitError(
            f"{spec.name}: weights ({weights_held:,} B) and the activations of a "
            f"{vllm.max_num_batched_tokens:,}-token step do not fit in {mem.limit_bytes:,} B; "
            "raise --memory-budget or lower --max-num-batched-tokens"
        ) from None
    clock.lap("profile")
    profile_peak = mem.peak()
    after_profile = mem.allocated()
    free_after_profile = mem.free_bytes()
    activation = profile_peak - after_profile
    non_torch = max(0, mem.non_torch_bytes() - non_torch_start)
    non_kv = (after_profile - baseline) + activation + non_torch
    # vLLM's decode kernels need no gather buffer; ours gathers K/V in chunks, bounded to a
    # quarter of the headroom vLLM reserves for activations so a decode step fits where
    # the engine's would.
    decode_chunk = max(MIN_CHUNK_BYTES, min(req.max_chunk_bytes, activation // 4))
    req = replace(req, max_chunk_bytes=decode_chunk)

    # 4. prediction
    if req.num_gpu_blocks is not None:
        predicted_blocks, source = req.num_gpu_blocks, "plan file"
    elif isinstance(mem, CudaMemory) and req.memory_budget_bytes is None:
        from planner.deployment import Deployment
        from planner.model.load import with_headers

        # the device's name: vLLM's batch defaults set A100s apart
        on_device = Gpu(name=gpu.name if gpu else "cuda", memory_bytes=mem.total_bytes)
        dep = Deployment(
            model=with_headers(spec, offline=True), gpu=on_device, settings=req.settings
        )
        predicted_blocks = planner_num_gpu_blocks(dep, est)
        source = "planner budget (kvplan estimate --gpu)"
    else:
        predicted_blocks = predict_num_gpu_blocks(
            memory_budget_bytes=budget, non_kv_bytes=non_kv, bytes_per_block=vllm.bytes_per_block
        )
        source = "budget - measured non-KV memory"
    bpr = layout.blocks_per_request()
    try:
        check_one_request(
            num_blocks=predicted_blocks,
            blocks_per_request=bpr,
            bytes_per_block=vllm.bytes_per_block,
            max_model_len=est.max_model_len,
        )
    except DoesNotFitError:
        del model, weights, owners
        mem.release()
        raise

    if isinstance(mem, CudaMemory):
        mem.set_limit(min(budget - non_torch, mem.limit_bytes))

    # 5. planned run
    mem.reset_peak()
    planned = _planned_run(model, layout, predicted_blocks, req, vllm.max_num_seqs, device)
    _sync(device)
    planned_peak = mem.peak() if planned.ran else None
    free_in_planned = mem.free_bytes() if planned.ran else None
    mem.release()
    clock.lap("planned_run")

    # 6. frontier
    search = _search_frontier(
        model,
        layout,
        mem,
        est,
        req,
        start=predicted_blocks,
        guess=predicted_blocks + activation // layout.bytes_per_block,
        on_trial=on_trial,
    )
    clock.lap("frontier")

    del model, weights, owners
    mem.release(full=True)
    final = mem.allocated()

    peak_predicted = non_kv + predicted_blocks * vllm.bytes_per_block
    peak_measured = max(profile_peak, planned_peak or 0) - baseline + non_torch
    predicted = capacity(
        predicted_blocks, layout=vllm, blocks_per_request=bpr, peak_bytes=peak_predicted
    )
    measured = capacity(
        search.num_blocks, layout=vllm, blocks_per_request=bpr, peak_bytes=peak_measured
    )
    floor = predicted_blocks * (1 - req.tolerance_pct / 100)
    notes = list(est.notes)
    expected = req.expected_bytes_per_block
    if expected is not None and expected != vllm.bytes_per_block:
        notes.append(
            f"the plan file says {expected:,} B per block, this kvplan computes "
            f"{vllm.bytes_per_block:,} B (a plan from another version?)"
        )
    if not all_layers:
        notes.append("profile ran one layer of each distinct shape (CPU; see probes/model.py)")
    return ProbeResult(
        model=spec.name,
        device=str(device),
        engine="vllm",
        kv_cache_dtype=est.kv_cache_dtype,
        tensor_parallel_size=est.tensor_parallel_size,
        block_size=est.block_size,
        max_model_len=est.max_model_len,
        max_num_seqs=vllm.max_num_seqs,
        max_num_batched_tokens=vllm.max_num_batched_tokens,
        bytes_per_block=vllm.bytes_per_block,
        pool_bytes_per_block=layout.bytes_per_block,
        blocks_per_request=bpr,
        predicted=predicted,
        measured=measured,
        error_pct=error_pct(predicted, measured),
        tolerance_pct=req.tolerance_pct,
        passed=search.num_blocks >= floor,
        memory=MemoryReport(
            budget_bytes=budget,
            limit_bytes=mem.limit_bytes,
            weights_bytes=weights_held,
            persistent_bytes=after_profile - baseline - weights_held,
            activation_bytes=activation,
            non_torch_bytes=non_torch,
            non_kv_bytes=non_kv,
            available_kv_bytes=budget - non_kv,
            profile_peak_bytes=profile_peak - baseline,
            planned_run_peak_bytes=None if planned_peak is None else planned_peak - baseline,
            free_bytes_after_profile=free_after_profile,
            free_bytes_in_planned_run=free_in_planned,
            baseline_bytes=baseline,
            final_allocated_bytes=final,
        ),
        planned_run=planned,
        trials=search.trials,
        oom_recovered=search.recovered and final == baseline,
        prediction_source=source,
        weights_mode="one buffer" if buffered else "real-shaped layers",
        page_mismatches=list(layout.page_mismatches),
        notes=notes,
        timings_s=clock.laps,
    )


def _search_frontier(
    model: ProbeModel,
    layout: PoolLayout,
    mem: DeviceMemory,
    est: KVEstimate,
    req: VerifyRequest,
    *,
    start: int,
    guess: int,
    on_trial: Callable[[Trial], None] | None,
) -> FrontierSearch:
    """Step 6: each trial allocates a pool and runs one decode step over it."""
    assert est.vllm is not None
    max_num_seqs = est.vllm.max_num_seqs
    upper = max(1, (mem.limit_bytes - mem.allocated()) // layout.bytes_per_block + 1)

    def trial(n: int) -> tuple[bool, int, str | None]:
        def run() -> int:
            mem.reset_peak()
            pool = PagedKVPool(layout, n, mem.device)
            seqs = admit(pool, max_num_seqs, est.max_model_len, decode_steps=1)
            if seqs:
                model.decode_step(pool, seqs, max_chunk_bytes=req.max_chunk_bytes)
            _sync(mem.device)
            return mem.peak()

        return oom_trial(run)

    return find_frontier(
        trial,
        start=start,
        upper=upper,
        guess=guess,
        allocated=mem.allocated,
        release=mem.release,
        on_trial=on_trial,
    )


class _Clock:
    """Wall time per step (reported, never asserted)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 2)
        self._last = now


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def admit(
    pool: PagedKVPool, max_num_seqs: int, max_model_len: int, *, decode_steps: int
) -> list[SequenceState]:
    """Fill the pool the way a busy engine would: up to ``max_num_seqs`` sequences at
    ``max_model_len`` (``decode_steps`` tokens short, so the steps end at the limit), then one
    shorter sequence in the blocks left over."""
    seqs: list[SequenceState] = []
    start = max(0, max_model_len - decode_steps)
    while len(seqs) < max_num_seqs:
        try:
            seqs.append(pool.add_sequence(start, max_model_len))
        except NoFreeBlocksError:
            break
    if len(seqs) < max_num_seqs:
        lo, hi = 0, max_model_len  # largest capacity whose blocks fit in what is free
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if pool.layout.blocks_per_request(mid) <= pool.allocator.num_free:
                lo = mid
            else:
                hi = mid - 1
        if lo > decode_steps:
            seqs.append(pool.add_sequence(lo - decode_steps, lo))
    return seqs


def _planned_run(
    model: ProbeModel,
    layout: PoolLayout,
    num_blocks: int,
    req: VerifyRequest,
    max_num_seqs: int,
    device: torch.device,
) -> PlannedRun:
    try:
        pool = PagedKVPool(layout, num_blocks, device)
        pool.fill_random_()
        seqs = admit(pool, max_num_seqs, layout.max_model_len, decode_steps=req.decode_steps)
        for _ in range(req.decode_steps):
            model.decode_step(pool, seqs, max_chunk_bytes=req.max_chunk_bytes)
        full = sum(1 for s in seqs if s.capacity == layout.max_model_len)
        return PlannedRun(
            ran=True,
            num_sequences=len(seqs),
            full_length_sequences=full,
            decode_steps=req.decode_steps,
        )
    except torch.OutOfMemoryError as exc:
        return PlannedRun(
            ran=False,
            num_sequences=0,
            full_length_sequences=0,
            decode_steps=req.decode_steps,
            error=str(exc).splitlines()[0][:200],
        )
