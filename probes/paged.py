"""vLLM's paged KV pool on one GPU rank: raw tensors, per-layer views, blocks and block tables.

The layout follows vLLM 0.33's ``KVCacheConfig``: the layers of a model are split into
KV-cache groups (one block table each; :attr:`planner.kv_layout.VllmLayout.groups`), and all groups
draw block ids from **one** pool. vLLM allocates ``kv_cache_tensors``: tensor ``j`` holds the
``j``-th layer of *every* group, ``num_blocks * page`` bytes, so block ``b`` of group 0's layer
``j`` and block ``b`` of group 1's layer ``j`` are the same bytes -- which is why a block costs
``bytes_per_block = max group layers x page`` whichever group takes it. :class:`PagedKVPool`
allocates exactly those raw ``uint8`` tensors and views each layer's page in its own shape:

- attention (full / sliding / chunked): ``[num_blocks, 2, block_size, kv_heads, head_size]``
  (FlashAttention's layout; K and V of different sizes share the last dim instead);
- MLA: ``[num_blocks, block_size, kv_lora_rank + qk_rope_head_dim]``, one latent, no V;
- Mamba / linear attention: one state slot per block, ``conv`` then ``ssm`` state, in their
  own dtypes (the page is padded to the attention page as vLLM pads ``page_size_padded``).

The pool's page sizes come from the layers' geometry (heads, head sizes, the KV dtype's
element size), not from the planner's byte figures, so :attr:`PoolLayout.bytes_per_block` is
a measurement the probe can compare with the plan's ``bytes_per_block``; where a layer's
natural page is smaller than the plan's page (a padded Mamba page), the plan's page is used.

:class:`BlockAllocator` mirrors vLLM's ``BlockPool``: block 0 is the permanent null block, the
rest are handed out and returned, and ``free + used + 1 == num_blocks`` always holds. A
sequence owns one block table per group; a window group owns as many blocks as vLLM's
sliding-window manager holds at once (window + tokens in flight + 1) and maps the logical
table onto them as a ring, a state group owns its state slot(s).

Worked example (Gemma-3-1B, TP 1, bf16, block 16): 22 sliding + 4 full layers -> groups of 4
(6 sliding groups of 4,4,4,4,3,3 and 1 full group of 4); 4 raw tensors, each 16 x 1 KV head x
(256 + 256) x 2 B = 16,384 B per block, so one block costs 4 x 16,384 = 65,536 B.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from planner.kv_layout import KVEstimate
from planner.model.specs import (
    MLA,
    CacheContext,
    Engine,
    FullAttention,
    LayerSpec,
    ModelSpec,
    StateSpec,
)
from probes.alloc import fill_random_

TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "int8": torch.int8,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}
NULL_BLOCK = 0


class NoFreeBlocksError(RuntimeError):
    """The pool has fewer free blocks than a sequence needs (vLLM would not admit it)."""


def model_dtype(spec: ModelSpec) -> torch.dtype:
    """The dtype an engine runs the model in: the checkpoint's, float32 served as bf16."""
    return torch.bfloat16 if spec.dtype == "float32" else TORCH_DTYPES[spec.dtype]


def rank_layers(spec: ModelSpec, est: KVEstimate) -> list[LayerSpec | None]:
    """The per-rank cache spec of every layer, as the estimate sized them."""
    run_bytes = torch.empty((), dtype=model_dtype(spec)).element_size()
    return [
        None
        if s is None
        else s.for_rank(
            tp=est.tensor_parallel_size,
            kv_dtype_bytes=est.kv_dtype_bytes,
            engine=Engine(est.engine),
            model_dtype_bytes=run_bytes,
        )
        for s in spec.layers
    ]


@dataclass(frozen=True)
class GroupLayout:
    """One KV-cache group: its layers (model indices), block size and per-request blocks."""

    kind: str
    window: int | None
    block_size: int
    page_bytes: int
    blocks_per_request: int
    layers: tuple[int, ...]
    spec: LayerSpec


