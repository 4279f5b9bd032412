"""How long a scheduler step takes, for ``kvplan simulate``.

Step time is a roofline *model*, not a measurement: ``max(bytes read / memory bandwidth,
FLOPs / dense BF16 rate)``, reading the weights once per step plus the KV of every scheduled
token's context, and 2 x active parameters FLOPs per token plus attention. No launch or
scheduling overhead, no communication, no speculative decoding.

The model's inputs come from the config: :func:`estimate_params` counts the parameters and
weight bytes, :func:`roofline_for` turns them, the KV layout and a GPU's datasheet rates into
one rank's :class:`Roofline`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from planner.errors import UsageError
from planner.gpus import Gpu
from planner.kv_layout import KVEstimate
from planner.model.specs import ModelSpec
from planner.weights import Weights, from_config


class StepTimer(Protocol):
    """What times the engine's steps: a :class:`Roofline` (the model) or a measured table
    (:class:`planner.simulate.steptimes.StepTable`)."""

    def step_s(self, tokens: int, kv_tokens: int, pairs: int, seqs: int = 0) -> float: ...

    def decode_s(self, n: int, kv_tokens: int, steps: int) -> float: ...


# a StepTimer's step_s and decode_s as plain functions (timers_of)
StepFn = Callable[..., float]
DecodeFn = Callable[[int, int, int], float]


# below this, a product of whole numbers is exact in a double (and above, never rounded below)
EXACT: Final = 9007199254740992.0  # 2**53


class LineTimer:
    """:meth:`planner.simulate.clock.StepModel.timers`' two closures (a dense model's step
    time, every term a constant or a line in the tokens) as the methods of one object with
    typed fields: what the engine calls where it is compiled (``tools/build_fast.py``), a
    native class whose methods take and return C ints and doubles, where a closure is called
    through Python's call protocol with every argument and result boxed. Interpreted, the
    closures are faster (a cell is cheaper to read than an attribute): the engine uses this
    only compiled.

    The same results to the last bit (tests/test_sim_clock.py): the closures' float operations
    in the same order. Their products of whole numbers (``kv_bytes_per_token x kv_tokens``,
    ``flops_per_token x tokens``, ...) are Python ints, exact, converted to a double where a
    float meets them; here they are products of doubles, which are those exact values as long
    as they stay below 2**53 (a product of two doubles is correctly rounded: exact when the
    exact value fits 53 bits, and a sum of two exact ones is the exact sum correctly rounded,
    as converting the ints' sum is). Compiled, an int product with a factor past 2**30
    (``flops_per_token`` is 15,231,233,024 for Qwen2.5-7B) leaves the machine word for
    Python's big ints; a double's does not. Where any product reaches 2**53 the methods take
    the ints' way (``slow_step``, ``slow_decode``), as the closures do."""

    __slots__ = (
        "weights",
        "kvb",
        "fpt",
        "att",
        "kvb_f",
        "fpt_f",
        "att_f",
        "exact",
        "bw",
        "fl",
        "over",
        "per_seq",
        "floor",
        "comm",
        "comm_tok",
    )

    def __init__(
        self,
        weights: float,
        kvb: int,
        fpt: int,
        att: int,
        bw: float,
        fl: float,
        over: float,
        per_seq: float,
        floor: float,
        comm: float,
        comm_tok: float,
    ) -> None:
        self.weights, self.kvb, self.fpt, self.att = weights, kvb, fpt, att
        # the factors as doubles, exact below 2**53 (else every call takes the ints' way)
        self.exact = max(abs(kvb), abs(fpt), abs(att)) < EXACT
        self.kvb_f, self.fpt_f, self.att_f = (
            float(x) if self.exact else 0.0 for x in (kvb, fpt, att)
        )
        self.bw, self.fl = bw, fl
        self.over, self.per_seq, self.floor = over, per_seq, floor
        self.comm, self.comm_tok = comm, comm_tok

    def step(self, tokens: int, kv_tokens: int, pairs: int, seqs: int) -> float:
        """``step_s(tokens, kv_tokens, pairs, seqs)`` (0 seqs: as many as tokens)."""
        if not tokens:
            return self.over
        kv = self.kvb_f * kv_tokens
        c1 = self.fpt_f * tokens
        c2 = self.att_f * pairs
        if not (self.exact and -EXACT < kv < EXACT and -EXACT < c1 < EXACT and -EXACT < c2 < EXACT):
            return self.slow_step(tokens, kv_tokens, pairs, seqs)
        memory = (self.weights + kv) / self.bw
        compute = (c1 + c2) / self.fl
        cpu = self.over + self.per_seq * (seqs or tokens) + self.comm + self.comm_tok * tokens
        return cpu + (memory if memory >= compute else compute) + self.floor

    def slow_step(self, tokens: int, kv_tokens: int, pairs: int, seqs: int) -> float:
        """:meth:`step` with Python's int products, as the closure has them."""
        memory = (self.weights + self.kvb * kv_tokens) / self.bw
        compute = (self.fpt * tokens + self.att * pairs) / self.fl
        cpu = self.over + self.per_seq * (seqs or tokens) + self.comm + self.comm_tok * tokens
        return cpu + (memory if memory >= compute else compute) + self.floor

    def decode(self, n: int, kv_tokens: int, steps: int) -> float:
        """``decode_s(n, kv_tokens, steps)``."""
        over = self.over
        if steps <= 0 or n <= 0:
            return steps * over if steps > 0 else 0.0
        kvb, att = self.kvb_f, self.att_f
        m0, m1 = kvb * kv_tokens, kvb * n
        c0, c1, c2 = self.fpt_f * n, att * kv_tokens, att * n
        if not (
            self.exact
            and -EXACT < m0 < EXACT
            and -EXACT < m1 < EXACT
            and -EXACT < c0 < EXACT
            and -EXACT < c1 < EXACT
            and -EXACT < c2 < EXACT
        ):
            return self.slow_decode(n, kv_tokens, steps)
        bw, fl = self.bw, self.fl
        return self._sum(n, steps, (self.weights + m0) / bw, m1 / bw, (c0 + c1) / fl, c2 / fl)

    def slow_decode(self, n: int, kv_tokens: int, steps: int) -> float:
        """:meth:`decode` with Python's int products, as the closure has them."""
        bw, fl, kvb, att = self.bw, self.fl, self.kvb, self.att
        return self._sum(
            n,
            steps,
            (self.weights + kvb * kv_tokens) / bw,
            kvb * n / bw,
            (self.fpt * n + att * kv_tokens) / fl,
            att * n / fl,
        )

    def _sum(self, n: int, steps: int, a0: float, b0: float, a1: float, b1: float) -> float:
        """The closure's fixed terms and :func:`sum_max_two_lines`, summed as the closure
        sums them (its inlined copy)."""
        fixed = (self.over + self.per_seq * n + self.comm + self.comm_tok * n) + self.floor
        return steps * fixed + sum_max_two_lines(a0, b0, a1, b1, steps)


def sum_max_two_lines(a0: float, b0: float, a1: float, b1: float, steps: int) -> float:
    """:func:`planner.simulate.clock.sum_max_lines` of the two lines ``a0 + b0*k`` and
    ``a1 + b1*k``, the same float operations in the same order (so the same result to the last
    bit), without building the tuples, the set of cuts and the ``max`` over lines: a decode
    stretch's memory and compute lines, summed once per stretch (``StepModel.decode_s``,
    :meth:`LineTimer.decode`)."""
    cut = 0
    if b0 != b1:
        x = (a1 - a0) / (b0 - b1)
        if 0 < x < steps:
            cut = math.ceil(x)
    if cut == 0 or cut == steps:  # one line on top across [0, steps)
        mid = (steps - 1) / 2
        if a1 + b1 * mid > a0 + b0 * mid:
            a0, b0 = a1, b1
        return 0.0 + (steps * a0 + b0 * (steps * (steps - 1)) / 2)
    mid = (cut - 1) / 2
    a, b = (a1, b1) if a1 + b1 * mid > a0 + b0 * mid else (a0, b0)
    total = 0.0 + (cut * a + b * (cut * (cut - 1)) / 2)
    mid = (cut + steps - 1) / 2
    a, b = (a1, b1) if a1 + b1 * mid > a0 + b0 * mid else (a0, b0)
    return total + ((steps - cut) * a + b * (steps * (steps - 1) - cut * (cut - 1)) / 2)


def line_timer_of(timer: StepTimer) -> LineTimer | None:
    """``timer``'s :class:`LineTimer` where it has one (a dense model's
    :class:`planner.simulate.clock.StepModel`), else None (its :func:`timers_of` then)."""
    line = getattr(timer, "line_timer", None)
    if line is None:
        return None
    made: LineTimer | None = line()
    return made


def timers_of(timer: StepTimer) -> tuple[StepFn, DecodeFn]:
    """``timer``'s ``step_s`` and ``decode_s``: its own fast closures where it has them
    (:meth:`planner.simulate.clock.StepModel.timers`, the same results to the last bit), else
    its bound methods."""
    timers = getattr(timer, "timers", None)
    if timers is not None:
        fns: tuple[StepFn, DecodeFn] = timers()
        return fns
    return timer.step_s, timer.decode_s


@dataclass(frozen=True)
class ModelParams:
    """Parameter count and weight bytes *estimated* from the config (not read from weights).

    ``params`` in ``kvplan simulate --json``; whole-model figures, not per rank.

    Attributes:
        total: parameters (Llama-3.1-8B: 8,030,261,248).
        active: parameters each token runs through: ``total`` for a dense model, fewer for a
            mixture of experts (Qwen3-Next-80B-A3B: 3,774,154,752 of 79,573,616,640).
        weight_bytes: bytes of all weights, as the planner estimates them from the config
            (Llama-3.1-8B in BF16: 16,060,522,496).
        bytes_per_param: ``weight_bytes / total`` (2.0 for BF16), 2.0 when ``total`` is 0.
    """

    total: int
    active: int
    weight_bytes: int
    bytes_per_param: float


@dataclass(frozen=True)
class Roofline:
    """Step time as a roofline model: ``max(bytes / bandwidth, FLOPs / matmul rate)``.

    Per step: the weights are read once, and each scheduled token reads the KV of its whole
    context (``kv_bytes_per_token`` per context token); each token costs ``flops_per_token``
    (2 x active parameters) plus ``attention_flops`` per (query, key) pair. All per GPU rank.

    ``roofline`` in ``kvplan simulate --json``. Worked example, Llama-3.1-8B on one H100
    (``tests/golden/simulate-llama-3.1-8b-kvmem.json``): one request decoding at a 1,000-token
    context reads (16,060,522,496 + 131,072 x 1,000) B / 3.35e12 B/s = 4.83 ms and computes
    (16,060,522,496 + 524,288 x 1,000) / 989e12 FLOP/s = 0.017 ms: the step takes 4.83 ms,
    memory-bound. A 2,048-token prefill chunk from an empty context reads 4.87 ms but computes
    (2,048 x 16,060,522,496 + 524,288 x 2,098,176 pairs) / 989e12 = 34.4 ms: compute-bound.

    Attributes:
        weight_bytes: weight bytes one rank reads per step, ``ModelParams.weight_bytes // tp``
            (16,060,522,496 at TP 1).
        kv_bytes_per_token: KV bytes of one context token on one rank, all layers (32 layers x
            K and V x 8 KV heads x 128 x 2 B = 131,072).
        bandwidth_bytes_per_s: the GPU's memory bandwidth (H100 SXM: 3,350,000,000,000).
        flops_per_s: its dense BF16 matmul rate (H100 SXM: 989,000,000,000,000).
        flops_per_token: 2 x active parameters // tp (2 x 8,030,261,248 = 16,060,522,496).
        attention_flops: FLOPs per (query, key) pair, 4 x attention heads x head dim x
            attention layers // tp: QK^T and AV, 2 each (4 x 32 x 128 x 32 = 524,288).
        overhead_s: fixed seconds added to every step (0.0; :meth:`constant` sets only this).
        gpu: the GPU the rates are from (``h100``; ``constant`` for :meth:`constant`).
    """

    weight_bytes: int
    kv_bytes_per_token: int
    bandwidth_bytes_per_s: int
    flops_per_s: int
    flops_per_token: int
    attention_flops: int
    overhead_s: float = 0.0
    gpu: str = ""

    @classmethod
    def constant(cls, step_s: float) -> Roofline:
        """Every step takes ``step_s`` seconds (for tests and what-ifs)."""
        return cls(0, 0, 1, 1, 0, 0, overhead_s=step_s, gpu="constant")

    def step_s(self, tokens: int, kv_tokens: int, pairs: int, seqs: int = 0) -> float:
        """Seconds for a step of ``tokens`` new tokens reading ``kv_tokens`` of context KV and
        scoring ``pairs`` (query, key) pairs (``seqs``, the sequences scheduled, is not a term
        of the bare roofline)."""
        memory = (
            self.weight_bytes + self.kv_bytes_per_token * kv_tokens
        ) / self.bandwidth_bytes_per_s
        compute = (self.flops_per_token * tokens + self.attention_flops * pairs) / self.flops_per_s
        return self.overhead_s + max(memory, compute)

    def decode_s(self, n: int, kv_tokens: int, steps: int) -> float:
        """Seconds for ``steps`` decode steps of ``n`` requests whose contexts (``kv_tokens``
        in all at the first step) each grow by one token a step: the sum of a maximum of two
        linear functions, in closed form."""
        bw, fl = self.bandwidth_bytes_per_s, self.flops_per_s
        a0 = (self.weight_bytes + self.kv_bytes_per_token * kv_tokens) / bw
        a1 = self.kv_bytes_per_token * n / bw
        b0 = (self.flops_per_token * n + self.attention_flops * kv_tokens) / fl
        b1 = self.attention_flops * n / fl
        if a0 >= b0 and a0 + a1 * (steps - 1) >= b0 + b1 * (steps - 1):
            # memory-bound from first to last step (decode nearly always is)
            return steps * (self.overhead_s + a0) + a1 * steps * (steps - 1) / 2
        return steps * self.overhead_s + _sum_max_linear(a0, a1, b0, b1, steps)


def _sum_linear(a: float, b: float, k0: int, k1: int) -> float:
    """sum of a + b*k for k in [k0, k1)."""
    return (k1 - k0) * a + b * (k1 * (k1 - 1) - k0 * (k0 - 1)) / 2


def _sum_max_linear(a0: float, a1: float, b0: float, b1: float, steps: int) -> float:
    """sum over k in [0, steps) of max(a0 + a1*k, b0 + b1*k); the two lines cross at most once."""
    if steps <= 0:
        return 0.0
    d0, d1 = a0 - b0, a1 - b1  # a - b at k = 0, and its slope
    if d1 == 0 or (d0 >= 0) == (d0 + d1 * (steps - 1) >= 0):
        return _sum_linear(a0, a1, 0, steps) if d0 >= 0 else _sum_linear(b0, b1, 0, steps)
    cross = min(max(math.ceil(-d0 / d1), 0), steps)  # first k where the sign of a - b flips
    first, second = ((a0, a1), (b0, b1)) if d0 >= 0 else ((b0, b1), (a0, a1))
    return _sum_linear(*first, 0, cross) + _sum_linear(*second, cross, steps)


def estimate_params(spec: ModelSpec, weights: Weights | None = None) -> ModelParams:
    """Parameters, active parameters per token and weight bytes for the roofline, from the
    planner's weights (:func:`planner.weights.from_config` unless ``weights`` is given)."""
    weights = weights or from_config(spec)
    active = weights.active_parameter_count or weights.parameter_count
    per_param = weights.total_bytes / weights.parameter_count if weights.parameter_count else 2.0
    return ModelParams(
        total=weights.parameter_count,
        active=active,
        weight_bytes=weights.total_bytes,
        bytes_per_param=per_param,
    )


def roofline_for(spec: ModelSpec, est: KVEstimate, gpu: Gpu, params: ModelParams) -> Roofline:
    """The roofline of ``spec`` on one ``gpu`` rank at ``est``'s tensor-parallel size."""
    tp = est.tensor_parallel_size
    n_attn = len(spec.attention_layers)
    if gpu.bandwidth_bytes_per_s is None or gpu.bf16_flops is None:
        raise UsageError(
            f"{gpu.name}: no bandwidth or BF16 rate to time steps with; name a catalog GPU "
            "(`kvplan gpus`)"
        )
    return Roofline(
        weight_bytes=params.weight_bytes // tp,
        kv_bytes_per_token=est.kv_bytes_per_token,
        bandwidth_bytes_per_s=gpu.bandwidth_bytes_per_s,
        flops_per_s=gpu.bf16_flops,
        flops_per_token=2 * params.active // tp,
        attention_flops=4 * spec.num_attention_heads * spec.head_dim * n_attn // tp,
        gpu=gpu.name,
    )
