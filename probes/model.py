"""One rank of a model with real-shaped random weights, and the passes the probe runs.

Three passes, all through the same layers:

- :meth:`ProbeModel.profile_step` -- vLLM's profile run (``_dummy_run(max_num_batched_tokens)``
  then the sampler): the token budget split over ``min(max_num_seqs, tokens)`` requests,
  causal attention within each request, no KV cache, logits and a float32 softmax for the
  last token of every request. Its peak minus what stays allocated is the activation
  headroom vLLM reserves.
- :meth:`ProbeModel.decode_step` -- one new token for every sequence in a
  :class:`~probes.paged.PagedKVPool`: K/V written into their slots, paged attention over each
  sequence's blocks, state slots updated in place.
- :meth:`ProbeModel.prefill` -- a prompt written into the pool in chunks of at most
  ``max_num_batched_tokens`` tokens (chunked prefill), each chunk attending to everything before
  it through the pool.

Weights are random (a repeated normal pattern, scaled 0.02) and either one tensor each
(real-shaped layers, as an engine loads them) or views into one flat buffer
(``weights_buffer``); a buffer sized by ``weights_bytes`` that is smaller than the model reuses
its space cyclically, so any byte count can be occupied and every layer still computes.

Simplifications that change values but not memory: no rotary embedding (an elementwise op on
q/k); MoE tokens go to the first ``top_k`` experts instead of routed ones (same shapes as
vLLM's fused-MoE buffers ``[tokens, top_k, 2 x intermediate]``); state mixers (Mamba,
Gated DeltaNet) keep their projections and state slots but replace the selective scan with an
in-place decay of the state; quantized weights (fp8, mxfp4) are stored packed and dequantized
one matrix at a time when used.

The profile runs every layer on CUDA; on CPU (``all_layers=False``) it runs one layer of each
distinct shape, because a layer's activations are freed before the next layer runs, so the
peak of a forward pass is the peak of its largest layer -- ``test_profile_peak_one_layer_per_shape``
checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from probes.alloc import fill_random_
from probes.attention import DEFAULT_CHUNK_BYTES, attention, paged_attention
from probes.paged import AttentionCache, PagedKVPool, SequenceState
from probes.weights import LayerDims, ModelDims, WeightSpec, weight_bytes, weight_specs

NORM_EPS = 1e-6


@dataclass
class Weight:
    """A stored weight and how to use it: packed (quantized) weights dequantize per use."""

    spec: WeightSpec
    stored: torch.Tensor
    dtype: torch.dtype

    def get(self, first: int | None = None) -> torch.Tensor:
        """The weight in the compute dtype; ``first``: only the first entries of dim 0 (the
        experts a step uses), so a packed expert stack is never dequantized whole."""
        stored = self.stored if first is None else self.stored[:first]
        if self.stored.dtype == self.dtype:
            return stored
        if self.stored.dtype == torch.float8_e4m3fn:
            return stored.to(self.dtype)
        # packed 4-bit: values are irrelevant to memory, the dequantized shape is not
        shape = self.spec.shape if first is None else (first, *self.spec.shape[1:])
        return torch.zeros(shape, dtype=self.dtype, device=self.stored.device)


def allocate_weights(
    dims: ModelDims,
    dtype: torch.dtype,
    device: torch.device,
    *,
    buffer_bytes: int | None = None,
) -> tuple[dict[str, Weight], list[torch.Tensor]]:
    """Allocate every weight of one rank and fill it.

    Args:
        dims: the rank's shapes.
        dtype: the model dtype.
        device: where to allocate.
        buffer_bytes: one flat buffer of this many bytes instead of one tensor per weight.

    Returns:
        (weights by name, the tensors that own the memory).
    """
    item = torch.empty((), dtype=dtype).element_size()
    specs = weight_specs(dims)
    owners: list[torch.Tensor] = []
    out: dict[str, Weight] = {}
    buffer = None
    if buffer_bytes is not None:
        buffer = torch.empty(buffer_bytes, dtype=torch.uint8, device=device)
        owners.append(buffer)
    offset = 0
    for i, w in enumerate(specs):
        nbytes = weight_bytes(w, dims, item)
        packed = w.quant and dims.quant_num > 0
        store_dtype = (
            (torch.float8_e4m3fn if dims.quant_num == dims.quant_den else torch.uint8)
            if packed
            else dtype
        )
        numel = w.numel if not packed or store_dtype != torch.uint8 else nbytes
        size = numel * torch.empty((), dtype=store_dtype).element_size()
        if buffer is None:
            tensor = torch.empty(numel, dtype=store_dtype, device=device)
            owners.append(tensor)
        else:
            if size > buffer_bytes:  # type: ignore[operator]
                raise ValueError(f"weight {w.name} ({size:,} B) is larger than the buffer")
            align = 256
            offset = -(-offset // align) * align
            if offset + size > buffer_bytes:  # type: ignore[operator]
                offset = 0  # reuse the buffer cyclically
            tensor = buffer[offset : offset + size].view(store_dtype)
            offset += size
        fill_random_(tensor if store_dtype != torch.uint8 else tensor.view(torch.int8), seed=i)
        if store_dtype == torch.float8_e4m3fn or store_dtype == dtype:
            tensor = tensor.view(w.shape)
        out[w.name] = Weight(spec=w, stored=tensor, dtype=dtype)
    return out, owners


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS)).to(x.dtype) * weight


@dataclass
class Batch:
    """What one forward pass runs on.

    Contiguous (the profile): ``lengths`` of the requests, no pool. Paged: ``seqs`` in
    ``pool`` with the ``positions`` of their new tokens (decode: one each; prefill: a chunk of
    one sequence).
    """

    lengths: list[int] | None = None
    pool: PagedKVPool | None = None
    seqs: Sequence[SequenceState] = ()
    positions: Sequence[Sequence[int]] = ()
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES

    def __post_init__(self) -> None:
        self._tables: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def paged_inputs(
        self, group: int, window: int | None, chunk: int | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(block table, first logical block, query positions), once per group per pass."""
        if group not in self._tables:
            assert self.pool is not None
            first, last = [], []
            for pos in self.positions:
                lo = pos[0]
                if window is not None:
                    lo = max(0, lo - window + 1)
                elif chunk is not None:
                    lo = lo // chunk * chunk
                else:
                    lo = 0
                first.append(lo)
                last.append(pos[-1])
            table, start = self.pool.tables(group, self.seqs, first, last)
            q_pos = torch.tensor(
                [list(p) for p in self.positions], dtype=torch.long, device=self.pool.device
            )
            self._tables[group] = (table, start, q_pos)
        return self._tables[group]