@dataclass(frozen=True)
class PoolLayout:
    """Where every cache-holding layer lives in the pool (see the module docstring)."""

    groups: tuple[GroupLayout, ...]
    layer_group: dict[int, int]
    layer_position: dict[int, int]
    position_bytes: tuple[int, ...]
    kv_dtype: torch.dtype
    state_dtype: torch.dtype
    ssm_dtype: torch.dtype
    max_model_len: int
    max_in_flight_tokens: int
    mamba_align: bool
    page_mismatches: tuple[str, ...] = ()

    @property
    def bytes_per_block(self) -> int:
        """Bytes one block id costs across all raw tensors (vLLM ``bytes_per_block``)."""
        return sum(self.position_bytes)

    def cache_context(self, max_model_len: int | None = None) -> CacheContext:
        return CacheContext(
            engine=Engine.VLLM,
            max_model_len=max_model_len or self.max_model_len,
            block_size=self.groups[0].block_size if self.groups else 16,
            max_in_flight_tokens=self.max_in_flight_tokens,
            mamba_align=self.mamba_align,
        )

    def blocks_for(self, group: int, num_tokens: int) -> int:
        """Blocks group ``group`` gives one sequence of ``num_tokens`` tokens (vLLM's count)."""
        g = self.groups[group]
        ctx = self.cache_context(max(1, num_tokens))
        return g.spec.blocks_per_request(ctx, g.block_size)

    def blocks_per_request(self, num_tokens: int | None = None) -> int:
        tokens = num_tokens or self.max_model_len
        return sum(self.blocks_for(i, tokens) for i in range(len(self.groups)))


def natural_page_bytes(spec: LayerSpec, block_size: int, kv_dtype: torch.dtype) -> int:
    """Bytes of one block of ``spec`` from its tensor geometry and torch's element sizes."""
    kv_item = torch.empty((), dtype=kv_dtype).element_size()
    if isinstance(spec, MLA):
        return block_size * spec.head_size * kv_item
    if isinstance(spec, FullAttention):
        return block_size * spec.num_kv_heads * (spec.head_size + spec.head_size_v) * kv_item
    if isinstance(spec, StateSpec):
        conv, ssm = spec.shapes
        return _align(math.prod(conv) * spec.conv_dtype_bytes) + math.prod(ssm) * (
            spec.ssm_dtype_bytes
        )
    raise TypeError(f"no cache layout for {type(spec).__name__}")


