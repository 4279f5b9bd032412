"""vLLM's release-dependent scheduling rules in ``kvplan simulate``, each on a trace
small enough to follow by hand: block size 4, steps of 1 s, a few requests. Where a rule
started is read in vLLM's sources (see :mod:`planner.vllm_rules`)."""

from __future__ import annotations

import functools

import pytest

from planner.simulate.run import simulate
from planner.simulate.workload import Request, Workload
from planner.vllm_rules import rules_for
from tests.helpers import sim_config


def workload(*requests: Request) -> Workload:
    return Workload(name="test", source="test", requests=tuple(requests))


# every test here: 4-token blocks, 4 sequences, 8 batched tokens, 32-token requests
config = functools.partial(sim_config, block_size=4, max_num_batched_tokens=8, max_model_len=32)


@pytest.mark.parametrize(
    ("version", "async_", "full_isl", "prepend"),
    [
        # config/scheduler.py: async_scheduling False through 0.13.0, None (on for generation
        # on GPUs, config/vllm.py) from 0.14.0; scheduler_reserve_full_isl (default True) from
        # 0.19.0; block_pool.py free_blocks prepends unhashed blocks from 0.24.0
        ("0.13.0", False, False, False),
        ("0.14.0", True, False, False),
        ("0.18.0", True, False, False),
        ("0.19.0", True, True, False),
        ("0.22.0", True, True, False),
        ("0.24.0", True, True, True),
        ("0.32.0", True, True, True),
        (None, True, True, True),
    ],
)
def test_rules_by_release(version: str | None, async_: bool, full_isl: bool, prepend: bool) -> None:
    rules = rules_for(version)
    assert (rules.async_scheduling, rules.reserve_full_isl, rules.prepend_uncached_free) == (
        async_,
        full_isl,
        prepend,
    )


@pytest.mark.parametrize("full_isl", [False, True])
def test_admission_reserves_the_whole_prompt(full_isl: bool) -> None:
    # 10 usable blocks of 4 tokens, 8 tokens a step; A and B: 24-token prompts (6 blocks each),
    # 4 output tokens, both at t = 0. The two prompts (12 blocks) don't both fit.
    # steps 0-2: A prefills 8 + 8 + 8 tokens -> 6 blocks; step 2 samples its 1st token
    # step 3: A decodes position 24 -> a 7th block (7 used, 3 free); 7 tokens of budget left.
    #   old rule: B's first chunk, 7 tokens = 2 blocks, fits -> admitted, 9 used
    #   new rule: B's whole prompt needs 6 blocks > 3 free -> B waits
    # old rule:
    #   step 4: B's next chunk 7 -> 14 needs 2 more blocks, 1 is free: B (the newest) is
    #           preempted, its 7 computed tokens lost
    #   step 5: A samples its 4th token and finishes; B is readmitted first (its 7-token chunk
    #           fits in the 3 free) and recomputes those 7 tokens; A's 7 blocks return after
    # new rule: B waits through step 5 (A's blocks come back after that step's scheduling)
    # both: step 6 B has the pool to itself: 8 + 8 + 8 (steps 6-8), decodes 9-11 -> 12 steps
    w = workload(Request(24, 4), Request(24, 4))
    r = simulate(w, config(10, reserve_full_isl=full_isl))
    assert list(r.finish_steps) == [5, 11]
    assert r.steps == 12
    if full_isl:
        assert (r.preemptions, r.recomputed_tokens, r.peak_blocks) == (0, 0, 7)
    else:
        assert (r.preemptions, r.recomputed_tokens, r.peak_blocks) == (1, 7, 9)


