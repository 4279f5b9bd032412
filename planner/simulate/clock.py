"""The simulator's clock: how long one vLLM step takes, with the terms real engines pay.

:class:`planner.simulate.roofline.Roofline` is the bare bound (datasheet bandwidth and dense
BF16 FLOP/s, nothing else); :class:`StepModel` adds, per step of ``tokens`` new tokens over
``seqs`` sequences reading ``kv`` context tokens::

    gpu   = max(memory / (bandwidth x memory_efficiency),
                compute / (flops x compute_efficiency)) + layer_floor_s
    step  = overhead_s + seq_overhead_s x seqs + gpu + comm_fixed_s + comm_s_per_token x tokens

and each request reaches the scheduler ``request_latency_s`` after the client sends it (later
when the API server is still streaming the earlier requests' tokens: ``api_token_s``).

Each term and where its default comes from (``planner/simulate/clock.py``; the fitted ones
from ``tests/data/vllm_serving_benchmarks.json``, ``split: fitted``):

- **memory_efficiency**: the share of datasheet bandwidth the large kernels (the GEMMs and
  attention) achieve streaming the weights and KV: 0.90 on HBM parts (H100/H200/A100/B200/
  MI300), 0.85 on GDDR parts (L4, L40S, A10G, RTX, Radeon), by the catalog's
  ``memory_type``. A whole decode step achieves less, 70-78 % (issue 24: 6.48 ms measured vs
  4.80 ms per token on an H100; "roughly 77% of the GPU's memory-bandwidth ceiling" for
  Llama-3.1-8B on an A100 40GB, johnmusgrave.com, vLLM 0.23): the rest is ``layer_floor_s``
  and the CPU terms below.
- **compute_efficiency**: the share of dense BF16 FLOP/s a prefill-sized step achieves: 0.60
  (issue 24: "prefill ~60 % of peak BF16 at 1k-8k prompts, independent of length"), 0.35 on
  Hopper parts (``HOPPER_COMPUTE_EFFICIENCY``, by the catalog's ``architecture``): their
  datasheet dense BF16 rate (989 TFLOPS on an H100 SXM) is the wgmma tensor cores' peak, of
  which a whole vLLM prefill step (GEMMs, attention, the small kernels between) reaches far
  less than an A100 of its 312. Fitted: Qwen3-14B on one H100 SXM takes 500 prompts of 4,000
  tokens (and 200 out) at once in 227.6 s, ~8,800 prefill tokens a second, 28 % of 989 TFLOPS
  in its linear layers alone (GPUStack's performance lab, vLLM 0.11.0); at 0.60 kvplan put
  output tok/s 1.53x too high and TTFT and TPOT at 0.66 and 0.61 of it.
- **layer_floor_s**: the small kernels of every layer (norms, rotary, activation, cache
  writes, a dozen a layer, each a few microseconds however little it moves), added to the
  large ones: ``LAYER_FLOOR_S`` (50 us) per decoder layer with CUDA graphs,
  ``EAGER_LAYER_FLOOR_S`` (150 us) with ``--enforce-eager`` (each also launched from Python).
  Fitted: Qwen3-0.6B on an H100 decodes at 2.39 ms a token where its weights stream in 0.36 ms
  (kvcached's H100 results, vLLM 0.19), Qwen2.5-0.5B on an L4 at 5.1 ms where they stream in
  3.3 ms (ai.wmx.dev, vLLM 0.23).
- **overhead_s**: CPU time per step the GPU waits for (scheduling, input preparation,
  sampling, output processing), by release: ``OVERHEAD_BY_RELEASE``. With async scheduling
  (vLLM >= 0.14 by default) most of it overlaps the GPU. Issue 24: same 10 prompts on one H100,
  TPOT 8.32 ms on 0.5.4 and 7.06 ms on 0.6.0 (V0); kvplan models V1 (0.8.5 and later).
- **request_latency_s**: seconds from the client's send to the request's arrival at the
  scheduler (HTTP, tokenizing, the API server's hand-off to the engine core), counted in TTFT
  and E2E latency: ``REQUEST_LATENCY_S`` (20 ms). Fitted: TTFT 27 ms for a 256-token prompt
  that prefills in one ~5 ms step on an L4 (ai.wmx.dev), 38.9 ms at 16 requests/s on an H100
  for a 512-token prompt that prefills in ~2 ms (kvcached). It dominates small models' TTFT.
  Plus ``stream_latency_s`` (``STREAM_LATENCY_S``, 2.5 ms) per other request in flight when it
  is sent: the API server streams their tokens meanwhile. Fitted: TTFT rises from 27 ms at
  concurrency 1 to 135 ms at 32 on an L4 while the engine's share stays under 30 ms
  (ai.wmx.dev).
- **api_token_s**: the API server (``vllm serve``'s one front-end process) streams every
  output token: detokenizing it, one SSE chunk of JSON, the socket write. ``API_TOKEN_S``
  (77.8 us) of its time a token: vllm-project/vllm#12287's "Before" run, where a 1B model at
  400 requests in flight on an A100 made 1,211,959 tokens in 94.31 s (12,850 tokens/s;
  the GPU alone makes ~50,000: ``tests/data/api_server_throughput.json``), all of the run's
  time put on its tokens. It is per token, not per request: GPUStack's gpt-oss-20b on one
  H100 took 1,000 chat requests of 128 tokens (4 out) in 4.70 s, at most 4.7 ms a request
  (same file, a cross-check). In an open loop each request takes its tokens' share when
  the server hands it to the scheduler, first come first served: a request sent while the
  server still streams the earlier ones' waits its turn (``SimEngine._api_wait``), the
  longer of that wait and its ``stream_latency_s`` counted. Hundreds of requests sent at
  once are then handed over at ~1 / (77.8 us x their output tokens) a second however fast
  the GPU is (Qwen3-0.6B, 500 x 128 tokens: ~100 a second). Not modelled: a closed loop
  (a request a completion; charged at admission, C requests sent together would be
  staggered however idle the server), data parallelism's dispatch, ``--api-server-count``,
  ``--stream-interval`` (a chunk every N tokens, vllm-project/vllm#27869), releases' speed-ups since
  the measurement (main of January 2025).
- **seq_overhead_s**: CPU time per scheduled sequence (its block table, sampling, detokenizing
  in the API server): ``SEQ_OVERHEAD_S`` (20 us). Fitted: TPOT rising from 5.1 ms at
  concurrency 1 to 7.1 ms at 32 on an L4 beyond what the bandwidth terms give (ai.wmx.dev).
- **comm_fixed_s / comm_s_per_token**: tensor parallelism's two all-reduces per decoder layer
  (after attention and after the MLP), of ``hidden_size x tokens x 2`` bytes each; a ring
  all-reduce moves ``2 (tp - 1) / tp`` of that per GPU. Per all-reduce ``INTERCONNECTS``:
  NVLink 12 us + bytes / 300 GB/s (vLLM's custom all-reduce on NVLink), PCIe 70 us + bytes /
  12 GB/s (through host memory without peer access; issue 24: ~9 ms more a step at TP 2 on
  PCIe cards, 64 all-reduces of a 32-layer model), xGMI 15 us + bytes / 150 GB/s. Where the
  catalog does not say how a GPU's peers talk (``Gpu.interconnect`` None), SXM datacenter
  parts (H100, H200, H20, A100, B200...) count as NVLink and everything else as PCIe.
- **expert parallelism** (``--enable-expert-parallel`` with ``--dp`` > 1): vLLM's default
  MoE all-to-all backend, ``allgather_reducescatter`` (``AgRsAll2AllManager``,
  ``vllm/distributed/device_communicators/all2all.py`` line 45, vllm-project/vllm@0014300),
  all-gathers the hidden states of the DP group's tokens before every MoE layer (dispatch,
  ``all_gatherv``) and reduce-scatters the experts' outputs after it (combine,
  ``reduce_scatterv``). Each GPU receives, then sends, the other ``dp - 1`` ranks' tokens,
  ``hidden_size x 2`` bytes each (BF16), taken to be as many as its own (balanced ranks): per
  MoE layer two collectives of ``INTERCONNECTS``' latency + ``(dp - 1) x tokens x hidden x 2``
  bytes over its bandwidth, added to ``comm_fixed_s`` / ``comm_s_per_token``. All-to-all
  traffic does reach the link's bandwidth: DeepEP's intranode dispatch / combine move 153 /
  158 GB/s per H800 over its ~160 GB/s NVLink (deepseek-ai/DeepEP ``docs/legacy.md``,
  "Normal kernels with NVLink and RDMA forwarding", EP 8, 4,096 tokens of 7,168). Not
  modelled: the top-k ids and weights gathered with the states (``k x 8`` bytes a token),
  uneven ranks (the slowest sets the pace), DeepEP's backends, DP > 1 without expert
  parallelism. Nothing changes at DP 1 or for a dense model.
- **MoE expert load**: a step reads only the routed experts its tokens pick: of ``E`` experts
  with ``k`` picked per token, ``1 - (1 - k/E)^tokens`` of the expert weights (uniform routing
  assumed; real routing is skewed, so this is the most a batch reads). One decoding request
  reads k/E of them, a 64-token batch of a 128-expert top-8 model 98 %.
- **attention by context**: each scheduled token reads its whole context's KV (the memory
  term) and scores it (``attention_flops`` per (query, key) pair, the compute term), at the
  same achieved fractions as the weights.

The step time is linear in the context within a decode stretch (every term is a line in the
step index, or a constant), so :meth:`StepModel.decode_s` sums a stretch in closed form.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from planner import files
from planner.errors import InputFileError
from planner.gpus import Gpu
from planner.kv_layout import KVEstimate
from planner.layer_shapes import is_moe_layer
from planner.model.specs import ModelSpec
from planner.simulate.roofline import (
    DecodeFn,
    LineTimer,
    ModelParams,
    Roofline,
    StepFn,
    roofline_for,
    sum_max_two_lines,
)

LAYER_FLOOR_S = 50e-6
EAGER_LAYER_FLOOR_S = 150e-6
SEQ_OVERHEAD_S = 20e-6
COMPUTE_EFFICIENCY = 0.60
HOPPER_COMPUTE_EFFICIENCY = 0.35
HBM_MEMORY_EFFICIENCY = 0.90
REQUEST_LATENCY_S = 0.020
STREAM_LATENCY_S = 0.0025
# the API server's time per streamed output token (module docstring: api_token_s):
# vllm-project/vllm#12287's "Before" run, 94.31 s for 1,211,959 generated tokens
API_TOKEN_S = 94.31 / 1_211_959
GDDR_MEMORY_EFFICIENCY = 0.85
# (first release, CPU seconds per step the GPU waits for, with async scheduling on /off)
OVERHEAD_BY_RELEASE: tuple[tuple[tuple[int, ...], float, float], ...] = (
    ((0, 8, 5), 0.0006, 0.0006),  # V1 before async scheduling existed as a default
    ((0, 14, 0), 0.0002, 0.0006),  # async scheduling by default (VllmRules.async_scheduling)
)
# interconnect -> (seconds per all-reduce, bytes per second per GPU)
INTERCONNECTS: dict[str, tuple[float, float]] = {
    "nvlink": (12e-6, 300e9),
    "xgmi": (15e-6, 150e9),
    "pcie": (70e-6, 12e9),
}
# GPUs whose peers talk over NVLink (SXM) or xGMI (OAM) when the catalog does not say
SXM = ("h100", "h200", "h20", "h800", "a100", "a800", "b200", "b300", "gb200", "gb300")
OAM = ("mi300", "mi325", "mi350", "mi355")
GDDR = ("l4", "l40", "a10g", "a40", "rtx", "t4", "a6000", "4090", "3090", "5090")
PROFILE_VERSION = 1
# How far each figure may be off with the default terms (a share: 0.2 is +-20 %), the error
# the held-out cases of tests/data/vllm_serving_benchmarks.json stay within on >= 80 % of
# cases (tests/test_sim_clock.py checks it; benchmarks/step_model_accuracy.py prints them):
# issue 24's goal, +-20 / +-20 / +-35 %. Output tok/s: 18 of 20 held-out cases; TPOT: 17 of
# 21 (too low at TP 8, 0.74-0.80, and too high for 1,000 prompts of 128 tokens at once,
# 1.19-1.37); TTFT: 16 of 20, no margin (the misses are predicted too early: 1,000 prompts of
# 128 tokens at once, ShareGPT's 1,000 prompts on an H100, the chat endpoint at low load;
# docs/simulate-clock.md). Before the API server's per-token term (api_token_s) TPOT and
# TTFT met 25 and 50 % only.
EXPECTED_ERROR: dict[str, float] = {
    "output_throughput": 0.20,
    "tpot": 0.20,
    "ttft": 0.35,
}


@dataclass(frozen=True)
class StepModel(Roofline):
    """The roofline plus the terms vLLM pays (module docstring).

    ``roofline`` in ``kvplan simulate --json`` (the bare roofline's keys, then these).

    Attributes:
        memory_efficiency: achieved share of ``bandwidth_bytes_per_s`` (0.90 on an H100).
        compute_efficiency: achieved share of ``flops_per_s`` (0.60; 0.35 on Hopper).
        layer_floor_s: the small kernels' time a step, on top of the large ones' (32 layers x
            50 us = 1.6 ms).
        request_latency_s: send to scheduler, per request (0.020).
        stream_latency_s: and per other request in flight (0.0025).
        seq_overhead_s: CPU seconds per scheduled sequence (20 us).
        api_token_s: the API server's seconds per streamed output token (77.8 us): a request
            waits while it streams the tokens of those sent before it.
        comm_fixed_s: tensor-parallel all-reduce latency per step (0 at TP 1).
        comm_s_per_token: all-reduce transfer seconds per scheduled token (0 at TP 1).
        expert_bytes: routed-expert weight bytes of one rank, part of ``weight_bytes`` (0 for
            a dense model).
        experts: routed experts per MoE layer (0 for a dense model).
        experts_per_token: experts each token is routed to.
        interconnect: how TP ranks talk (``nvlink``, ``xgmi``, ``pcie``; ``""`` at TP 1).
        release: the vLLM release whose overhead applies (``0.33.0``).
        source: where the terms came from: ``defaults`` or the profile / result file fitted.
    """

    memory_efficiency: float = 1.0
    compute_efficiency: float = 1.0
    layer_floor_s: float = 0.0
    request_latency_s: float = 0.0
    stream_latency_s: float = 0.0
    seq_overhead_s: float = 0.0
    api_token_s: float = 0.0
    comm_fixed_s: float = 0.0
    comm_s_per_token: float = 0.0
    expert_bytes: int = 0
    experts: int = 0
    experts_per_token: int = 0
    interconnect: str = ""
    release: str = ""
    source: str = "defaults"

    @property
    def timing(self) -> str:
        return "step-time model"

    def _touched(self, tokens: int) -> float:
        """Share of the routed-expert weights a step of ``tokens`` tokens reads."""
        if not self.experts or tokens <= 0:
            return 0.0
        k = min(self.experts_per_token, self.experts) / self.experts
        return 1.0 - (1.0 - k) ** tokens

    def step_s(self, tokens: int, kv_tokens: int, pairs: int, seqs: int = 0) -> float:
        """Seconds for a step of ``tokens`` new tokens of ``seqs`` sequences (0: as many as
        tokens, a decode step) reading ``kv_tokens`` of context KV and scoring ``pairs``
        (query, key) pairs."""
        if not tokens:
            return self.overhead_s
        bw = self.bandwidth_bytes_per_s * self.memory_efficiency
        fl = self.flops_per_s * self.compute_efficiency
        # the weights this step reads (routed experts: the share its tokens pick)
        eb = self.expert_bytes
        weights = self.weight_bytes - eb + eb * (self._touched(tokens) if self.experts else 0.0)
        memory = (weights + self.kv_bytes_per_token * kv_tokens) / bw
        compute = (self.flops_per_token * tokens + self.attention_flops * pairs) / fl
        cpu = (
            self.overhead_s
            + self.seq_overhead_s * (seqs or tokens)
            + self.comm_fixed_s
            + self.comm_s_per_token * tokens
        )
        return cpu + (memory if memory >= compute else compute) + self.layer_floor_s

    def decode_s(self, n: int, kv_tokens: int, steps: int) -> float:
        """Seconds for ``steps`` decode steps of ``n`` requests whose contexts (``kv_tokens`` in
        all at the first step) each grow by one token a step: every term is a line in the step
        index or a constant, so the sum of their maximum is exact in closed form."""
        if steps <= 0 or n <= 0:
            return steps * self.overhead_s if steps > 0 else 0.0
        bw = self.bandwidth_bytes_per_s * self.memory_efficiency
        fl = self.flops_per_s * self.compute_efficiency
        kv = self.kv_bytes_per_token
        att = self.attention_flops
        eb = self.expert_bytes
        weights = self.weight_bytes - eb + eb * (self._touched(n) if self.experts else 0.0)
        fixed = (
            self.overhead_s
            + self.seq_overhead_s * n
            + self.comm_fixed_s
            + self.comm_s_per_token * n
        ) + self.layer_floor_s
        return steps * fixed + sum_max_two_lines(
            (weights + kv * kv_tokens) / bw,
            kv * n / bw,
            (self.flops_per_token * n + att * kv_tokens) / fl,
            att * n / fl,
            steps,
        )

    def timers(self) -> tuple[StepFn, DecodeFn]:
        """:meth:`step_s` and :meth:`decode_s` as closures over the terms, for the engine's
        hot loop (millions of calls): the same float operations in the same order, so the
        same results to the last bit (tests/test_sim_clock.py checks them against the
        methods), without the attribute lookups, the products of constant terms and the call
        to :func:`sum_max_two_lines` each time. A MoE model's expert share depends on the
        tokens: it gets the methods."""
        if self.experts:
            return self.step_s, self.decode_s
        bw = self.bandwidth_bytes_per_s * self.memory_efficiency
        fl = self.flops_per_s * self.compute_efficiency
        eb = self.expert_bytes
        weights = self.weight_bytes - eb + eb * 0.0
        kvb, fpt, att = self.kv_bytes_per_token, self.flops_per_token, self.attention_flops
        over, per_seq, floor = self.overhead_s, self.seq_overhead_s, self.layer_floor_s
        comm, comm_tok = self.comm_fixed_s, self.comm_s_per_token

        def step_s(tokens: int, kv_tokens: int, pairs: int, seqs: int = 0) -> float:
            if not tokens:
                return over
            memory = (weights + kvb * kv_tokens) / bw
            compute = (fpt * tokens + att * pairs) / fl
            cpu = over + per_seq * (seqs or tokens) + comm + comm_tok * tokens
            return cpu + (memory if memory >= compute else compute) + floor

        def decode_s(n: int, kv_tokens: int, steps: int) -> float:
            if steps <= 0 or n <= 0:
                return steps * over if steps > 0 else 0.0
            fixed = (over + per_seq * n + comm + comm_tok * n) + floor
            # sum_max_two_lines(a0, b0, a1, b1, steps), inlined
            a0 = (weights + kvb * kv_tokens) / bw
            b0 = kvb * n / bw
            a1 = (fpt * n + att * kv_tokens) / fl
            b1 = att * n / fl
            cut = 0
            if b0 != b1:
                x = (a1 - a0) / (b0 - b1)
                if 0 < x < steps:
                    cut = math.ceil(x)
            if cut == 0 or cut == steps:
                mid = (steps - 1) / 2
                if a1 + b1 * mid > a0 + b0 * mid:
                    a0, b0 = a1, b1
                return steps * fixed + (0.0 + (steps * a0 + b0 * (steps * (steps - 1)) / 2))
            mid = (cut - 1) / 2
            a, b = (a1, b1) if a1 + b1 * mid > a0 + b0 * mid else (a0, b0)
            total = 0.0 + (cut * a + b * (cut * (cut - 1)) / 2)
            mid = (cut + steps - 1) / 2
            a, b = (a1, b1) if a1 + b1 * mid > a0 + b0 * mid else (a0, b0)
            return steps * fixed + (
                total + ((steps - cut) * a + b * (steps * (steps - 1) - cut * (cut - 1)) / 2)
            )

        return step_s, decode_s

    def line_timer(self) -> LineTimer | None:
        """:meth:`timers`' closures as a :class:`planner.simulate.roofline.LineTimer` (a
        native object where the engine is compiled, called without boxing), None for a MoE
        model (its expert share is not a line)."""
        if self.experts:
            return None
        eb = self.expert_bytes
        return LineTimer(
            self.weight_bytes - eb + eb * 0.0,
            self.kv_bytes_per_token,
            self.flops_per_token,
            self.attention_flops,
            self.bandwidth_bytes_per_s * self.memory_efficiency,
            self.flops_per_s * self.compute_efficiency,
            self.overhead_s,
            self.seq_overhead_s,
            self.layer_floor_s,
            self.comm_fixed_s,
            self.comm_s_per_token,
        )

    def terms(self) -> dict[str, float]:
        """The terms by name, for the report."""
        return {f.name: getattr(self, f.name) for f in fields(StepModel) if f.name in PROFILE_KEYS}


PROFILE_KEYS = (
    "memory_efficiency",
    "compute_efficiency",
    "layer_floor_s",
    "overhead_s",
    "seq_overhead_s",
    "request_latency_s",
    "stream_latency_s",
)


def sum_max_lines(lines: tuple[tuple[float, float], ...], steps: int) -> float:
    """sum over k in [0, steps) of max over (a, b) in ``lines`` of a + b*k, exactly: the
    maximum of lines is convex and piecewise linear, one line between crossings."""
    cuts = {0, steps}
    for i, (a0, b0) in enumerate(lines):
        for a1, b1 in lines[i + 1 :]:
            if b0 != b1:
                x = (a1 - a0) / (b0 - b1)
                if 0 < x < steps:
                    cuts.add(math.ceil(x))
    total = 0.0
    points = sorted(cuts)
    for k0, k1 in zip(points, points[1:], strict=False):
        if k1 <= k0:
            continue
        mid = (k0 + k1 - 1) / 2  # the line on top across [k0, k1) is on top at its middle
        a, b = max(lines, key=lambda line: line[0] + line[1] * mid)
        total += (k1 - k0) * a + b * (k1 * (k1 - 1) - k0 * (k0 - 1)) / 2
    return total


def interconnect_of(gpu: Gpu) -> str:
    """How ``gpu``'s tensor-parallel peers talk: the catalog's word, else NVLink for SXM
    datacenter parts, xGMI for AMD's OAM parts, PCIe for everything else."""
    if gpu.interconnect is not None:
        return gpu.interconnect
    name = gpu.name.lower()
    if "pcie" in name:
        return "pcie"
    if any(name.startswith(p) for p in SXM):
        return "nvlink"
    if any(name.startswith(p) for p in OAM):
        return "xgmi"
    return "pcie"


