"""Speculative decoding's lookahead slots in ``kvplan simulate``.

vLLM reserves KV slots past the tokens a request is scheduled for, for the drafter to write
into: ``KVCacheManager.allocate_slots(request, num_new_tokens, num_lookahead_tokens=k)`` holds
``min(computed + new + k, max_model_len)`` slots, for a waiting request's first chunk as for
a running one's next chunk or decode token (``Scheduler.schedule``, vLLM 0.33); the admission
gate of ``scheduler_reserve_full_isl`` counts the whole prompt without them. Traces small
enough to follow by hand: block size 16, steps of 1 s.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.simulate.engine import SimConfig
from planner.simulate.run import simulate
from planner.simulate.workload import Request, Workload
from tests.helpers import sim_config
from tests.sim_reference import reference_for


def workload(*requests: Request) -> Workload:
    return Workload(name="test", source="test", requests=tuple(requests))


def config(usable: int, lookahead: int, **overrides: Any) -> SimConfig:
    return sim_config(usable, num_lookahead_tokens=lookahead, **overrides)


@pytest.mark.parametrize(("lookahead", "blocks"), [(0, 1), (2, 2)])
def test_a_prefill_reserves_its_lookahead_slots(lookahead: int, blocks: int) -> None:
    # a 15-token prompt: 15 slots fit one 16-token block; with k = 2 it holds 15 + 2 = 17
    # slots, cdiv(17, 16) = 2 blocks
    w = workload(Request(15, 1))
    r = simulate(w, config(10, lookahead))
    assert r.peak_blocks == reference_for(w, config(10, lookahead)).peak_blocks == blocks


@pytest.mark.parametrize(
    ("lookahead", "finish", "steps", "recomputed"),
    [
        # k = 0, 3 usable blocks, A and B: 14-token prompts, 5 outputs. Step 0 prefills both
        # (1 block each). Step s >= 1 computes token 14 + s: step 3 needs 17 slots, a second
        # block each; A takes the last one, B (newest) is preempted with 16 tokens computed
        # and 3 sampled. A finishes in step 4 (its 5th token); B, 17 tokens = 2 blocks, waits
        # for A's and re-prefills in step 5 (token 4, 16 of the 17 recomputed), finishes in 6.
        (0, [4, 6], 7, 16),
        # k = 2: step 0 holds 14 + 2 = 16 slots (1 block each); step 1 computes token 15 and
        # needs 15 + 2 = 17 slots: A takes the last block, B is preempted with 14 computed and
        # 1 sampled. It needs min(15 + 2, 48) = 17 slots (2 blocks) to come back: step 5,
        # after A's finish in step 4, re-prefilling 15 tokens (token 2, 14 recomputed); tokens
        # 3, 4, 5 in steps 6, 7, 8.
        (2, [4, 8], 9, 14),
    ],
)
def test_lookahead_brings_the_block_boundary_k_tokens_earlier(
    lookahead: int, finish: list[int], steps: int, recomputed: int
) -> None:
    w = workload(Request(14, 5), Request(14, 5))
    cfg = config(3, lookahead, max_model_len=48)  # 3 blocks hold one 48-token request
    r = simulate(w, cfg)
    assert list(r.finish_steps) == finish
    assert (r.steps, r.preemptions, r.recomputed_tokens) == (steps, 1, recomputed)
    ref = reference_for(w, cfg)
    assert (ref.finish_steps, ref.steps, ref.recomputed_tokens) == (finish, steps, recomputed)


@pytest.mark.parametrize(("max_model_len", "blocks"), [(32, 2), (64, 3)])
def test_lookahead_slots_stop_at_max_model_len(max_model_len: int, blocks: int) -> None:
    # a 30-token prompt, 2 outputs, k = 4: the prefill holds min(30 + 4, L) slots and the
    # decode step computing token 31 min(31 + 4, L): with L = 32, 32 slots = 2 blocks; with
    # L = 64, 35 slots = 3 blocks
    w = workload(Request(30, 2))
    cfg = config(10, 4, max_model_len=max_model_len)
    assert simulate(w, cfg).peak_blocks == reference_for(w, cfg).peak_blocks == blocks
