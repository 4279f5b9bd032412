"""The paged pool: layout against the plan, tensor shapes, block allocator invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import planner  # noqa: E402
from probes.paged import (  # noqa: E402
    NULL_BLOCK,
    BlockAllocator,
    NoFreeBlocksError,
    PagedKVPool,
    pool_layout,
)
from tests.conftest import fixture_config  # noqa: E402
from tests.probe_helpers import tiny_spec  # noqa: E402

CPU = torch.device("cpu")


def load(folder: str) -> planner.ModelSpec:
    return planner.load_model_spec(str(fixture_config(folder)))


def test_gemma3_layout_shares_raw_tensors_across_groups() -> None:
    # Gemma-3-1B: 22 sliding + 4 full layers -> 7 groups of at most 4 layers; 4 raw tensors of
    # 16 tokens x 1 KV head x (256 + 256) x 2 B = 16,384 B per block -> 65,536 B per block.
    spec = load("google--gemma-3-1b-it")
    est = planner.estimate(spec, max_model_len=4096)
    layout = pool_layout(spec, est)
    assert [len(g.layers) for g in layout.groups] == [4, 4, 4, 4, 3, 3, 4]
    assert layout.position_bytes == (16_384,) * 4
    assert layout.bytes_per_block == est.vllm.bytes_per_block == 65_536
    # strided like vLLM: sliding layers 0, 7, 14, 21 (the 1st, 7th, ... sliding layers)
    assert layout.groups[0].layers == (0, 7, 14, 21)
    assert layout.groups[-1].layers == (5, 11, 17, 23)
    pool = PagedKVPool(layout, 3, CPU)
    assert pool.nbytes == 3 * 65_536
    view = pool.attention_cache(0)
    assert tuple(view.key.shape) == (3, 16, 1, 256)
    # layer 0 (group 0) and layer 5 (full group) share raw tensor 0: same bytes
    assert view.key.data_ptr() == pool.attention_cache(5).key.data_ptr()


@pytest.mark.parametrize(
    ("folder", "shape"),
    [
        # vLLM FlashAttention layout [num_blocks, 2, block, kv heads, head]; K is [:, 0]
        ("meta-llama--Llama-3.1-8B", (2, 16, 8, 128)),
        # MLA: one latent of kv_lora_rank + qk_rope_head_dim = 512 + 64
        ("deepseek-ai--DeepSeek-V2-Lite", (2, 16, 1, 576)),
    ],
)
def test_attention_views_have_vllm_shapes(folder: str, shape: tuple[int, ...]) -> None:
    spec = load(folder)
    est = planner.estimate(spec, max_model_len=1024)
    pool = PagedKVPool(pool_layout(spec, est), 2, CPU)
    key = pool.attention_cache(0).key
    assert tuple(key.shape) == shape
    assert pool.nbytes == 2 * est.vllm.bytes_per_block


def test_mla_value_is_the_latent_prefix() -> None:
    spec = load("deepseek-ai--DeepSeek-V2-Lite")
    pool = PagedKVPool(pool_layout(spec, planner.estimate(spec, max_model_len=64)), 2, CPU)
    cache = pool.attention_cache(0)
    assert cache.value is None and cache.value_dim == 512  # V = latent[..., :kv_lora_rank]


def test_mamba_state_slots_are_padded_to_the_attention_page() -> None:
    # tiny hybrid: Mamba-2 conv (4 x 16 + 2 x 1 x 16) x 3 x 2 B = 576 B, ssm 4 x 16 x 16 x 4 B
    # = 4,096 B -> 4,672 B; attention 2 heads x 32 x 2 B = 128 B/token -> block 48 tokens
    # (16 x cdiv(4,672, 16 x 128)), page 6,144 B; the state slot is padded to it.
    spec = tiny_spec("hybrid")
    est = planner.estimate(spec, max_model_len=128, max_num_batched_tokens=64)
    layout = pool_layout(spec, est)
    assert est.block_size == 48 and layout.bytes_per_block == 6_144
    pool = PagedKVPool(layout, 4, CPU)
    state = pool.state_cache(0)
    assert tuple(state.conv.shape) == (4, 96, 3) and state.conv.dtype == torch.bfloat16
    assert tuple(state.ssm.shape) == (4, 4, 16, 16) and state.ssm.dtype == torch.float32
    assert layout.page_mismatches == ()


def test_sliding_sequence_holds_only_the_window_blocks() -> None:
    # window 24, in flight 2 x 64 = 128 tokens: a 1,024-token sequence has 64 logical blocks;
    # the sliding groups own cdiv(min(24 - 1 + 128, 1,024), 16) + 1 = 11 blocks, used as a ring.
    spec = tiny_spec("gemma3")
    est = planner.estimate(spec, max_model_len=1024, max_num_batched_tokens=64)
    layout = pool_layout(spec, est)
    pool = PagedKVPool(layout, 200, CPU)
    seq = pool.add_sequence(1000, 1024)
    sliding, full = seq.tables[0], seq.tables[-1]
    assert len(full) == len(set(full)) == 64
    assert len(sliding) == 64 and len(set(sliding)) == 11
    assert sliding[:11] == sliding[11:22] == seq.blocks[0]
    assert pool.allocator.num_used == 5 * 11 + 64


def test_pool_refuses_a_sequence_without_taking_blocks() -> None:
    spec = tiny_spec("llama")
    pool = PagedKVPool(pool_layout(spec, planner.estimate(spec, max_model_len=128)), 10, CPU)
    pool.add_sequence(100, 128)  # 8 blocks of 9 usable
    with pytest.raises(NoFreeBlocksError):
        pool.add_sequence(100, 128)
    assert pool.allocator.num_free == 1


def test_allocator_rejects_double_free_and_null_block() -> None:
    alloc = BlockAllocator(5)
    blocks = alloc.allocate(2)
    alloc.free(blocks)
    with pytest.raises(ValueError, match="not in use"):
        alloc.free(blocks)
    with pytest.raises(ValueError, match="not in use"):
        alloc.free([NULL_BLOCK])


@settings(max_examples=60, deadline=None)
@given(
    num_blocks=st.integers(1, 40),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 12)), max_size=40),
)
def test_allocator_invariants(num_blocks: int, ops: list[tuple[bool, int]]) -> None:
    """free + used + null == total; no block is handed out twice; block 0 never."""
    alloc = BlockAllocator(num_blocks)
    tables: list[list[int]] = []
    for take, n in ops:
        if take:
            try:
                tables.append(alloc.allocate(n))
            except NoFreeBlocksError:
                assert n > alloc.num_free
        elif tables:
            alloc.free(tables.pop(n % len(tables)))
        held = [b for t in tables for b in t]
        assert len(held) == len(set(held)), "a block is in two tables"
        assert NULL_BLOCK not in held
        assert alloc.num_free + alloc.num_used + 1 == num_blocks
        assert alloc.num_used == len(held)


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 300), min_size=1, max_size=8))
def test_pool_tables_never_share_blocks(lengths: list[int]) -> None:
    spec = tiny_spec("gemma3")
    est = planner.estimate(spec, max_model_len=300, max_num_batched_tokens=64)
    pool = PagedKVPool(pool_layout(spec, est), 120, CPU)
    for n in lengths:
        try:
            pool.add_sequence(n, n)
        except NoFreeBlocksError:
            pass
    held = [b for s in pool.sequences.values() for blocks in s.blocks for b in blocks]
    assert len(held) == len(set(held)) == pool.allocator.num_used
    for seq_id in list(pool.sequences):
        pool.remove_sequence(seq_id)
    assert pool.allocator.num_free == 119