def memory_efficiency_of(gpu: Gpu) -> float:
    """The default achieved share of ``gpu``'s datasheet bandwidth (module docstring): by the
    catalog's memory type, else (a GPU known by name and memory only) by the name."""
    if gpu.memory_type:
        return (
            GDDR_MEMORY_EFFICIENCY if gpu.memory_type.startswith("GDDR") else HBM_MEMORY_EFFICIENCY
        )
    name = gpu.name.lower()
    gddr = name == "a10" or any(name.startswith(g) or f"-{g}" in name for g in GDDR)
    return GDDR_MEMORY_EFFICIENCY if gddr else HBM_MEMORY_EFFICIENCY


def compute_efficiency_of(gpu: Gpu) -> float:
    """The default achieved share of ``gpu``'s dense BF16 FLOP/s (module docstring): lower on
    Hopper parts, by the catalog's architecture."""
    if (gpu.architecture or "").lower() == "hopper":
        return HOPPER_COMPUTE_EFFICIENCY
    return COMPUTE_EFFICIENCY


def overhead_of(release: tuple[int, ...], async_scheduling: bool) -> float:
    """CPU seconds per step the GPU waits for, on ``release`` (module docstring)."""
    value = OVERHEAD_BY_RELEASE[0][2]
    for since, on, off in OVERHEAD_BY_RELEASE:
        if release >= since:
            value = on if async_scheduling else off
    return value


