"""Paged attention equals contiguous attention on the same data.

Reference: ``torch.nn.functional.scaled_dot_product_attention`` in float32 over the contiguous
K/V with an explicit mask. Tolerances: float32 pools 1e-5 absolute (outputs are O(1); the
online softmax reorders the sums), bf16 pools 2e-2 (bf16 has an 8-bit mantissa, 2^-8 = 0.004
relative per element, and scores pass through one bf16 matmul).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from probes.attention import attention, paged_attention  # noqa: E402

FP32_ATOL = 1e-5
BF16_ATOL = 2e-2


def reference_attention(q, key, value, q_pos, kv_pos, *, scale, window=None, chunk=None):
    """SDPA over contiguous K/V; the mask is written out per rule, independent of the probe's.

    Query head h reads KV head h // (Hq / Hkv) (``repeat_interleave``).
    """
    S, T, Hq, _ = q.shape
    mask = torch.zeros(S, 1, T, key.shape[1], dtype=torch.bool)
    for s in range(S):
        for t in range(T):
            qp = int(q_pos[s, t])
            for j in range(key.shape[1]):
                kp = int(kv_pos[s, j])
                ok = 0 <= kp <= qp
                if window is not None:
                    ok = ok and qp - kp < window  # the last `window` tokens, itself included
                if chunk is not None:
                    ok = ok and qp // chunk == kp // chunk
                mask[s, 0, t, j] = ok
    group = Hq // key.shape[2]
    k = key.float().repeat_interleave(group, dim=2).transpose(1, 2)
    v = value.float().repeat_interleave(group, dim=2).transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(1, 2), k, v, attn_mask=mask, scale=scale
    )
    return out.transpose(1, 2).to(q.dtype)


def make_pool(num_seqs: int, blocks_each: int, block_size: int, heads: int, dim: int, dtype):
    """A pool with shuffled block ids, and the same K/V laid out contiguously per sequence."""
    gen = torch.Generator().manual_seed(0)
    num_blocks = num_seqs * blocks_each + 5
    k_cache = torch.randn(num_blocks, block_size, heads, dim, generator=gen).to(dtype)
    v_cache = torch.randn(num_blocks, block_size, heads, dim, generator=gen).to(dtype)
    ids = torch.randperm(num_blocks - 1, generator=gen)[: num_seqs * blocks_each] + 1
    table = ids.view(num_seqs, blocks_each)
    tokens = blocks_each * block_size
    k = k_cache[table].reshape(num_seqs, tokens, heads, dim)
    v = v_cache[table].reshape(num_seqs, tokens, heads, dim)
    return k_cache, v_cache, table, k, v


@pytest.mark.parametrize(
    ("q_heads", "kv_heads", "window", "chunk", "dtype", "atol"),
    [
        (8, 2, None, None, torch.float32, FP32_ATOL),  # GQA
        (4, 4, None, None, torch.float32, FP32_ATOL),  # MHA
        (8, 1, None, None, torch.float32, FP32_ATOL),  # MQA
        (8, 2, 20, None, torch.float32, FP32_ATOL),  # sliding window
        (8, 2, None, 32, torch.float32, FP32_ATOL),  # chunked local (Llama 4)
        (8, 2, None, None, torch.bfloat16, BF16_ATOL),
    ],
)
def test_decode_many_sequences_matches_contiguous(q_heads, kv_heads, window, chunk, dtype, atol):
    S, blocks, bs, D = 5, 6, 16, 32
    k_cache, v_cache, table, k, v = make_pool(S, blocks, bs, kv_heads, D, dtype)
    lengths = torch.tensor([96, 70, 33, 17, 1])  # ragged contexts, the last one token
    q = torch.randn(S, 1, q_heads, D, generator=torch.Generator().manual_seed(1)).to(dtype)
    q_pos = (lengths - 1)[:, None]
    kv_pos = torch.arange(blocks * bs).expand(S, -1)
    ref = reference_attention(q, k, v, q_pos, kv_pos, scale=D**-0.5, window=window, chunk=chunk)
    # a small chunk bound forces several chunks per sequence and several sub-batches
    out = paged_attention(
        q,
        q_pos,
        k_cache,
        v_cache,
        table,
        torch.zeros(S, dtype=torch.long),
        scale=D**-0.5,
        window=window,
        chunk=chunk,
        max_chunk_bytes=64 << 10,
    )
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=0)


def test_chunked_prefill_through_the_pool_matches_one_pass() -> None:
    # 100 prompt tokens written in chunks of 32: each chunk attends to the prefix in the pool.
    bs, heads, q_heads, D, n = 16, 2, 4, 16, 100
    gen = torch.Generator().manual_seed(2)
    k = torch.randn(1, n, heads, D, generator=gen)
    v = torch.randn(1, n, heads, D, generator=gen)
    q = torch.randn(1, n, q_heads, D, generator=gen)
    pos = torch.arange(n)[None]
    ref = reference_attention(q, k, v, pos, pos, scale=D**-0.5)
    k_cache = torch.zeros(12, bs, heads, D)
    v_cache = torch.zeros(12, bs, heads, D)
    table = torch.tensor([[7, 3, 9, 1, 11, 2, 5]])  # 7 blocks hold 112 >= 100 tokens
    outs = []
    for c0 in range(0, n, 32):
        p = torch.arange(c0, min(n, c0 + 32))
        k_cache[table[0, p // bs], p % bs] = k[0, p]
        v_cache[table[0, p // bs], p % bs] = v[0, p]
        last_block = int(p[-1]) // bs + 1
        outs.append(
            paged_attention(
                q[:, p],
                p[None],
                k_cache,
                v_cache,
                table[:, :last_block],
                torch.zeros(1, dtype=torch.long),
                scale=D**-0.5,
                max_chunk_bytes=8 << 10,
            )
        )
    torch.testing.assert_close(torch.cat(outs, dim=1), ref, atol=FP32_ATOL, rtol=0)


def test_mla_absorbed_decode_matches_expanded_attention() -> None:
    # MLA: per-head K = [W_uk c ; k_rope], V = W_uv c. The pool holds only [c ; k_rope]; the
    # query is absorbed (q_nope W_uk) and V read as the latent's first kv_lora_rank elements.
    H, lora, rope, nope, vd, n, bs = 4, 32, 8, 16, 16, 40, 16
    gen = torch.Generator().manual_seed(3)
    latent = torch.randn(n, lora, generator=gen)
    k_rope = torch.randn(n, rope, generator=gen)
    w_kv_b = torch.randn(H, nope + vd, lora, generator=gen) * 0.1
    q = torch.randn(1, H, nope + rope, generator=gen)
    k_nope = torch.einsum("nl,hdl->nhd", latent, w_kv_b[:, :nope])
    k_full = torch.cat([k_nope, k_rope[:, None].expand(n, H, rope)], -1)
    v_full = torch.einsum("nl,hdl->nhd", latent, w_kv_b[:, nope:])
    pos = torch.tensor([[n - 1]])
    kv_pos = torch.arange(n)[None]
    scale = (nope + rope) ** -0.5
    ref = reference_attention(q[None], k_full[None], v_full[None], pos, kv_pos, scale=scale)
    cache = torch.zeros(4, bs, 1, lora + rope)
    table = torch.tensor([[2, 0 + 3, 1]])  # 3 blocks x 16 >= 40 tokens
    p = torch.arange(n)
    cache[table[0, p // bs], p % bs, 0] = torch.cat([latent, k_rope], -1)
    q_lat = torch.einsum("hd,hdl->hl", q[0, :, :nope], w_kv_b[:, :nope])
    q_abs = torch.cat([q_lat, q[0, :, nope:]], -1)[None, None]
    out_lat = paged_attention(
        q_abs,
        pos,
        cache,
        None,
        table,
        torch.zeros(1, dtype=torch.long),
        scale=scale,
        value_dim=lora,
    )
    out = torch.einsum("hl,hvl->hv", out_lat[0, 0], w_kv_b[:, nope:])
    torch.testing.assert_close(out, ref[0, 0], atol=FP32_ATOL, rtol=0)


def test_contiguous_attention_is_bounded_and_exact() -> None:
    # the profile step's path: many short requests, causal, chunked far below one request
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(6, 24, 8, 16, generator=gen)
    k = torch.randn(6, 24, 2, 16, generator=gen)
    v = torch.randn(6, 24, 2, 16, generator=gen)
    pos = torch.arange(24).expand(6, -1)
    ref = reference_attention(q, k, v, pos, pos, scale=0.25, window=7)
    for bound in (1 << 10, 1 << 14, 1 << 30):
        out = attention(q, k, v, pos, pos, scale=0.25, window=7, max_chunk_bytes=bound)
        torch.testing.assert_close(out, ref, atol=FP32_ATOL, rtol=0)