@pytest.mark.parametrize(("prepend", "hit_tokens"), [(False, 4), (True, 8)])
def test_freed_uncached_blocks_are_reused_first(prepend: bool, hit_tokens: int) -> None:
    # 4 usable blocks of 4 tokens, prefix caching on; one request per second, one output
    # token each, so each finishes in the step that prefills it (blocks back after the step).
    # A (t=0): 8 tokens, all of them prefix "p": 2 full blocks p0, p1, cached when freed,
    #   tail first: free queue [x, x, p1, p0] (x: never-used blocks)
    # B (t=1): 6 tokens of its own: takes both x; frees its partly filled block (tokens 4-5,
    #   no hash) and its full block b0 (hashed, never looked up again):
    #     old rule (append): [p1, p0, x, b0]
    #     new rule (the unhashed block to the front): [x, p1, p0, b0]
    # C (t=2): 4 tokens: takes one block from the front: old rule evicts p1, new rule takes x
    # D (t=3): "p" then 4 tokens of its own: hits p0 (4 tokens) under the old rule, p0 and p1
    #   (8 tokens) under the new one
    w = workload(
        Request(8, 1, 0.0, "p", 8),
        Request(6, 1, 1.0),
        Request(4, 1, 2.0),
        Request(12, 1, 3.0, "p", 8),
    )
    r = simulate(w, config(4, max_model_len=16, prefix_caching=True, prepend_uncached_free=prepend))
    assert list(r.finish_steps) == [0, 1, 2, 3]
    assert r.prefix_query_tokens == 8 + 6 + 4 + 12
    assert r.prefix_hit_tokens == hit_tokens
    assert r.prefix_blocks_saved == hit_tokens // 4


@pytest.mark.parametrize("async_", [False, True])
def test_async_scheduling_frees_a_finished_request_a_step_later(async_: bool) -> None:
    # one request, 4-token prompt, 3 output tokens: step 0 prefills and samples token 1, steps
    # 1 and 2 sample tokens 2 and 3. With async scheduling, step 3 is scheduled before step 2's
    # output is read: the request is not scheduled again (it has reached max_tokens) but its
    # blocks come back only after step 3 is scheduled: one more, empty, step.
    r = simulate(workload(Request(4, 3)), config(10, async_scheduling=async_))
    assert list(r.finish_steps) == [0 + 2]
    assert r.steps == 3 + async_


@pytest.mark.parametrize("async_", [False, True])
def test_async_scheduling_holds_the_finished_requests_seat(async_: bool) -> None:
    # max_num_seqs 1; A and B: 4-token prompts, 3 output tokens, both at t = 0.
    # A runs steps 0-2. Sync: B is admitted in step 3 and runs 3-5 -> 6 steps.
    # Async: A still holds the one seat while step 3 is scheduled, so B runs 4-6 -> 8 steps
    # (step 7 the empty one that releases B).
    w = workload(Request(4, 3), Request(4, 3))
    r = simulate(w, config(10, max_num_seqs=1, async_scheduling=async_))
    if async_:
        assert list(r.finish_steps) == [2, 6] and r.steps == 8
    else:
        assert list(r.finish_steps) == [2, 5] and r.steps == 6
    # A holds 4 + 2 = 6 tokens (2 blocks) when it finishes; B never overlaps it
    assert r.peak_blocks == 2


def test_recomputed_tokens_count_every_re_prefill_chunk() -> None:
    # 4 usable blocks of 4 tokens, 4 tokens a step, max_num_seqs 2; A and B: 4-token prompts,
    # 6 output tokens, both at t = 0.
    # step 0: A prefills 4 (1 block)
    # step 1: A decodes position 4 (2nd block); B's first 3 tokens (1 block) -> 3 used
    # step 2: A position 5; B's 4th token completes its prefill
    # step 3: A position 6; B position 4 (B's 2nd block) -> 4 used, none free
    # step 4: A position 7; B position 5 -> B holds 6 computed tokens, 7 known
    # step 5: A position 8 needs a 3rd block: B is preempted (its 6 tokens of KV lost); A
    #         samples its 6th token and finishes
    # step 6: B re-prefills 4 of its 7 tokens: 4 recomputed
    # step 7: B prefills tokens 5-7: 2 of them (5, 6) recomputed, the 7th is new -> 6 in all
    # steps 8-9: B decodes its 5th and 6th tokens -> 10 steps
    w = workload(Request(4, 6), Request(4, 6))
    r = simulate(w, config(4, max_num_seqs=2, max_num_batched_tokens=4, max_model_len=10))
    assert list(r.finish_steps) == [5, 9]
    assert r.steps == 10
    assert r.preemptions == 1
    assert r.recomputed_tokens == 4 + 2
