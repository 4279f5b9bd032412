"""The CPU KV tier of vLLM's native KV offloading in ``kvplan simulate``.

``--kv-offloading-size S --kv-offloading-backend native`` adds a CPU tier that only extends
the prefix cache (vLLM 0.33 ``OffloadingConnector``, ``v1/kv_offload/cpu``): full blocks are
written through, evicted least recently used first, and a prefix that misses on the GPU but
is found there is loaded into new GPU blocks instead of being recomputed. Traces small enough
to follow by hand: block size 4, 16 tokens a step, steps of 1 s, a pool of 6 usable blocks.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.simulate.engine import SimConfig
from planner.simulate.run import simulate
from planner.simulate.workload import Request, Workload
from tests.helpers import sim_config
from tests.sim_reference import reference_for


def config(cpu_blocks: int, **overrides: Any) -> SimConfig:
    # 6 usable 4-token blocks, 4 sequences, 16 batched tokens, 24-token requests, caching on
    values: dict[str, Any] = dict(
        block_size=4, max_num_batched_tokens=16, max_model_len=24, prefix_caching=True
    )
    return sim_config(6, cpu_blocks=cpu_blocks, **{**values, **overrides})


def trace(b_prompt: int) -> Workload:
    # A: 12 tokens whose first 8 (2 blocks) are the shared prefix "sys", at t = 0
    # B: b_prompt unshared tokens at t = 2; C: A's prompt again at t = 10; 1 output token each
    return Workload(
        name="test",
        source="test",
        requests=(
            Request(12, 1, 0.0, "sys", 8),
            Request(b_prompt, 1, 2.0),
            Request(12, 1, 10.0, "sys", 8),
        ),
    )


@pytest.mark.parametrize(("cpu_blocks", "cpu_hit_tokens"), [(0, 0), (5, 0), (6, 4), (7, 8), (8, 8)])
def test_prefix_evicted_from_the_gpu_is_loaded_from_the_cpu_tier(
    cpu_blocks: int, cpu_hit_tokens: int
) -> None:
    # step 0: A prefills 12 tokens (3 blocks) and finishes. Its 3 full blocks go back to the
    #   GPU free queue (the sys blocks cached, at the tail) and are written to the CPU tier,
    #   tail first: [A's block 2, sys 1, sys 0], least recent first.
    # steps 1-2: B's 23 tokens take 6 blocks, the whole pool: both sys blocks are evicted from
    #   the GPU. B finishes; its 5 full blocks are written to the CPU tier (3 + 5 = 8 blocks).
    #   tier of 8: all stay; 7: A's block 2 goes; 6: also sys 1; 5: also sys 0.
    # step 3: C misses on the GPU; the tier gives it sys 0 and 1 (8 tokens), or sys 0 alone
    w = trace(23)
    cfg = config(cpu_blocks)
    r = simulate(w, cfg)
    assert list(r.finish_steps) == [0, 2, 3]
    assert r.prefix_query_tokens == 12 + 23 + 12
    assert r.prefix_hit_tokens == r.cpu_hit_tokens == cpu_hit_tokens
    assert r.prefix_blocks_saved == 0  # loaded blocks are allocated like new ones
    assert r.cpu_hit_rate == cpu_hit_tokens / 47
    assert r.gpu_hit_rate == 0.0
    assert r.cpu_blocks == cpu_blocks
    ref = reference_for(w, cfg)
    assert (ref.cpu_hit_tokens, ref.hit_tokens) == (cpu_hit_tokens, cpu_hit_tokens)


def test_gpu_hit_then_cpu_hit() -> None:
    # B has 19 tokens: 5 blocks, taken from the head of the free queue: the 3 never used, A's
    # block 2, then the tail of sys (sys 1); sys 0 stays cached on the GPU. B writes its 4 full
    # blocks through (3 + 4 = 7 in a tier of 8). C finds sys 0 on the GPU (1 block saved) and
    # sys 1 in the tier (loaded into a new block).
    w = trace(19)
    cfg = config(8)
    r = simulate(w, cfg)
    assert (r.prefix_hit_tokens, r.cpu_hit_tokens, r.prefix_blocks_saved) == (8, 4, 1)
    assert (r.gpu_hit_rate, r.cpu_hit_rate) == (4 / 43, 4 / 43)
    ref = reference_for(w, cfg)
    assert (ref.hit_tokens, ref.cpu_hit_tokens, ref.blocks_saved) == (8, 4, 1)


def test_no_tier_is_the_plain_engine() -> None:
    # cpu_blocks 0, or a tier without prefix caching, changes nothing
    w = trace(23)
    plain = simulate(w, config(0))
    assert simulate(w, config(8, prefix_caching=False)).cpu_hit_tokens == 0
    assert plain.cpu_blocks == 0 and plain.cpu_hit_rate == 0.0


def test_a_tier_on_every_data_parallel_rank() -> None:
    # two ranks, each with its own pool and tier: the cluster's CPU hits are the ranks' sum
    w = trace(23)
    r = simulate(w, config(8, data_parallel_size=2))
    assert r.cpu_hit_tokens == sum(x.cpu_hit_tokens for x in r.ranks)
    assert r.cpu_blocks == 8