def _moe(spec: ModelSpec) -> tuple[int, int]:
    c = spec.config or {}
    text = c.get("text_config") if isinstance(c.get("text_config"), dict) else None
    for cfg in (c, text or {}):
        experts = next(
            (
                cfg[k]
                for k in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
                if isinstance(cfg.get(k), int)
            ),
            0,
        )
        k = next(
            (
                cfg[k]
                for k in ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k")
                if isinstance(cfg.get(k), int)
            ),
            0,
        )
        if experts and k:
            return experts, k
    return 0, 0


def moe_layers(spec: ModelSpec) -> int:
    """Decoder layers with routed experts (``planner.weights.is_moe_layer``: DeepSeek's first
    dense layers, Qwen's ``mlp_only_layers`` and sparse steps, Llama 4's interleaving)."""
    c = spec.config or {}
    return sum(is_moe_layer(c, spec.model_type, i, spec.name) for i in range(spec.num_layers))


def step_model_for(
    spec: ModelSpec,
    est: KVEstimate,
    gpu: Gpu,
    params: ModelParams,
    *,
    release: tuple[int, ...] = (0, 33, 0),
    async_scheduling: bool = True,
    enforce_eager: bool = False,
    profile: dict[str, float] | None = None,
    source: str = "defaults",
    data_parallel_size: int = 1,
    expert_parallel: bool = False,
) -> StepModel:
    """The step-time model of ``spec`` on one ``gpu`` rank at ``est``'s TP size, with the
    default terms (module docstring) or those of a fitted ``profile``; with
    ``expert_parallel`` and ``data_parallel_size`` > 1, the MoE layers' dispatch and combine
    across the DP group too."""
    base = roofline_for(spec, est, gpu, params)
    tp = est.tensor_parallel_size
    layers = spec.num_layers
    experts, top_k = _moe(spec)
    dp = data_parallel_size if expert_parallel and experts else 1
    link = interconnect_of(gpu) if tp > 1 or dp > 1 else ""
    latency, bandwidth = INTERCONNECTS.get(link, INTERCONNECTS["pcie"])
    comm_fixed = comm_token = 0.0
    if tp > 1:
        reduces = 2 * layers
        comm_fixed = reduces * latency
        comm_token = reduces * 2 * (tp - 1) / tp * spec.hidden_size * 2 / bandwidth
    if dp > 1:  # expert parallelism: an all-gather and a reduce-scatter per MoE layer
        collectives = 2 * moe_layers(spec)
        comm_fixed += collectives * latency
        comm_token += collectives * (dp - 1) * spec.hidden_size * 2 / bandwidth
    expert_bytes = 0
    if experts and params.total > params.active:
        # total = dense + E e, active = dense + k e: the routed experts are E e parameters
        per_expert = (params.total - params.active) / max(1, experts - top_k)
        expert_bytes = int(per_expert * experts * params.bytes_per_param) // tp
    floor = (EAGER_LAYER_FLOOR_S if enforce_eager else LAYER_FLOOR_S) * layers
    terms: dict[str, float] = {
        "memory_efficiency": memory_efficiency_of(gpu),
        "compute_efficiency": compute_efficiency_of(gpu),
        "layer_floor_s": floor,
        "overhead_s": overhead_of(release, async_scheduling),
        "seq_overhead_s": SEQ_OVERHEAD_S,
        "request_latency_s": REQUEST_LATENCY_S,
        "stream_latency_s": STREAM_LATENCY_S,
        "api_token_s": API_TOKEN_S,
    }
    if profile:
        terms.update(profile)
    return StepModel(
        **{f.name: getattr(base, f.name) for f in fields(Roofline) if f.name != "overhead_s"},
        overhead_s=terms["overhead_s"],
        memory_efficiency=terms["memory_efficiency"],
        compute_efficiency=terms["compute_efficiency"],
        layer_floor_s=terms["layer_floor_s"],
        seq_overhead_s=terms["seq_overhead_s"],
        request_latency_s=terms["request_latency_s"],
        stream_latency_s=terms["stream_latency_s"],
        api_token_s=terms["api_token_s"],
        comm_fixed_s=comm_fixed,
        comm_s_per_token=comm_token,
        expert_bytes=min(expert_bytes, base.weight_bytes),
        experts=experts if expert_bytes else 0,
        experts_per_token=top_k if expert_bytes else 0,
        interconnect=link,
        release=".".join(map(str, release)),
        source=source,
    )