class ProbeModel:
    """One rank's layers over allocated weights (see the module docstring)."""

    def __init__(self, dims: ModelDims, weights: dict[str, Weight], dtype: torch.dtype) -> None:
        self.dims = dims
        self.w = weights
        self.dtype = dtype
        self.windows: dict[int, tuple[int | None, int | None]] = {}

    @property
    def device(self) -> torch.device:
        return self.w["embed"].stored.device

    def set_windows(self, windows: dict[int, tuple[int | None, int | None]]) -> None:
        """Per layer (sliding window, chunk size) from the cache spec."""
        self.windows = windows

    def _w(self, name: str) -> torch.Tensor:
        return self.w[name].get()

    # ------------------------------------------------------------------ layers
    def _attention(self, layer: LayerDims, h: torch.Tensor, batch: Batch) -> torch.Tensor:
        m = layer.mixer
        assert m is not None
        p = f"layers.{layer.index}."
        n = h.shape[0]
        qkv = h @ self._w(p + "qkv").T
        dq, dk = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
        dg = dq if m.output_gate else 0  # the output gate packed after Q
        q = qkv[:, :dq].view(n, m.q_heads, m.head_dim)
        gate = qkv[:, dq : dq + dg]
        k = qkv[:, dq + dg : dq + dg + dk].view(n, m.kv_heads, m.head_dim)
        v = qkv[:, dq + dg + dk :].view(n, m.kv_heads, m.head_dim_v)
        window, chunk = self.windows.get(layer.index, (None, None))
        scale = m.head_dim**-0.5
        if batch.pool is not None:
            batch.pool.write(layer.index, batch.seqs, batch.positions, k, v)
            cache = batch.pool.attention_cache(layer.index)
            out = self._paged(layer.index, q, cache, batch, scale, window, chunk)
        else:
            out = self._contiguous(q, k, v, batch, scale, window, chunk)
        out = out.reshape(n, m.q_heads * m.head_dim_v)
        if m.output_gate:  # vLLM's Qwen3NextAttention: attn_output * sigmoid(gate)
            out = out * torch.sigmoid(gate)
        return out @ self._w(p + "o").T

    def _paged(
        self,
        index: int,
        q: torch.Tensor,
        cache: AttentionCache,
        batch: Batch,
        scale: float,
        window: int | None,
        chunk: int | None,
    ) -> torch.Tensor:
        assert batch.pool is not None
        group = batch.pool.layout.layer_group[index]
        table, start, q_pos = batch.paged_inputs(group, window, chunk)
        S, T = q_pos.shape
        return paged_attention(
            q.view(S, T, q.shape[1], q.shape[2]),
            q_pos,
            cache.key,
            cache.value,
            table,
            start,
            scale=scale,
            value_dim=cache.value_dim,
            window=window,
            chunk=chunk,
            max_chunk_bytes=batch.max_chunk_bytes,
        )

    def _contiguous(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: Batch,
        scale: float,
        window: int | None,
        chunk: int | None,
    ) -> torch.Tensor:
        assert batch.lengths is not None
        outs, offset = [], 0
        for length, count in _runs(batch.lengths):
            n = length * count
            sl = slice(offset, offset + n)
            pos = torch.arange(length, device=q.device).expand(count, length)
            outs.append(
                attention(
                    q[sl].view(count, length, *q.shape[1:]),
                    k[sl].view(count, length, *k.shape[1:]),
                    v[sl].view(count, length, *v.shape[1:]),
                    pos,
                    pos,
                    scale=scale,
                    window=window,
                    chunk=chunk,
                    max_chunk_bytes=batch.max_chunk_bytes,
                ).reshape(n, q.shape[1], -1)
            )
            offset += n
        return torch.cat(outs) if len(outs) > 1 else outs[0]

    def _mla(self, layer: LayerDims, h: torch.Tensor, batch: Batch) -> torch.Tensor:
        m = layer.mixer
        assert m is not None
        p = f"layers.{layer.index}."
        n, H = h.shape[0], m.q_heads
        nope, rope, lora, vd = m.qk_nope_head_dim, m.qk_rope_head_dim, m.kv_lora_rank, m.v_head_dim
        if m.q_lora_rank:
            qa = rms_norm(h @ self._w(p + "q_a").T, self._w(p + "q_a_norm"))
            q = (qa @ self._w(p + "q_b").T).view(n, H, nope + rope)
        else:
            q = (h @ self._w(p + "q").T).view(n, H, nope + rope)
        kv_a = h @ self._w(p + "kv_a").T
        latent = rms_norm(kv_a[:, :lora], self._w(p + "kv_a_norm"))
        k_rope = kv_a[:, lora:]
        kv_b = self._w(p + "kv_b").view(H, nope + vd, lora)
        scale = (nope + rope) ** -0.5
        if batch.pool is not None:  # absorbed: attend in the latent space, as vLLM decodes
            entry = torch.cat([latent, k_rope], dim=-1).view(n, 1, lora + rope)
            batch.pool.write(layer.index, batch.seqs, batch.positions, entry, None)
            q_lat = torch.einsum("nhd,hdl->nhl", q[..., :nope], kv_b[:, :nope])
            q_full = torch.cat([q_lat, q[..., nope:]], dim=-1)
            cache = batch.pool.attention_cache(layer.index)
            window, chunk = self.windows.get(layer.index, (None, None))
            out_lat = self._paged(layer.index, q_full, cache, batch, scale, window, chunk)
            out = torch.einsum("nhl,hvl->nhv", out_lat.reshape(n, H, lora), kv_b[:, nope:])
        else:  # expanded, as vLLM's MLA prefill
            kv = torch.einsum("nl,hdl->nhd", latent, kv_b)
            k = torch.cat([kv[..., :nope], k_rope[:, None, :].expand(n, H, rope)], dim=-1)
            out = self._contiguous(q, k, kv[..., nope:], batch, scale, None, None)
        return out.reshape(n, H * vd) @ self._w(p + "o").T

    def _state(self, layer: LayerDims, h: torch.Tensor, batch: Batch) -> torch.Tensor:
        m = layer.mixer
        assert m is not None
        p = f"layers.{layer.index}."
        proj = h @ self._w(p + "in_proj").T
        inner = m.state_inner
        y = proj[:, :inner] * F.silu(proj[:, inner : 2 * inner])  # x gated by z
        if batch.pool is not None:
            cache = batch.pool.state_cache(layer.index)
            group = batch.pool.layout.layer_group[layer.index]
            for seq in batch.seqs:
                slot = seq.tables[group][0]
                cache.conv[slot] = torch.roll(cache.conv[slot], -1, dims=-1)
                cache.ssm[slot].mul_(0.9)
        return y @ self._w(p + "out_proj").T

    def _mlp(self, layer: LayerDims, h: torch.Tensor) -> torch.Tensor:
        mlp = layer.mlp
        assert mlp is not None
        p = f"layers.{layer.index}."
        if not mlp.num_experts:
            return _ffn(h, self._w(p + "up"), self._w(p + "down"), mlp.gated, mlp.intermediate)
        router = (h @ self._w(p + "router").T).float()
        gates = torch.softmax(router, dim=-1).topk(mlp.top_k, dim=-1).values.to(h.dtype)
        # fixed routing: the first top_k experts
        up = self.w[p + "experts_up"].get(mlp.top_k)
        down = self.w[p + "experts_down"].get(mlp.top_k)
        hidden = torch.matmul(h.unsqueeze(0), up.transpose(1, 2))  # [top_k, n, (2) I]
        if mlp.gated:
            hidden = F.silu(hidden[..., : mlp.intermediate]) * hidden[..., mlp.intermediate :]
        else:
            hidden = F.relu(hidden).square()
        out = torch.matmul(hidden, down.transpose(1, 2))  # [top_k, n, H]
        out = (out * gates.T.unsqueeze(-1)).sum(0)
        if mlp.shared_intermediate:
            shared = _ffn(
                h,
                self._w(p + "shared_up"),
                self._w(p + "shared_down"),
                mlp.gated,
                mlp.shared_intermediate,
            )
            out = out + shared
        return out

    def layer(self, layer: LayerDims, x: torch.Tensor, batch: Batch) -> torch.Tensor:
        p = f"layers.{layer.index}."
        if layer.mixer is not None:
            h = rms_norm(x, self._w(p + "input_norm"))
            mixer = {"attention": self._attention, "mla": self._mla, "state": self._state}
            x = x + mixer[layer.mixer.kind](layer, h, batch)
        if layer.mlp is not None:
            norm = self._w(p + "post_norm" if layer.mixer is not None else p + "input_norm")
            x = x + self._mlp(layer, rms_norm(x, norm))
        return x

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        head = self._w("embed" if self.dims.tied else "lm_head")
        return rms_norm(h, self._w("final_norm")) @ head.T

    def sample(self, h: torch.Tensor) -> torch.Tensor:
        """Greedy sampling as vLLM's sampler does it: float32 logits, softmax, argmax."""
        probs = torch.softmax(self.logits(h).float(), dim=-1)
        return probs.argmax(-1)

    # ------------------------------------------------------------------ passes
    def distinct_layers(self) -> list[LayerDims]:
        """One layer of each distinct shape (see the module docstring)."""
        seen: dict[tuple[object, ...], LayerDims] = {}
        for layer in self.dims.layers:
            key = (layer.mixer, layer.mlp, self.windows.get(layer.index))
            seen.setdefault(key, layer)
        return list(seen.values())

    def profile_step(
        self,
        num_tokens: int,
        max_num_seqs: int,
        *,
        all_layers: bool = True,
        max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> torch.Tensor:
        """vLLM's profile run: ``num_tokens`` split over ``min(max_num_seqs, num_tokens)``
        requests (the last takes the remainder), then the sampler on each request's last token.
        """
        num_reqs = max(1, min(max_num_seqs, num_tokens))
        per = num_tokens // num_reqs
        lengths = [per] * (num_reqs - 1) + [num_tokens - per * (num_reqs - 1)]
        ids = torch.randint(0, self.dims.vocab, (num_tokens,), device=self.device)
        x = self._w("embed")[ids]
        batch = Batch(lengths=lengths, max_chunk_bytes=max_chunk_bytes)
        for layer in self.dims.layers if all_layers else self.distinct_layers():
            x = self.layer(layer, x, batch)
        last = torch.tensor(lengths, device=self.device).cumsum(0) - 1
        return self.sample(x[last])

    def decode_step(
        self,
        pool: PagedKVPool,
        seqs: Sequence[SequenceState],
        *,
        max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> torch.Tensor:
        """One token for every sequence in ``seqs``; returns the sampled token ids."""
        positions = [[s.num_tokens] for s in seqs]
        ids = torch.randint(0, self.dims.vocab, (len(seqs),), device=self.device)
        x = self._w("embed")[ids]
        batch = Batch(pool=pool, seqs=seqs, positions=positions, max_chunk_bytes=max_chunk_bytes)
        for layer in self.dims.layers:
            x = self.layer(layer, x, batch)
        for s in seqs:
            s.num_tokens += 1
        return self.sample(x)

    def prefill(
        self,
        pool: PagedKVPool,
        seq: SequenceState,
        token_ids: torch.Tensor,
        *,
        chunk_tokens: int,
        max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> torch.Tensor:
        """Write ``token_ids`` into ``seq`` in chunks of ``chunk_tokens`` (chunked prefill);
        returns the hidden state of the last token (before the final norm)."""
        x_last = None
        for c0 in range(0, token_ids.shape[0], chunk_tokens):
            ids = token_ids[c0 : c0 + chunk_tokens]
            start = seq.num_tokens
            positions = [list(range(start, start + ids.shape[0]))]
            batch = Batch(
                pool=pool, seqs=[seq], positions=positions, max_chunk_bytes=max_chunk_bytes
            )
            x = self._w("embed")[ids]
            for layer in self.dims.layers:
                x = self.layer(layer, x, batch)
            seq.num_tokens += ids.shape[0]
            x_last = x[-1:]
        assert x_last is not None
        return x_last

    def forward_contiguous(self, token_ids: torch.Tensor) -> torch.Tensor:
        """One request through every layer without a cache; the last token's hidden state."""
        x = self._w("embed")[token_ids]
        batch = Batch(lengths=[token_ids.shape[0]])
        for layer in self.dims.layers:
            x = self.layer(layer, x, batch)
        return x[-1:]


def _ffn(
    h: torch.Tensor, up: torch.Tensor, down: torch.Tensor, gated: bool, inter: int
) -> torch.Tensor:
    hidden = h @ up.T
    if gated:
        hidden = F.silu(hidden[:, :inter]) * hidden[:, inter:]
    else:
        hidden = F.relu(hidden).square()
    return hidden @ down.T


def _runs(lengths: list[int]) -> list[tuple[int, int]]:
    """Consecutive equal lengths as (length, count): requests batched by shape."""
    runs: list[tuple[int, int]] = []
    for n in lengths:
        if runs and runs[-1][0] == n:
            runs[-1] = (n, runs[-1][1] + 1)
        else:
            runs.append((n, 1))
    return runs


def model_windows(layout_specs: dict[int, object]) -> dict[int, tuple[int | None, int | None]]:
    """(window, chunk) of each attention layer from its cache spec."""
    from planner.model.specs import ChunkedLocal, SlidingWindow

    out: dict[int, tuple[int | None, int | None]] = {}
    for index, spec in layout_specs.items():
        if isinstance(spec, SlidingWindow):
            out[index] = (spec.sliding_window, None)
        elif isinstance(spec, ChunkedLocal):
            out[index] = (None, spec.chunk_size)
    return out
