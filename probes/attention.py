"""Paged attention in pure torch: gather by block table, online softmax over bounded chunks.

One kernel serves every case the probe runs: prefill (many query tokens per sequence, causal),
chunked prefill (a chunk of queries against the prefix already in the pool), and decode (one
query per sequence, many sequences at once). Keys are read in chunks: a chunk gathers
``c`` tokens' K and V for ``s`` sequences (``pool[block_table]``), scores them, and folds them
into running softmax statistics (max ``m``, normaliser ``l``, weighted sum ``acc``), the
FlashAttention recurrence::

    m' = max(m, rowmax(S));  l' = l * exp(m - m') + rowsum(exp(S - m'))
    acc' = acc * exp(m - m') + exp(S - m') @ V;    out = acc / l

so the extra memory is bounded by ``max_chunk_bytes`` however long the context is (the probe
uses the same bound in its profile step and its decode steps, so decode fits in the activation
headroom vLLM reserves). Scores and statistics are float32; K and V stay in the cache dtype
until a chunk is gathered.

- **GQA / MQA**: ``Hq`` query heads read ``Hkv`` KV heads, query head ``h`` reading KV head
  ``h // (Hq / Hkv)`` (vLLM's and transformers' ``repeat_kv`` order).
- **Masks** from absolute positions: causal (``kv_pos <= q_pos``), sliding window
  (``q_pos - kv_pos < W``, Mistral/Gemma/gpt-oss), chunked local (same ``kv_pos // C`` as the
  query, Llama 4).
- **MLA** (absorbed form, as vLLM decodes): one KV "head" holding the latent
  (``kv_lora_rank + qk_rope_head_dim``); V is its first ``kv_lora_rank`` elements.

No faster kernel is wired in: FlashAttention's paged API needs block sizes that are multiples
of 256 and vLLM's kernels are not a pip dependency; the probe measures memory, and this kernel's
extra memory is bounded by construction.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from probes.plan import DEFAULT_CHUNK_BYTES

KVChunk = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # K [S,c,Hkv,Dk], V [S,c,Hkv,Dv], pos


def _visible(
    q_pos: torch.Tensor, kv_pos: torch.Tensor, window: int | None, chunk: int | None
) -> torch.Tensor:
    """[S, T, c] mask: key visible to query (padding keys and queries have position -1)."""
    q = q_pos[:, :, None]
    k = kv_pos[:, None, :]
    mask = (k >= 0) & (q >= 0) & (k <= q)
    if window is not None:
        mask &= q - k < window
    if chunk is not None:
        mask &= torch.div(q, chunk, rounding_mode="floor") == torch.div(
            k, chunk, rounding_mode="floor"
        )
    return mask


def _online_attention(
    q: torch.Tensor,
    q_pos: torch.Tensor,
    chunks: Iterator[KVChunk],
    scale: float,
    window: int | None,
    chunk: int | None,
    value_dim: int,
) -> torch.Tensor:
    """Fold KV chunks into softmax statistics; ``q`` is [S, T, Hq, Dk]; returns [S, T, Hq, Dv]."""
    S, T, Hq, Dk = q.shape
    m = l_sum = acc = None
    for key, value, kv_pos in chunks:
        Hkv, c = key.shape[2], key.shape[1]
        G = Hq // Hkv
        qh = q.view(S, T, Hkv, G, Dk).permute(0, 2, 3, 1, 4).reshape(S, Hkv, G * T, Dk)
        scores = torch.matmul(qh, key.to(q.dtype).permute(0, 2, 3, 1)).float()
        scores = scores.view(S, Hkv, G, T, c).mul_(scale)
        visible = _visible(q_pos, kv_pos, window, chunk)[:, None, None]
        scores.masked_fill_(~visible, float("-inf"))
        if m is None:
            m = torch.full((S, Hkv, G, T), float("-inf"), device=q.device)
            l_sum = torch.zeros((S, Hkv, G, T), device=q.device)
            acc = torch.zeros((S, Hkv, G, T, value_dim), device=q.device)
        assert l_sum is not None and acc is not None
        m_new = torch.maximum(m, scores.amax(-1))
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        probs = torch.exp(scores.sub_(m_safe[..., None]))
        correction = torch.exp(m - m_safe)
        l_sum = l_sum * correction + probs.sum(-1)
        v = value.permute(0, 2, 1, 3).float()  # [S, Hkv, c, Dv]
        pv = torch.matmul(probs.view(S, Hkv, G * T, c), v).view(S, Hkv, G, T, value_dim)
        acc = acc * correction[..., None] + pv
        m = m_new
        del scores, probs, pv, v
    if acc is None or l_sum is None:
        return q.new_zeros((S, T, Hq, value_dim))
    out = acc / l_sum.clamp_min(torch.finfo(torch.float32).tiny)[..., None]
    return out.permute(0, 3, 1, 2, 4).reshape(S, T, Hq, value_dim).to(q.dtype)


def _chunk_plan(
    num_seqs: int, q_tokens: int, q_heads: int, kv_bytes_per_token: int, max_chunk_bytes: int
) -> tuple[int, int]:
    """(sequences per sub-batch, KV tokens per chunk) keeping one chunk under the bound.

    Per (sequence, key token) a chunk holds the gathered K and V, their float32 copies, and
    float32 scores and probabilities for every query head and query token.
    """
    per_token = kv_bytes_per_token * 3 + q_heads * q_tokens * 8
    tokens = max(1, max_chunk_bytes // per_token)
    seqs = max(1, min(num_seqs, tokens))
    return seqs, max(1, tokens // seqs)


def attention(
    q: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    q_pos: torch.Tensor,
    kv_pos: torch.Tensor,
    *,
    scale: float,
    window: int | None = None,
    chunk: int | None = None,
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> torch.Tensor:
    """Attention over contiguous K/V (the profile step's prefill, no cache).

    Args:
        q: ``[S, T, Hq, Dk]`` queries; ``key`` ``[S, Tk, Hkv, Dk]``, ``value`` ``[S, Tk, Hkv, Dv]``.
        q_pos, kv_pos: ``[S, T]`` / ``[S, Tk]`` absolute positions, -1 for padding.
        scale: softmax scale (``1 / sqrt(Dk)`` unless the model says otherwise).
        window: sliding window in tokens; chunk: chunked-local attention size.
        max_chunk_bytes: bound on the extra memory of one chunk.

    Returns:
        ``[S, T, Hq, Dv]`` in ``q``'s dtype.
    """
    S, T, Hq, _ = q.shape
    Tk, Hkv = key.shape[1], key.shape[2]
    per_token = Hkv * (key.shape[3] + value.shape[3]) * key.element_size()
    seqs, tokens = _chunk_plan(S, T, Hq, per_token, max_chunk_bytes)
    outs = []
    for s0 in range(0, S, seqs):
        sl = slice(s0, s0 + seqs)

        def chunks(sl: slice = sl) -> Iterator[KVChunk]:
            for t0 in range(0, Tk, tokens):
                ts = slice(t0, t0 + tokens)
                yield key[sl, ts], value[sl, ts], kv_pos[sl, ts]

        outs.append(
            _online_attention(q[sl], q_pos[sl], chunks(), scale, window, chunk, value.shape[3])
        )
    return torch.cat(outs) if len(outs) > 1 else outs[0]


def paged_attention(
    q: torch.Tensor,
    q_pos: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor | None,
    block_table: torch.Tensor,
    block_start: torch.Tensor,
    *,
    scale: float,
    value_dim: int | None = None,
    window: int | None = None,
    chunk: int | None = None,
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> torch.Tensor:
    """Attention of ``q`` over K/V held in a paged pool.

    Args:
        q: ``[S, T, Hq, Dk]`` queries (decode: ``T == 1``); ``q_pos`` ``[S, T]`` positions.
        key_cache: ``[num_blocks, block_size, Hkv, Dk]`` view of one layer's pages.
        value_cache: same with ``Dv``; ``None`` for MLA (V = K's first ``value_dim`` elements).
        block_table: ``[S, nb]`` block ids of logical blocks ``block_start[s] + j``.
        block_start: ``[S]`` first logical block of each row.
        scale, window, chunk, max_chunk_bytes: as :func:`attention`.

    Returns:
        ``[S, T, Hq, Dv]`` in ``q``'s dtype.
    """
    S, T, Hq, _ = q.shape
    block_size, Hkv, Dk = key_cache.shape[1:]
    Dv = value_dim if value_dim is not None else value_cache.shape[3]  # type: ignore[union-attr]
    per_token = Hkv * (Dk + (Dv if value_cache is not None else 0)) * key_cache.element_size()
    seqs, tokens = _chunk_plan(S, T, Hq, per_token, max_chunk_bytes)
    blocks = max(1, tokens // block_size)
    nb = block_table.shape[1]
    offsets = torch.arange(block_size, device=q.device)
    outs = []
    for s0 in range(0, S, seqs):
        sl = slice(s0, s0 + seqs)

        def chunks(sl: slice = sl) -> Iterator[KVChunk]:
            for b0 in range(0, nb, blocks):
                ids = block_table[sl, b0 : b0 + blocks]
                n, c = ids.shape[0], ids.shape[1] * block_size
                logical = block_start[sl, None] + b0 + torch.arange(ids.shape[1], device=q.device)
                kv_pos = (logical[:, :, None] * block_size + offsets).view(n, c)
                key = key_cache[ids].view(n, c, Hkv, Dk)
                if value_cache is None:
                    value = key[..., :Dv]
                else:
                    value = value_cache[ids].view(n, c, Hkv, Dv)
                yield key, value, kv_pos

        outs.append(_online_attention(q[sl], q_pos[sl], chunks(), scale, window, chunk, Dv))
    return torch.cat(outs) if len(outs) > 1 else outs[0]