# --------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    """Step-time terms fitted to one run (``kvplan simulate --calibrate``), saved as JSON with
    ``--save-profile`` and read back with ``--profile``.

    ``terms`` holds :data:`PROFILE_KEYS`; ``fitted_on`` says what they were fitted to (the
    result file, its model, GPU, TP and release) and ``fit`` the predicted / measured ratios
    of the fitted run after the fit.
    """

    terms: dict[str, float]
    fitted_on: dict[str, Any]
    fit: dict[str, float]

    def to_json(self) -> str:
        return json.dumps({"kvplan_step_profile": PROFILE_VERSION, **asdict(self)}, indent=2)


MAX_PROFILE_BYTES = 1 << 16


def load_profile(path: str | Path) -> Profile:
    """The profile saved in ``path`` (one line naming what is wrong otherwise)."""
    text = files.read_text_file(Path(path), limit=MAX_PROFILE_BYTES, what="step-time profile")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise InputFileError(f"{path}: not a JSON step-time profile") from None
    if not isinstance(data, dict) or data.get("kvplan_step_profile") != PROFILE_VERSION:
        raise InputFileError(
            f"{path}: not a kvplan step-time profile (write one with --calibrate RESULT.json "
            "--save-profile FILE)"
        )
    raw = data.get("terms")
    if not isinstance(raw, dict):
        raise InputFileError(f"{path}: 'terms' must be an object")
    terms: dict[str, float] = {}
    for key in PROFILE_KEYS:
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputFileError(f"{path}: terms.{key} must be a number")
        if not math.isfinite(value) or value < 0 or (key.endswith("efficiency") and value == 0):
            raise InputFileError(f"{path}: terms.{key} must be a finite number > 0, got {value}")
        terms[key] = float(value)
    raw_on, raw_fit = data.get("fitted_on"), data.get("fit")
    fitted_on: dict[str, Any] = raw_on if isinstance(raw_on, dict) else {}
    fit: dict[str, float] = raw_fit if isinstance(raw_fit, dict) else {}
    return Profile(terms=terms, fitted_on=fitted_on, fit=fit)
