"""One replay (:func:`simulate`): a workload over the block pool and scheduler of a
:class:`planner.simulate.engine.SimConfig`, on one engine or, with data parallelism, on each DP
rank as vLLM's load balancer dispatches (:mod:`planner.simulate.cluster`)."""

from __future__ import annotations

import gc

from planner.errors import DoesNotFitError, UsageError
from planner.simulate.cluster import simulate_ranks
from planner.simulate.engine import SimConfig, SimResult, make_engine
from planner.simulate.workload import Workload


def simulate(workload: Workload, config: SimConfig) -> SimResult:
    """Replay ``workload`` over the block pool and scheduler of ``config``.

    Args:
        workload: requests in arrival order (from :func:`planner.simulate.trace.load_workload`).
        config: pool size, block layout, scheduler limits, prefix caching and step-time model;
            with ``data_parallel_size`` > 1, of each of that many ranks
            (:mod:`planner.simulate.cluster` dispatches the requests).

    Returns:
        The :class:`SimResult` (the cluster's, each rank's in ``ranks``, with several ranks).
    """
    if config.num_gpu_blocks < 2:
        raise DoesNotFitError(
            f"the KV pool has {config.num_gpu_blocks} block(s); vLLM keeps one as its null "
            "block, so nothing can run. Give it more memory (--kv-cache-memory, "
            "--gpu-memory-utilization) or a smaller model"
        )
    if config.max_num_batched_tokens < config.max_num_seqs:
        raise UsageError(
            f"max_num_batched_tokens ({config.max_num_batched_tokens}) must be greater than or "
            f"equal to max_num_seqs ({config.max_num_seqs}), as vLLM requires"
        )
    need = config.layout.blocks(config.max_model_len)
    if need > config.num_gpu_blocks - 1:
        raise DoesNotFitError(
            f"one {config.max_model_len:,}-token request needs {need:,} blocks; the pool has "
            f"{config.num_gpu_blocks - 1:,} usable. Lower --max-model-len or give it more memory"
        )
    if config.data_parallel_size < 1:
        raise UsageError(f"data_parallel_size must be at least 1, got {config.data_parallel_size}")
    if workload.max_concurrency and config.data_parallel_size > 1:
        raise UsageError(
            "a closed-loop client (--max-concurrency) is not simulated with --dp > 1 yet; "
            "replay it open-loop (a --request-rate) or at --dp 1"
        )

    enabled = gc.isenabled()
    gc.disable()  # the engine's objects hold no cycles; collecting them made cost superlinear
    try:
        if config.data_parallel_size > 1:
            return simulate_ranks(workload, config)
        engine = make_engine(workload, config)
        engine.run()
        return engine.result(workload)
    finally:
        if enabled:
            gc.enable()
