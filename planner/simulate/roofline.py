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
from typing import Protocol

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
