"""vLLM's activation peak by mechanism (:func:`activation_peak_bytes`): the profile run's forward
pass over max_num_batched_tokens and the sampler pass over max_num_seqs rows as each release
runs them, and the CUDA-graph estimate (:func:`cuda_graph_estimate_bytes`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from planner.kv_layout import KVEstimate
from planner.layer_shapes import num_experts_of
from planner.model.specs import ModelSpec
from planner.units import MIB
from planner.vllm_rules import NEWEST as NEWEST_RULES
from planner.vllm_rules import VllmRules

if TYPE_CHECKING:
    pass


# Activation peak of vLLM's profile run (``GPUModelRunner.profile_run``): a forward pass over
# T = max_num_batched_tokens, then, for a generating model on the last PP rank, the sampler
# warm-up (``_dummy_sampler_run``) over R = min(T, max_num_seqs) rows of the vocabulary's
# logits while the forward's T x hidden output is still held. torch's peak is the larger of
# the two phases (the forward's intermediates are freed before the sampler runs):
#     bytes = max(forward(T), R x vocab x 4 B x copies + T x hidden x 2.553 B) + 27 MB
# ``copies`` is the release's sampler (planner.vllm_rules: 9.515 with the sort of 0.8-0.16,
# 3.70 with the Triton top-k/top-p of 0.17-0.23, 1.5 with FlashInfer's from 0.24). The 2.553
# B and 27 MB come from the least-squares fit to the six v0.11.0 H100 start-ups of
# CALIBRATION.md (within 0.0004 GiB of each); the held hidden states alone are 2 B per
# element. A pooling runner has no sampler term.
ACT_SAMPLER_COPIES_MILLI = 9515  # v0.11.0's ("sort"); the per-release figure is in the rules


ACT_HIDDEN_MILLI_BYTES = 2553


ACT_CONST_BYTES = 27_100_000


# The forward's widest point per token: a decoder layer's MLP up/gate output (2 x width) and
# its activation (1 x width) on this rank, plus four hidden-size tensors (residual, normed
# input, attention output, layer output), in the 2-byte activation dtype. ``width`` is the
# intermediate size (dense) or top-k x the expert intermediate size plus any shared experts
# (MoE: fused_moe's intermediate caches hold each routed token top-k times).
ACT_DTYPE_BYTES = 2


def _config_count(config: dict[str, object], *keys: str) -> int:
    """The first positive whole number among ``keys`` of a config (0 when none is)."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def forward_peak_bytes(spec: ModelSpec, tokens: int, tp: int = 1) -> int:
    """The profile run's forward peak over ``tokens`` tokens on one TP rank (see the
    constants): Llama-3.1-8B (intermediate 14,336, hidden 4,096) at 8,192 tokens:
    8,192 x 2 x (3 x 14,336 + 4 x 4,096) = 0.91 GiB; gpt-oss-20b (4 of 32 experts of 2,880,
    hidden 2,880): 8,192 x 2 x (3 x 4 x 2,880 + 4 x 2,880) = 0.70 GiB."""
    c = spec.config
    hidden = spec.hidden_size
    dense = _config_count(c, "intermediate_size", "ffn_hidden_size") or 4 * hidden
    if num_experts_of(c, spec.name):
        top_k = _config_count(c, "num_experts_per_tok", "moe_topk", "top_k") or 1
        expert = _config_count(c, "moe_intermediate_size", "expert_intermediate_size") or dense
        shared = _config_count(c, "shared_expert_intermediate_size")
        if not shared:
            shared = _config_count(c, "n_shared_experts", "num_shared_experts") * expert
        width = top_k * expert + shared
    else:
        width = dense
    per_rank = -(-width // max(tp, 1))
    return tokens * ACT_DTYPE_BYTES * (3 * per_rank + 4 * hidden)


def sampler_bytes(spec: ModelSpec, rows: int, rules: VllmRules | None = None) -> int:
    """The sampler warm-up's peak over ``rows`` rows: ``rows x vocab x 4 B`` times the copies
    the release's sampler keeps (:attr:`VllmRules.sampler_copies_milli`). Llama-3.1-8B at
    1,024 rows: 0.49 GiB a copy; 4.65 GiB with v0.11.0's sort, 1.81 with 0.19's Triton
    top-k/top-p, 0.73 with FlashInfer's (0.24 on)."""
    vocab = _config_count(spec.config, "vocab_size", "padded_vocab_size") or 32000
    copies = (rules or NEWEST_RULES).sampler_copies_milli
    return rows * vocab * 4 * copies // 1000


def activation_peak_bytes(
    spec: ModelSpec,
    max_num_batched_tokens: int,
    max_num_seqs: int | None = None,
    runner: str = "generate",
    rules: VllmRules | None = None,
    tp: int = 1,
) -> int:
    """Estimated peak of vLLM's profile run for ``rules``' release (the newest when None):
    the larger of the forward over ``max_num_batched_tokens`` tokens and the sampler warm-up
    over ``min(max_num_batched_tokens, max_num_seqs)`` rows with the forward's output held
    (see the module constants). ``max_num_seqs`` None: ``max_num_batched_tokens / 8``, the
    ratio of ``vllm serve``'s defaults.

    Llama-3.1-8B (vocab 128,256, hidden 4,096) at 8,192 / 1,024 on an H100, v0.11.0:
    1,024 x 128,256 x 4 x 9.515 = 4.65 GiB + 8,192 x 4,096 x 2.553 = 0.08 GiB + 27 MB
    = 4.76 GiB, CALIBRATION.md's measured 4.76 (the forward, 0.91 GiB, is smaller); 0.19.0:
    1,024 x 128,256 x 4 x 3.70 = 1.81 + 0.08 + 0.03 = 1.92 GiB (issue 23: 1.89 logged).
    """
    rows = min(max_num_batched_tokens, max_num_seqs or max(1, max_num_batched_tokens // 8))
    sampler = sampler_bytes(spec, rows, rules) if runner == "generate" else 0
    held = max_num_batched_tokens * spec.hidden_size * ACT_HIDDEN_MILLI_BYTES // 1000
    forward = forward_peak_bytes(spec, max_num_batched_tokens, tp)
    return max(forward, sampler + held) + ACT_CONST_BYTES


# CUDA graphs, by mechanism. What ``GPUModelRunner.capture_model`` captures per release
# (sources under ``vllm/``, ``pip download --no-deps vllm==X``):
#
# - the sizes (``VllmConfig._set_cudagraph_sizes``): 1, 2, 4, then multiples of 8 up to
#   ``min(2 x max_num_seqs, 512)`` through 0.11.0 (``config/__init__.py`` 0.10.1.1:3766-3777,
#   0.11.0:589-611: 67 sizes at 256 sequences); from 0.11.1 multiples of 8 below 256 and of 16
#   from 256 (``config/vllm.py`` 0.11.1:876-890, 0.19.0:1424-1440: 51 sizes); both dropping
#   sizes above max_num_batched_tokens;
# - the modes (``cudagraph_mode``): PIECEWISE only through 0.10 (``config/__init__.py``
#   0.10.2:3389-3395); FULL_AND_PIECEWISE by default from 0.11.0 (0.11.0:361-373, 0.11.1
#   ``config/vllm.py``:465-470), PIECEWISE for pooling models: a PIECEWISE graph for every size
#   and a FULL graph for every "uniform decode" size between the decode query length and
#   ``max_num_seqs x`` it (``gpu_model_runner.py`` 0.11.0:3442-3466, 0.11.1:4203-4222;
#   ``v1/cudagraph_dispatcher.py`` 0.19.0:188-229): 67 + 35 graphs at 256 sequences in
#   0.11.0, 51 + 35 from 0.11.1;
# - their memory: graphs share one pool (``graph_capture``), and what each more graph costs is
#   its kernel nodes, which grow with the layers it spans: vLLM's own estimate is the first
#   capture plus (graphs - 1) x the second's, summed over the modes (``gpu_model_runner.py``
#   0.19.0:5899-5957).
#
# Per layer per graph: 0.20 MiB, what the single-GPU captures and estimates public logs
# report come to (tests/data/vllm_startups.json): vLLM's own estimate 0.48 GiB for 28 layers
# x (51 + 35) graphs in 0.26.0 (0.20 MiB), 0.37 for 24 x 86 in 0.27.1 (0.18), 0.51 for
# 32 x 86 in 0.19.1 (0.19, captured 0.46); captured 0.38 GiB for 32 x (35 + 19) in 0.11.0 on
# an L4 (0.23), 0.21-0.23 for 32 x (19 + 11) on an RTX 3090/4090 in 0.12.0 (0.22-0.25).
# Where the graphs' all-reduces are NCCL's (custom all-reduce off: more than two PCIe GPUs,
# or ``--disable-custom-all-reduce``) each layer graph holds 0.19 MiB more: 4 x RTX 4090
# TP 4, 0.11.0, 48 layers x (67 + 35) graphs captured 1.88 GiB = 0.39 MiB (vllm#27782);
# 4 x L40S TP 4, 0.19.0, 80 x (51 + 35) captured 2.62 GiB = 0.39 (gnosia93/eks-agentic-ai).
# Measured, not read: NCCL's per-capture resources are not in vLLM's sources. Graphs
# captured on A100 40GBs in 0.11-0.12 (2.85 GiB for 32 x 102) are 3-4 x the rest and are
# not explained here.
GRAPH_LAYER_BYTES = round(0.20 * MIB)
GRAPH_LAYER_NCCL_BYTES = round(0.19 * MIB)


@dataclass(frozen=True)
class GraphRules:
    """Which graphs a release captures by default, from its ``since`` release until the next
    row's (read in vLLM's released sources; the line each rests on beside it):

    - ``full_decode``: FULL graphs for uniform decode besides the PIECEWISE ones (0.11.0);
    - ``step16``: sizes from 256 in steps of 16, not 8 (0.11.1);
    - ``lora_cases``: with LoRA on, every graph twice, without adapters and with
      ``max_loras + 1`` (``cudagraph_specialize_lora`` True, ``specialize_active_lora``
      False by default; ``v1/cudagraph_dispatcher.py`` 0.19.0:110-126, 180-223, 0.33.0 the
      same; ``lora/utils.py`` 0.19.0:50-65). Releases before 0.19.0 were not checked;
    - ``batched_tokens_size``: ``max_num_batched_tokens`` captured too when it is under the
      largest size (``config/vllm.py`` 0.21.0:1580-1584, 0.30.0:2344-2349);
    - ``blackwell_1024``: the largest size is 1,024, not 512, on data-center Blackwell
      (compute capability 10.x: ``is_device_capability_family(100)``; 0.28.0:1936-1939);
    - ``decode_request_sizes``: with speculative decoding, the request counts 1, 2, 4, 8,
      ... up to ``max_num_seqs`` times the query length ``1 + k`` (0.29.0:2030-2090, 2143);
      before, only the token grid up to ``2 x max_num_seqs x (1 + k)``;
    - ``seqs_size``: without speculation, ``max_num_seqs`` itself (0.33.0:2549-2550).
    """

    since: tuple[int, ...]
    full_decode: bool = False
    step16: bool = False
    lora_cases: bool = False
    batched_tokens_size: bool = False
    blackwell_1024: bool = False
    decode_request_sizes: bool = False
    seqs_size: bool = False


def _each_adding(*rules: tuple[tuple[int, ...], str]) -> tuple[GraphRules, ...]:
    """The rows from 0.8.5's, each release turning on one more rule than the row before."""
    rows = [GraphRules((0, 8, 5))]
    for since, rule in rules:
        rows.append(replace(rows[-1], since=since, **{rule: True}))
    return tuple(rows)


_GRAPH_RULES = _each_adding(
    ((0, 11, 0), "full_decode"),
    ((0, 11, 1), "step16"),
    ((0, 19, 0), "lora_cases"),
    ((0, 21, 0), "batched_tokens_size"),
    ((0, 28, 0), "blackwell_1024"),
    ((0, 29, 0), "decode_request_sizes"),
    ((0, 33, 0), "seqs_size"),
)


def graph_rules(release: tuple[int, ...] | None) -> GraphRules:
    """The :class:`GraphRules` row of ``release`` (None: the newest)."""
    chosen = _GRAPH_RULES[-1]
    if release is not None:
        chosen = _GRAPH_RULES[0]
        for row in _GRAPH_RULES:
            if row.since <= release:
                chosen = row
    return chosen


def _grid(top: int, step16: bool) -> list[int]:
    """1, 2, 4, then multiples of 8 up to ``top`` (of 16 from 256 with ``step16``)."""
    sizes = [n for n in (1, 2, 4) if n <= top]
    if not step16:
        return sizes + list(range(8, top + 1, 8))
    return sizes + list(range(8, min(top + 1, 256), 8)) + list(range(256, top + 1, 16))


def cuda_graph_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    release: tuple[int, ...] | None = None,
    *,
    decode_query_len: int = 1,
    blackwell: bool = False,
) -> list[int]:
    """The batch sizes, in tokens, ``release`` (None: the newest) captures by default
    (``VllmConfig._set_cudagraph_sizes``; :class:`GraphRules`): 1, 2, 4, then multiples of 8
    (through 0.11.0) or multiples of 8 below 256 and of 16 from 256 (0.11.1 on), up to
    ``min(2 x max_num_seqs x q, 512 (1,024 on data-center Blackwell from 0.28),
    max_num_batched_tokens)`` for query length ``q = decode_query_len``; from 0.21 the batched
    tokens themselves when under it, from 0.29 the decode request counts times ``q > 1``,
    from 0.33 ``max_num_seqs`` when ``q`` is 1. 256 sequences -> 67 sizes in 0.11.0, 51 from
    0.11.1; 100 sequences, 8,192 tokens: 1, 2, 4, 8 ... 200, and 100 from 0.33."""
    r = graph_rules(release)
    seqs, q = max_num_seqs, decode_query_len
    ceiling = 1024 if (blackwell and r.blackwell_1024) else 512
    widest = min(2 * seqs * q, ceiling)
    top = min(widest, max_num_batched_tokens)
    sizes = set(_grid(top, r.step16))
    if r.batched_tokens_size and max_num_batched_tokens <= top:
        sizes.add(max_num_batched_tokens)
    if q > 1 and r.decode_request_sizes:
        reqs = min(seqs, ceiling)
        counts = set(_grid(reqs, True)) | {reqs}
        sizes |= {n * q for n in counts if n * q <= widest and n * q <= max_num_batched_tokens}
    elif q == 1 and r.seqs_size and seqs <= widest and seqs <= max_num_batched_tokens:
        sizes.add(seqs)
    return sorted(sizes)


def cuda_graph_modes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    decode_query_len: int = 1,
    release: tuple[int, ...] | None = None,
    runner: str = "generate",
    *,
    blackwell: bool = False,
    lora: bool = False,
) -> dict[str, tuple[int, int]]:
    """The graphs ``release`` captures, per mode, as ``{mode: (count, largest size in
    tokens)}`` (what vLLM >= 0.21 logs as "Profiling CUDA graph memory: PIECEWISE=51
    (largest=512), FULL=35 (largest=256)"): a PIECEWISE one per size
    (:func:`cuda_graph_sizes`), and from 0.11.0 (not for a pooling model) a FULL one per
    uniform-decode size, ``decode_query_len`` to ``max_num_seqs x`` it tokens
    (``v1/cudagraph_dispatcher.py`` 0.19.0:208-223); with ``lora`` (from 0.19) each twice.
    256 sequences, 2,048 tokens from 0.11.1: ``{"PIECEWISE": (51, 512), "FULL": (35, 256)}``."""
    r = graph_rules(release)
    seqs, q = max_num_seqs, decode_query_len
    sizes = cuda_graph_sizes(
        seqs, max_num_batched_tokens, release, decode_query_len=q, blackwell=blackwell
    )
    cases = 2 if (lora and r.lora_cases) else 1
    modes = {"PIECEWISE": (len(sizes) * cases, max(sizes))} if sizes else {}
    full = r.full_decode and runner != "pooling"
    decode = [n for n in sizes if q <= n <= seqs * q] if full else []
    if decode:
        modes["FULL"] = (len(decode) * cases, max(decode))
    return modes


def cuda_graph_count(*args: Any, **kwargs: Any) -> int:
    """The graphs ``release`` captures, all modes together: the counts of
    :func:`cuda_graph_modes` (which takes the same arguments), summed. 256 sequences, 2,048
    tokens: 67 + 35 = 102 in 0.11.0, 51 + 35 = 86 from 0.11.1, 67 in 0.10."""
    return sum(count for count, _ in cuda_graph_modes(*args, **kwargs).values())


def cuda_graph_estimate_bytes(
    est: KVEstimate,
    decode_query_len: int = 1,
    *,
    release: tuple[int, ...] | None = None,
    runner: str = "generate",
    nccl_all_reduce: bool = False,
    blackwell: bool = False,
    lora: bool = False,
    graphs: int | None = None,
) -> int:
    """The CUDA graphs ``release`` (None: the newest) captures (``graphs`` of them when given),
    estimated: 0.20 MiB per layer of the rank's pipeline stage per graph
    (:func:`cuda_graph_count`, on data-center Blackwell with ``blackwell``, with LoRA on with
    ``lora``), 0.39 where the graphs' all-reduces are NCCL's (see the constants).
    Llama-3.1-8B (32 layers) at 256 sequences: 32 x 86 x 0.20 MiB = 0.54 GiB from 0.11.1;
    Qwen3-30B-A3B (48 layers) at TP 4 over PCIe, 0.11.0: 48 x 102 x 0.39 MiB = 1.86 GiB
    (vllm#27782 logs 1.88)."""
    assert est.vllm is not None
    layers = est.pp_layers[1] - est.pp_layers[0]
    seqs, tokens = est.vllm.max_num_seqs, est.vllm.max_num_batched_tokens
    if graphs is None:
        graphs = cuda_graph_count(
            seqs, tokens, decode_query_len, release, runner, blackwell=blackwell, lora=lora
        )
    per = GRAPH_LAYER_BYTES + (GRAPH_LAYER_NCCL_BYTES if nccl_all_reduce else 0)
    return layers * graphs * per
