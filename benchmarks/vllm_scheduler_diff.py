"""Differential check: vLLM's own V1 scheduler against `kvplan simulate`'s engine, same traces.

    python benchmarks/vllm_scheduler_diff.py            # needs `import vllm` (CPU is enough)

Drives ``vllm.v1.core.sched.scheduler.Scheduler`` (synchronous) and, for the ``async:`` traces,
``vllm.v1.core.sched.async_scheduler.AsyncScheduler`` (vLLM's default on GPUs) with a fake
model runner: each step every scheduled request advances by its scheduled tokens (vLLM's
``schedule()`` does that), and a request whose prefill is done samples one token (token id 7,
``ignore_eos``), so it finishes after ``output_tokens`` samples (``max_tokens``). The async
traces run ``EngineCore.step_with_batch_queue``'s order with its batch queue of 2: step ``s + 1``
is scheduled before step ``s``'s output is processed. Steps take 1 s on both sides (kvplan:
``Roofline.constant(1.0)``), so an arrival at integer second ``a`` joins the queue before step
``a``; a step that schedules nothing while requests remain only waits for the next arrival, on
both sides, and is not counted, except under async scheduling, where a step in which every
running request has its last token in flight schedules nothing, takes no time and is counted
(kvplan's model: ``planner.simulate.engine``'s docstring).

Prompts: a request with ``prefix_id`` starts with ``prefix_tokens`` tokens that every request of
that prefix shares (token ``1 + prefix number``), then its own tokens (``100000 + index``), so
prefix-cache hits are exactly the shared full blocks, as kvplan models them. The pool is a
single full-attention group of ``num_blocks`` blocks (one is vLLM's null block), as kvplan's
``--num-gpu-blocks``.

Printed per trace, vLLM / kvplan: peak blocks in use (after a step's allocation; cached free
blocks count as free), preemptions, steps, mean running requests (time-weighted) and whether
every request finishes at the same step, plus the first differing request.

Run status: RUN, all 12 traces agree (6 synchronous, the same 6 async). vLLM 0.33.0's wheel
(``pip install --no-deps``) in a venv under /tmp layered over kvplan's (torch 2.13 CPU), plus
einops (the Llama architecture inspection behind ``ModelConfig`` imports it); run as
``PYTHONPATH=. <that venv>/bin/python benchmarks/vllm_scheduler_diff.py`` (about 20 s). Two
fixes were needed: ``VLLM_TARGET_DEVICE=cpu`` before vLLM is first imported (a plain wheel on a
GPU-less machine otherwise resolves to UnspecifiedPlatform and ``DeviceConfig("auto")`` fails),
and ``FullAttentionSpec`` by keyword (kw_only dataclass in 0.33). kvplan's side runs with
``reserve_full_isl`` and ``prepend_uncached_free`` on and ``async_scheduling`` as the trace says,
0.33's rules; ``_scheduler`` asserts vLLM's config kept them (``scheduler_reserve_full_isl``,
watermark 0) after ``CpuPlatform.check_and_update_config``, which turns the config's
``async_scheduling`` off: the scheduler reads that flag only for pipeline parallelism, so the
async traces build ``AsyncScheduler`` (what ``SchedulerConfig.get_scheduler_cls`` returns for
async scheduling) directly. Result: peak blocks, preemptions, steps, mean running and every
request's finish step equal on all 12; async scheduling moves steps +0.4 to +1.2 % and
preemptions -10 % to +8 % on these traces (e.g. 40 prefixes on: 2,172 -> 2,199 steps, 59 -> 64
preemptions), on both sides. With kvplan's old defaults (both rules off) 3 synchronous traces
differed in preemptions (chunked long prompts 2 vs 56, 40 prefixes on 59 vs 69, off 40 vs 56)
and 2 in finish steps, all from ``reserve_full_isl``; ``prepend_uncached_free`` changes nothing
on these traces, so it is not tested here. Peak blocks is the whole usable pool on 5 of 6
traces, so it discriminates little.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.simulate import BlockLayout, Roofline, SimConfig, simulate  # noqa: E402
from planner.simulate.workload import Request, Workload  # noqa: E402

MODEL_DIR = ROOT / "tests" / "fixtures" / "configs" / "meta-llama--Llama-3.1-8B"
TOKEN = 7  # what the fake model runner samples

# vLLM picks its platform once, at first use (vllm/platforms/__init__.py, cpu_platform_plugin):
# a plain (CUDA) wheel on a machine without a GPU resolves to UnspecifiedPlatform, and then
# DeviceConfig("auto") fails with "Failed to infer device type". Ask for CPU before any import.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


@dataclass(frozen=True)
class Case:
    name: str
    requests: tuple[Request, ...]
    num_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int = 8192
    prefix_caching: bool = True
    async_scheduling: bool = False


@dataclass(frozen=True)
class Outcome:
    peak_blocks: int
    preemptions: int
    steps: int
    mean_running: float
    finish_steps: list[int]


def _requests(
    seed: int,
    n: int,
    prompt: tuple[int, int],
    output: tuple[int, int],
    rate: float,
    prefixes: int = 0,
    prefix_tokens: tuple[int, int] = (0, 0),
) -> tuple[Request, ...]:
    rng = random.Random(seed)
    sizes = [rng.randint(*prefix_tokens) for _ in range(prefixes)]
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        own = rng.randint(*prompt)
        if prefixes and rng.random() < 0.8:
            p = rng.randrange(prefixes)
            out.append(
                Request(sizes[p] + own, rng.randint(*output), float(int(t)), f"p{p}", sizes[p])
            )
        else:
            out.append(Request(own, rng.randint(*output), float(int(t))))
    return tuple(out)


def cases() -> list[Case]:
    long = _requests(1, 60, (1500, 6000), (50, 300), 0.5)
    chat = _requests(2, 300, (50, 800), (20, 400), 2.0)
    shared = _requests(3, 400, (20, 300), (10, 200), 3.0, prefixes=40, prefix_tokens=(200, 1200))
    sync = [
        Case("chunked long prompts, tight pool", long, 700, 16, 256, 512, 6400),
        Case("chat, tight pool, caching off", chat, 400, max_model_len=4096, prefix_caching=False),
        Case("chat, tight pool, caching on", chat, 400, max_model_len=4096),
        Case("40 prefixes, caching on", shared, 900, max_model_len=4096),
        Case("40 prefixes, caching off", shared, 900, max_model_len=4096, prefix_caching=False),
        Case("max_num_seqs-bound", chat, 5000, max_num_seqs=8, max_model_len=4096),
    ]
    # the same traces under vLLM's default on GPUs: async scheduling (AsyncScheduler, step
    # s + 1 scheduled before step s's output is processed)
    return sync + [replace(c, name="async: " + c.name, async_scheduling=True) for c in sync]


def run_kvplan(case: Case) -> Outcome:
    config = SimConfig(
        num_gpu_blocks=case.num_blocks,
        layout=BlockLayout(case.block_size),
        max_num_seqs=case.max_num_seqs,
        max_num_batched_tokens=case.max_num_batched_tokens,
        max_model_len=case.max_model_len,
        roofline=Roofline.constant(1.0),
        prefix_caching=case.prefix_caching,
        # the rules of the Scheduler driven below (vLLM 0.33, synchronous): admission needs the
        # whole sequence to fit (SchedulerConfig.scheduler_reserve_full_isl, default True,
        # config/scheduler.py); freed unhashed blocks go to the front of the free queue
        # (BlockPool.free_blocks, v1/core/block_pool.py); async scheduling as the case says.
        reserve_full_isl=True,
        prepend_uncached_free=True,
        async_scheduling=case.async_scheduling,
    )
    r = simulate(Workload(name=case.name, source="generated", requests=case.requests), config)
    return Outcome(r.peak_blocks, r.preemptions, r.steps, r.mean_concurrency, r.finish_steps)


def _scheduler(case: Case):  # type: ignore[no-untyped-def]
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    scheduler_config = SchedulerConfig(
        max_model_len=case.max_model_len,
        is_encoder_decoder=False,
        max_num_seqs=case.max_num_seqs,
        max_num_batched_tokens=case.max_num_batched_tokens,
        enable_chunked_prefill=True,
        async_scheduling=case.async_scheduling,  # CpuPlatform turns it off: see below
    )
    model_config = ModelConfig(
        model=str(MODEL_DIR),
        skip_tokenizer_init=True,
        dtype="float16",
        max_model_len=case.max_model_len,
        seed=0,
    )
    cache_config = CacheConfig(
        block_size=case.block_size, enable_prefix_caching=case.prefix_caching
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=case.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                # keyword-only in 0.33 (@dataclass(kw_only=True), v1/kv_cache_interface.py)
                FullAttentionSpec(
                    block_size=case.block_size, num_kv_heads=1, head_size=1, dtype=torch.float16
                ),
            )
        ],
    )
    cache_config.num_gpu_blocks = case.num_blocks
    # CpuPlatform.check_and_update_config rewrites some settings; make sure the ones kvplan's
    # side assumes survived
    sc = vllm_config.scheduler_config
    assert not sc.async_scheduling and sc.scheduler_reserve_full_isl and sc.watermark == 0.0, sc
    assert sc.enable_chunked_prefill and sc.max_num_batched_tokens == case.max_num_batched_tokens
    assert sc.max_num_seqs == case.max_num_seqs
    assert vllm_config.cache_config.enable_prefix_caching == case.prefix_caching
    # CpuPlatform turns async scheduling off in the config (platforms/cpu.py); the scheduler
    # does not read that flag (bar pipeline parallelism), the class is what differs: the one
    # SchedulerConfig.get_scheduler_cls picks for async scheduling, built directly
    cls = AsyncScheduler if case.async_scheduling else Scheduler
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=case.block_size,
        log_stats=False,
    )


def run_vllm(case: Case) -> Outcome:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request as VRequest

    init_none_hash(sha256)
    hasher = get_request_block_hasher(case.block_size, sha256)
    scheduler = _scheduler(case)
    prefix_number: dict[str, int] = {}
    pending = []
    for i, r in enumerate(case.requests):
        shared = r.prefix_tokens if r.prefix_id is not None else 0
        if r.prefix_id is not None:
            prefix_number.setdefault(r.prefix_id, len(prefix_number))
            head = [1 + prefix_number[r.prefix_id]] * shared
        else:
            head = []
        tokens = head + [100_000 + i] * (r.prompt_tokens - shared)
        params = SamplingParams(max_tokens=r.output_tokens, ignore_eos=True)
        pending.append((r.arrival_s, VRequest(str(i), tokens, params, None, block_hasher=hasher)))
    pool = scheduler.kv_cache_manager.block_pool
    usable = case.num_blocks - 1
    now, steps, peak, preemptions, running_time = 0.0, 0, 0, 0, 0.0
    finish = [-1] * len(pending)
    nxt = 0

    def model_output(out):  # type: ignore[no-untyped-def]
        """The fake model runner: one token for each request whose prefill is done."""
        ids = list(out.num_scheduled_tokens)
        # after schedule() (Scheduler._update_after_schedule), so async placeholders count
        sampled = [[] if scheduler.requests[r].is_prefill_chunk else [TOKEN] for r in ids]
        index = {r: k for k, r in enumerate(ids)}
        return ModelRunnerOutput(req_ids=ids, req_id_to_index=index, sampled_token_ids=sampled)

    def finished(out, result, step: int) -> None:  # type: ignore[no-untyped-def]
        for outputs in scheduler.update_from_output(out, result).values():
            for o in outputs.outputs:
                if o.finish_reason is not None:
                    finish[int(o.request_id)] = step

    # EngineCore.step_with_batch_queue (v1/engine/core.py) with async scheduling's batch queue
    # of 2 (VllmConfig.max_concurrent_batches): schedule step s + 1, then process step s's
    # output; the synchronous engine's queue is 1 (schedule, process). A step that schedules
    # nothing only happens under async scheduling (every running request has its last token in
    # flight); it is counted, takes no time, and the requests that wait for it are not counted
    # as running (kvplan's zombies). Steps vLLM schedules only to hand finished ids to the model
    # runner (nothing unfinished left) are not run on either side.
    size = 2 if case.async_scheduling else 1
    queue: deque = deque()  # type: ignore[type-arg]
    while nxt < len(pending) or scheduler.has_unfinished_requests() or queue:
        while nxt < len(pending) and pending[nxt][0] <= now:
            scheduler.add_request(pending[nxt][1])
            nxt += 1
        if not scheduler.has_unfinished_requests() and not queue:
            now = pending[nxt][0]  # idle until the next arrival
            continue
        if scheduler.has_unfinished_requests():
            out = scheduler.schedule()
            executed = out.total_num_scheduled_tokens > 0
            if not executed and not case.async_scheduling:
                raise AssertionError(f"{case.name}: nothing scheduled at step {steps}")
            peak = max(peak, usable - pool.get_num_free_blocks())
            preemptions += len(out.preempted_req_ids or ())
            if executed:
                waiting_to_finish = sum(
                    1
                    for r in scheduler.running
                    if r.request_id not in out.num_scheduled_tokens
                    and r.num_output_placeholders > 0
                    and r.num_computed_tokens + 2 - r.num_output_placeholders
                    >= r.num_prompt_tokens + r.max_tokens
                )
                running_time += len(scheduler.running) - waiting_to_finish
                now += 1.0
            queue.appendleft((steps, out, model_output(out)))
            steps += 1
            if len(queue) < size and (executed or scheduler.has_unfinished_requests()):
                continue
        step, out, result = queue.pop()
        finished(out, result, step)
    return Outcome(peak, preemptions, steps, running_time / now if now else 0.0, finish)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--self-check", action="store_true", help="kvplan's side only")
    args = parser.parse_args()
    print(
        f"{'trace (vLLM/kvplan)':<44} {'peak blocks':>13} {'preemptions':>13} {'steps':>13} "
        f"{'mean running':>15}  finish steps"
    )
    for case in cases():
        k = run_kvplan(case)
        if args.self_check:
            print(
                f"{case.name:<44} {k.peak_blocks:>13,} {k.preemptions:>13,} {k.steps:>13,} "
                f"{k.mean_running:>15.2f}  (kvplan only)"
            )
            continue
        v = run_vllm(case)
        differ = [
            i for i, (a, b) in enumerate(zip(v.finish_steps, k.finish_steps, strict=True)) if a != b
        ]
        same = "equal" if not differ else f"{len(differ)} differ (first: request {differ[0]})"
        print(
            f"{case.name:<44} {v.peak_blocks:>6,}/{k.peak_blocks:<6,} {v.preemptions:>6,}/"
            f"{k.preemptions:<6,} {v.steps:>6,}/{k.steps:<6,} {v.mean_running:>7.2f}/"
            f"{k.mean_running:<7.2f}  {same}"
        )


if __name__ == "__main__":
    main()