def _align(n: int, to: int = 16) -> int:
    return -(-n // to) * to


def pool_layout(spec: ModelSpec, est: KVEstimate) -> PoolLayout:
    """Assign every cache-holding layer to its vLLM group and raw tensor.

    Layers are bucketed by kind and window in model order and each bucket is split over the
    plan's groups of that kind by stride (layer ``i`` of a bucket of ``n`` groups goes to
    group ``i mod n``), as vLLM's ``_get_kv_cache_groups_uniform_page_size`` does.

    Args:
        spec: the model.
        est: a vLLM estimate of ``spec`` (its ``vllm`` layout names the groups).

    Returns:
        The :class:`PoolLayout`.
    """
    if est.vllm is None:
        raise ValueError("pool_layout needs a vLLM estimate")
    layers = rank_layers(spec, est)
    start, end = est.pp_layers
    buckets: dict[tuple[str, int | None], list[int]] = {}
    for i in range(start, end):
        s = layers[i]
        if s is not None and (s.bytes_per_token or s.state_bytes):
            buckets.setdefault((s.kind, s.window), []).append(i)
    plan_groups = est.vllm.groups
    kv_dtype = TORCH_DTYPES[est.kv_cache_dtype]
    run_dtype = model_dtype(spec)
    groups: list[GroupLayout] = []
    taken: dict[tuple[str, int | None], int] = {}
    for pg in plan_groups:
        key = (pg.kind, pg.window)
        members = buckets.get(key, [])
        n = sum(1 for h in plan_groups if (h.kind, h.window) == key)
        k = taken.get(key, 0)
        taken[key] = k + 1
        chosen = tuple(members[k::n])
        first = layers[chosen[0]] if chosen else None
        if first is None:
            raise ValueError(f"plan group {pg.kind} has no layer in this model")
        groups.append(
            GroupLayout(
                kind=pg.kind,
                window=pg.window,
                block_size=pg.block_size,
                page_bytes=pg.page_size_bytes,
                blocks_per_request=pg.blocks_per_request,
                layers=chosen,
                spec=first,
            )
        )
    layer_group: dict[int, int] = {}
    layer_position: dict[int, int] = {}
    width = max((len(g.layers) for g in groups), default=0)
    position_bytes = [0] * width
    mismatches = []
    for gi, g in enumerate(groups):
        for j, index in enumerate(g.layers):
            layer_group[index] = gi
            layer_position[index] = j
            s = layers[index]
            assert s is not None
            natural = natural_page_bytes(s, g.block_size, kv_dtype)
            padded_state = isinstance(s, StateSpec) and natural < g.page_bytes
            if natural != g.page_bytes and not padded_state:
                mismatches.append(
                    f"layer {index} ({g.kind}): {natural:,} B per block from its geometry, "
                    f"plan says {g.page_bytes:,} B"
                )
            position_bytes[j] = max(position_bytes[j], natural, g.page_bytes)
    ssm_bytes = max((s.ssm_dtype_bytes for s in layers if isinstance(s, StateSpec)), default=0)
    return PoolLayout(
        groups=tuple(groups),
        layer_group=layer_group,
        layer_position=layer_position,
        position_bytes=tuple(position_bytes),
        kv_dtype=kv_dtype,
        state_dtype=run_dtype,
        ssm_dtype=torch.float32 if ssm_bytes == 4 else run_dtype,
        max_model_len=est.max_model_len,
        max_in_flight_tokens=est.vllm.max_in_flight_tokens,
        mamba_align=est.vllm.mamba_cache_mode == "align",
        page_mismatches=tuple(mismatches),
    )


class BlockAllocator:
    """vLLM's ``BlockPool`` free list: block 0 is the null block, never handed out."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"a pool needs at least the null block, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(1, num_blocks))
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` blocks, or none if fewer are free."""
        if n > len(self._free):
            raise NoFreeBlocksError(f"{n} blocks wanted, {len(self._free)} free")
        blocks = [self._free.popleft() for _ in range(n)]
        self._used.update(blocks)
        return blocks

    def free(self, blocks: Iterable[int]) -> None:
        """Return blocks; a block that is not in use (double free, null, foreign) is a bug."""
        blocks = list(blocks)
        bad = [b for b in blocks if b not in self._used]
        if bad or len(set(blocks)) != len(blocks):
            raise ValueError(f"freeing blocks not in use: {sorted(set(bad)) or blocks}")
        self._used.difference_update(blocks)
        self._free.extend(blocks)


@dataclass
class SequenceState:
    """One sequence: its length, the blocks it owns per group, and its block tables
    (logical block index -> block id) per group."""

    seq_id: int
    num_tokens: int
    capacity: int
    blocks: list[list[int]] = field(default_factory=list)
    tables: list[list[int]] = field(default_factory=list)


@dataclass(frozen=True)
class AttentionCache:
    """One attention layer's view of the pool: K and V (MLA: V is ``None``, read from K)."""

    key: torch.Tensor  # [num_blocks, block_size, heads, head_size]
    value: torch.Tensor | None  # [num_blocks, block_size, heads, head_size_v]
    value_dim: int


@dataclass(frozen=True)
class StateCache:
    """One Mamba / linear-attention layer's state slots, one per block."""

    conv: torch.Tensor  # [num_blocks, *conv_shape]
    ssm: torch.Tensor  # [num_blocks, *ssm_shape]


class PagedKVPool:
    """The pool of one rank: raw tensors, per-layer views, allocator and sequences."""

    def __init__(self, layout: PoolLayout, num_blocks: int, device: torch.device) -> None:
        self.layout = layout
        self.num_blocks = num_blocks
        self.device = device
        # vLLM's kv_cache_tensors: raw bytes, tensor j shared by layer j of every group, zeroed
        # as vLLM's are: attention gives the unwritten rest of a block zero weight, but 0 x NaN
        # is NaN, so memory left over from earlier tensors must not reach it.
        self.raw = [
            torch.zeros(num_blocks * nbytes, dtype=torch.uint8, device=device).view(
                num_blocks, nbytes
            )
            for nbytes in layout.position_bytes
        ]
        self.allocator = BlockAllocator(num_blocks)
        self.sequences: dict[int, SequenceState] = {}
        self._next_id = 0
        self.views: dict[int, AttentionCache | StateCache] = {
            index: self._view(index) for index in layout.layer_group
        }

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.raw)

    def _view(self, index: int) -> AttentionCache | StateCache:
        g = self.layout.groups[self.layout.layer_group[index]]
        raw = self.raw[self.layout.layer_position[index]]
        spec = self._spec(index)
        bs = g.block_size
        if isinstance(spec, MLA):
            latent = _typed(raw, 0, bs * spec.head_size, self.layout.kv_dtype)
            key = latent.unflatten(1, (bs, 1, spec.head_size))
            return AttentionCache(key=key, value=None, value_dim=spec.kv_lora_rank)
        if isinstance(spec, FullAttention):
            h, dk, dv = spec.num_kv_heads, spec.head_size, spec.head_size_v
            kv = _typed(raw, 0, bs * h * (dk + dv), self.layout.kv_dtype)
            if dk == dv:
                both = kv.unflatten(1, (2, bs, h, dk))
                return AttentionCache(key=both[:, 0], value=both[:, 1], value_dim=dv)
            split = kv.unflatten(1, (bs, h, dk + dv))
            return AttentionCache(key=split[..., :dk], value=split[..., dk:], value_dim=dv)
        if isinstance(spec, StateSpec):
            conv_shape, ssm_shape = spec.shapes
            conv_bytes = math.prod(conv_shape) * spec.conv_dtype_bytes
            ssm_dtype = torch.float32 if spec.ssm_dtype_bytes == 4 else self.layout.state_dtype
            conv = _typed(raw, 0, math.prod(conv_shape), self.layout.state_dtype)
            ssm = _typed(raw, _align(conv_bytes), math.prod(ssm_shape), ssm_dtype)
            conv, ssm = conv.unflatten(1, conv_shape), ssm.unflatten(1, ssm_shape)
            return StateCache(conv=conv, ssm=ssm)
        raise TypeError(f"layer {index}: no cache view for {type(spec).__name__}")

    def fill_random_(self) -> None:
        """Give every page finite values (the planned run's sequences read all of them)."""
        item = torch.empty((), dtype=self.layout.kv_dtype).element_size()
        for raw in self.raw:
            flat = raw.view(-1)
            fill_random_(flat[: flat.numel() // item * item].view(self.layout.kv_dtype))

    def _spec(self, index: int) -> LayerSpec:
        g = self.layout.groups[self.layout.layer_group[index]]
        return g.spec

    def attention_cache(self, index: int) -> AttentionCache:
        view = self.views[index]
        assert isinstance(view, AttentionCache)
        return view

    def state_cache(self, index: int) -> StateCache:
        view = self.views[index]
        assert isinstance(view, StateCache)
        return view

    # ------------------------------------------------------------------ sequences
    def add_sequence(self, num_tokens: int, capacity: int | None = None) -> SequenceState:
        """Admit a sequence holding ``num_tokens`` tokens with room up to ``capacity``.

        Each group gets the blocks vLLM's manager would hold at ``capacity`` tokens (the
        admission count); window groups use theirs as a ring over the logical table (vLLM
        frees out-of-window blocks and takes new ones: the same number held), state groups own
        their slot(s). Raises :class:`NoFreeBlocksError` (taking nothing) when the pool is short.
        """
        capacity = max(capacity or num_tokens, num_tokens, 1)
        need = [self.layout.blocks_for(i, capacity) for i in range(len(self.layout.groups))]
        if sum(need) > self.allocator.num_free:
            raise NoFreeBlocksError(f"{sum(need)} blocks wanted, {self.allocator.num_free} free")
        seq = SequenceState(seq_id=self._next_id, num_tokens=num_tokens, capacity=capacity)
        self._next_id += 1
        for g, n in zip(self.layout.groups, need, strict=True):
            blocks = self.allocator.allocate(n)
            seq.blocks.append(blocks)
            if isinstance(g.spec, StateSpec):
                seq.tables.append(blocks)
                continue
            # full layers: one block per logical block; window and chunk layers: their blocks
            # as a ring (logical j -> blocks[j mod n]); n covers the window plus the tokens in
            # flight, so a block is reused only once no query can see it any more.
            logical = -(-capacity // g.block_size)
            seq.tables.append([blocks[j % n] for j in range(logical)])
        self.sequences[seq.seq_id] = seq
        return seq

    def remove_sequence(self, seq_id: int) -> None:
        seq = self.sequences.pop(seq_id)
        for blocks in seq.blocks:
            self.allocator.free(blocks)

    def slots(
        self, group: int, seqs: Sequence[SequenceState], positions: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(block ids, offsets) where tokens at ``positions`` of each sequence live."""
        bs = self.layout.groups[group].block_size
        blocks, offsets = [], []
        for seq, pos in zip(seqs, positions, strict=True):
            table = seq.tables[group]
            for p in pos:
                blocks.append(table[p // bs])
                offsets.append(p % bs)
        return (
            torch.tensor(blocks, dtype=torch.long, device=self.device),
            torch.tensor(offsets, dtype=torch.long, device=self.device),
        )

    def write(
        self,
        index: int,
        seqs: Sequence[SequenceState],
        positions: Sequence[Sequence[int]],
        key: torch.Tensor,
        value: torch.Tensor | None,
    ) -> None:
        """Store new tokens' K (and V) of layer ``index`` into their slots (``[T, heads, d]``)."""
        cache = self.attention_cache(index)
        blocks, offsets = self.slots(self.layout.layer_group[index], seqs, positions)
        cache.key[blocks, offsets] = key.to(cache.key.dtype)
        if cache.value is not None and value is not None:
            cache.value[blocks, offsets] = value.to(cache.value.dtype)

    def tables(
        self, group: int, seqs: Sequence[SequenceState], first: Sequence[int], last: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Block tables covering tokens ``first[i]..last[i]`` of each sequence.

        Returns ``(table [S, nb], start [S])``: ``table[i, j]`` is the block of logical index
        ``start[i] + j``; rows are padded with the null block (masked by position later).
        """
        bs = self.layout.groups[group].block_size
        rows, starts = [], []
        for seq, lo, hi in zip(seqs, first, last, strict=True):
            a, b = lo // bs, hi // bs + 1
            rows.append(seq.tables[group][a:b])
            starts.append(a)
        width = max((len(r) for r in rows), default=0)
        padded = [r + [NULL_BLOCK] * (width - len(r)) for r in rows]
        return (
            torch.tensor(padded, dtype=torch.long, device=self.device).view(len(rows), width),
            torch.tensor(starts, dtype=torch.long, device=self.device),
        )


def _typed(raw: torch.Tensor, offset: int, numel: int, dtype: torch.dtype) -> torch.Tensor:
    """``numel`` elements of ``dtype`` at byte ``offset`` of every block (a view, no copy)."""
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    return raw[:, offset : offset + nbytes].view(dtype)
