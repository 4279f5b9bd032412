"""Advice from the user's traffic: ``max_num_seqs`` and ``gpu_memory_utilization`` chosen by
replaying a workload over vLLM's pool, as the field guide advises (load-test with the real
prompt distribution; aim for 80-90 % KV usage).

The workload is replayed **at saturation**: every request is waiting at time 0, so the
scheduler always runs as many as ``max_num_seqs`` allows and the KV usage measured is what the
server reaches at its busiest. :func:`advise` then picks

- ``max_num_seqs``: the largest (by bisection, up to vLLM's default for the GPU or the user's
  own value, whichever is larger) whose replay keeps peak KV usage at or under the target
  (default 90 % of the usable blocks) with no preemptions;
- ``gpu_memory_utilization``: unchanged, unless even that ``max_num_seqs`` leaves the pool
  under-used (p90 usage below 80 %, which happens when the ``max_num_seqs`` ceiling, not the
  pool, is the limit): then the smallest utilisation, in steps of 0.01, that still replays
  the workload with no preemptions and peak usage under the target, which puts p90 usage
  in 80-90 % unless a 0.01 step of the GPU is a large share of the pool. An explicit KV
  pool (``--kv-cache-memory``) is never resized.

Only this module imports the simulator; ``kvplan estimate`` imports it only with a workload.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from planner.budget import VllmCapacity, estimate_at_length, vllm_budget
from planner.deployment import Deployment
from planner.errors import UsageError
from planner.kv_layout import KVEstimate, estimate
from planner.simulate.engine import BlockLayout, SimConfig, SimResult
from planner.simulate.roofline import Roofline
from planner.simulate.run import simulate
from planner.simulate.spec import Arrival, LogNormal, WorkloadSpec, generate
from planner.simulate.workload import Workload
from planner.weights import Weights

TARGET_PEAK_USAGE = 0.9
P90_BAND = (0.8, 0.9)
MAX_REPLAYED = 2000  # requests of a long trace replayed at saturation (the first ones)
SYNTHETIC_REQUESTS = 1000


@dataclass(frozen=True, kw_only=True)
class Replay:
    """One saturated replay: the settings and what it measured (JSON ``workload.yours`` and
    the figures ``recommended`` rests on)."""

    max_num_seqs: int
    gpu_memory_utilization: float
    num_gpu_blocks: int
    preemptions: int
    usage_p90: float
    usage_max: float
    mean_running: float


@dataclass(frozen=True, kw_only=True)
class Advice:
    """What the workload says to set (JSON ``workload``).

    Attributes:
        name, source: the workload (``chat``, ``examples/workloads/chat.yaml``).
        requests: requests replayed (at most :data:`MAX_REPLAYED`, the first of a longer
            trace); ``rejected``: of those, longer than ``max_model_len`` (never scheduled).
        target_usage: the peak KV usage the recommendation keeps under (0.9).
        recommended: the replay of the recommended settings.
        next_up: the smallest larger ``max_num_seqs`` tried that breaks the target (its
            replay), None when the ceiling was reached.
        yours: the replay of the user's own ``max_num_seqs`` (or vLLM's default).
        ceiling: the largest ``max_num_seqs`` considered.
    """

    name: str
    source: str
    requests: int
    rejected: int
    target_usage: float
    recommended: Replay
    next_up: Replay | None
    yours: Replay
    ceiling: int

    @property
    def reason(self) -> str:
        r = self.recommended
        text = (
            f"replaying {self.name} ({self.requests:,} requests, all waiting at once): "
            f"max_num_seqs {r.max_num_seqs:,} peaks at {r.usage_max:.1%} of the KV blocks "
            f"(p90 {r.usage_p90:.0%}) with {r.preemptions:,} preemptions"
        )
        if self.next_up is not None:
            n = self.next_up
            text += (
                f"; {n.max_num_seqs:,} peaks at {n.usage_max:.1%} with {n.preemptions:,} "
                "preemptions"
            )
        elif r.max_num_seqs == self.ceiling:
            text += f" (capped at max_num_seqs {self.ceiling:,})"
        return text


def synthetic_workload(avg_prompt: int, avg_output: int, max_model_len: int) -> Workload:
    """A workload from two averages: :data:`SYNTHETIC_REQUESTS` requests whose prompt and
    output lengths are lognormal around the means (sigma 1.0 and 0.8, as
    ``examples/workloads/chat.yaml``), seed 0, clipped so prompt + output fit
    ``max_model_len``."""
    for flag, value in (("--avg-prompt-tokens", avg_prompt), ("--avg-output-tokens", avg_output)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if avg_prompt + avg_output > max_model_len:
        raise UsageError(
            f"--avg-prompt-tokens {avg_prompt:,} + --avg-output-tokens {avg_output:,} exceed "
            f"max_model_len {max_model_len:,}"
        )
    spec = WorkloadSpec(
        name=f"average {avg_prompt:,}+{avg_output:,} tokens",
        num_requests=SYNTHETIC_REQUESTS,
        prompt_tokens=LogNormal(low=1, high=max(1, max_model_len - 1), mean=avg_prompt, sigma=1.0),
        output_tokens=LogNormal(low=1, high=max(1, max_model_len // 2), mean=avg_output, sigma=0.8),
        arrival=Arrival(),
        prefixes=(),
        seed=0,
        source="--avg-prompt-tokens/--avg-output-tokens",
    )
    w = generate(spec)
    clipped = tuple(
        r
        if r.prompt_tokens + r.output_tokens <= max_model_len
        else replace(r, output_tokens=max(1, max_model_len - r.prompt_tokens))
        for r in w.requests
    )
    return replace(w, requests=clipped)


def saturated(workload: Workload) -> Workload:
    """The first :data:`MAX_REPLAYED` requests of ``workload``, all arriving at 0."""
    reqs = tuple(replace(r, arrival_s=0.0) for r in workload.requests[:MAX_REPLAYED])
    return replace(workload, requests=reqs)


def advise(
    dep: Deployment,
    est: KVEstimate,
    cap: VllmCapacity,
    weights: Weights,
    workload: Workload,
    *,
    target: float = TARGET_PEAK_USAGE,
    capacity: Callable[[Deployment, KVEstimate], VllmCapacity] | None = None,
) -> Advice:
    """Recommend ``max_num_seqs`` and ``gpu_memory_utilization`` for ``workload`` on ``dep``
    (whose settings start: ``cap.fits``); see the module docstring for the rules."""
    assert est.vllm is not None and cap.fits
    s = dep.settings
    layout, _ = BlockLayout.from_estimate(est)
    work = saturated(workload)

    def pool(d: Deployment) -> VllmCapacity:
        e = estimate(d.spec, d.settings, d.gpu, batch_sizes=())
        if capacity is not None:
            return capacity(d, e)
        return vllm_budget(d, e, weights, estimate_at_length(d))

    runs: dict[tuple[int, float], tuple[Replay, SimResult]] = {}

    def run(seqs: int, gmu: float) -> Replay:
        key = (seqs, gmu)
        if key not in runs:
            d = dep.with_settings(max_num_seqs=seqs, gpu_memory_utilization=gmu)
            c = cap if (seqs, gmu) == (cap.max_num_seqs, s.gmu) else pool(d)
            config = SimConfig(
                num_gpu_blocks=c.num_gpu_blocks,
                layout=layout,
                max_num_seqs=seqs,
                max_num_batched_tokens=max(c.max_num_batched_tokens, seqs),
                max_model_len=c.max_model_len,
                roofline=Roofline.constant(0.01),  # at saturation only the order of steps counts
                prefix_caching=s.prefix_caching(dep.spec),
                num_lookahead_tokens=s.num_lookahead_tokens,
                data_parallel_size=s.dp,
            )
            res = simulate(work, config)
            runs[key] = (
                Replay(
                    max_num_seqs=seqs,
                    gpu_memory_utilization=gmu,
                    num_gpu_blocks=c.num_gpu_blocks,
                    preemptions=res.preemptions,
                    usage_p90=res.usage_p90,
                    usage_max=round(res.usage_max, 4),
                    mean_running=round(res.mean_concurrency, 2),
                ),
                res,
            )
        return runs[key][0]

    def ok(r: Replay) -> bool:
        return r.preemptions == 0 and r.usage_max <= target

    gmu = s.gmu
    ceiling = max(cap.max_num_seqs, s.default_max_num_seqs(est.max_model_len, dep.gpu))
    if cap.mamba_max_num_seqs is not None:
        ceiling = min(ceiling, cap.mamba_max_num_seqs)
    yours = run(cap.max_num_seqs, gmu)
    lo, hi = 1, ceiling  # invariant: lo is ok (or 1), every value above hi is not tried
    first_bad: Replay | None = None
    if ok(run(ceiling, gmu)):
        lo = ceiling
    else:
        first_bad = run(ceiling, gmu)
        hi = ceiling - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            r = run(mid, gmu)
            if ok(r):
                lo = mid
            else:
                first_bad, hi = r, mid - 1
    best = run(lo, gmu)
    if (
        s.kv_cache_memory_bytes is None
        and dep.gpu is not None
        and best.usage_p90 < P90_BAND[0]
        and ok(best)
    ):
        best = _shrink(best, run, ok, cap, est, dep)
    next_up = first_bad if first_bad is not None and first_bad.max_num_seqs > lo else None
    return Advice(
        name=workload.name,
        source=workload.source,
        requests=len(work.requests),
        rejected=runs[(best.max_num_seqs, best.gpu_memory_utilization)][1].rejected_too_long,
        target_usage=target,
        recommended=best,
        next_up=next_up,
        yours=yours,
        ceiling=ceiling,
    )


def _shrink(
    best: Replay,
    run: Callable[[int, float], Replay],
    ok: Callable[[Replay], bool],
    cap: VllmCapacity,
    est: KVEstimate,
    dep: Deployment,
) -> Replay:
    """The smallest utilisation (0.01 steps) whose pool still passes ``ok`` (no preemptions,
    peak under the target), starting from the one that puts p90 usage at 90 %: p90 lands in
    80-90 % unless one 0.01 step of the GPU is a large share of the pool. ``best`` itself
    when no utilisation below the current one passes."""
    assert dep.gpu is not None and est.vllm is not None
    usable = best.num_gpu_blocks - 1
    p90_blocks = best.usage_p90 * usable
    # the smallest pool that puts p90 at the top of the band; then up until the replay passes
    want_blocks = max(math.ceil(p90_blocks / P90_BAND[1]), cap.blocks_per_request) + 1
    non_kv = cap.requested_bytes - cap.available_kv_bytes
    total = dep.gpu.memory_bytes
    gmu = math.ceil(100 * (non_kv + want_blocks * est.vllm.bytes_per_block) / total) / 100
    current = best.gpu_memory_utilization
    while gmu < current:
        r = run(best.max_num_seqs, round(gmu, 2))
        if ok(r) and r.num_gpu_blocks > cap.blocks_per_request:
            return r
        gmu += 0.01
    return best
