"""Figures for the whole deployment, not one GPU: data parallelism, layouts, multi-node.

vLLM runs one engine per data-parallel rank, each with its own KV pool, scheduler and
``--max-num-seqs`` ("Each DP engine has an independent KV cache"; "``--max-num-seqs`` applies
per DP rank": vLLM's ``docs/serving/data_parallel_deployment.md``). So the cluster holds
``dp x`` one rank's KV tokens and runs up to ``dp x max_num_seqs`` sequences.

For MLA models (DeepSeek-V3/R1, Kimi-K2) TP does not split the KV: every TP rank stores the
whole latent (``kv_lora_rank + rope``) per token, so TP 8 stores each token 8 times, while
DP 8 with expert parallelism gives 8 independent pools at the price of replicating attention,
dense layers and shared experts on every GPU (``../shared/ENGINES-SCALE.md`` §4.1).
:func:`layouts` plans every split of the GPUs given and names the one that holds the most.

Worked example (DeepSeek-V3 fp8 on 8 H200s at gmu 0.92, bf16 MLA KV of 70,272 B/token/rank):
TP 8 keeps ~79.3 GiB of weights per GPU and its pool is also the cluster's; DP 8 + EP keeps
~93.9 GiB per GPU, less KV per GPU, but 8 pools: about 5x the cluster tokens.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass

from planner.budget import VllmCapacity
from planner.deployment import Deployment
from planner.errors import UsageError
from planner.kv_layout import KVEstimate
from planner.weights import Weights

DEFAULT_RPC_PORT = 13345  # the port vLLM's data-parallel docs use
HEAD_ADDRESS = "HEAD_NODE_IP"  # a placeholder the user replaces


@dataclass(frozen=True)
class Cluster:
    """The whole deployment (JSON ``cluster``): every rank's pool together."""

    gpus: int
    data_parallel_size: int
    kv_cache_size_tokens: int
    max_concurrency: float
    max_num_seqs: int


def cluster_of(dep: Deployment, cap: VllmCapacity) -> Cluster:
    """``dp`` copies of one rank's pool (for dp = 1 the rank's own figures: an MLA model's
    latent replicated over TP is counted once, as vLLM logs it)."""
    s = dep.settings
    return Cluster(
        gpus=s.gpus,
        data_parallel_size=s.dp,
        kv_cache_size_tokens=s.dp * max(cap.kv_cache_size_tokens, 0),
        max_concurrency=round(s.dp * cap.max_concurrency, 4),
        max_num_seqs=s.dp * cap.max_num_seqs,
    )


@dataclass(frozen=True)
class LayoutRow:
    """One way to split ``gpus`` between TP and DP (JSON ``layouts[]``), per GPU and cluster."""

    tp: int
    dp: int
    expert_parallel: bool
    weights_bytes: int
    available_kv_bytes: int
    kv_cache_size_tokens: int  # one rank's pool, as vLLM logs it
    cluster_kv_cache_size_tokens: int
    cluster_max_concurrency: float
    fits: bool
    yours: bool
    flags: str


def layouts(
    dep: Deployment,
    gpus: int,
    gpus_per_node: int | None,
    capacity: Callable[[Deployment], tuple[KVEstimate, Weights, VllmCapacity]],
) -> list[LayoutRow]:
    """Every ``tp x dp = gpus / pp`` split the model takes (TP inside a node when
    ``gpus_per_node`` is given), planned with the user's other settings; routed experts go
    expert-parallel whenever dp > 1 on an MoE model (vLLM shards them over dp x tp either
    way; EP is what DP-attention deployments run)."""
    from planner.weights import _num_experts

    s, spec = dep.settings, dep.spec
    if gpus % s.pp:
        raise UsageError(f"--gpus {gpus} is not a multiple of --pp {s.pp}")
    moe = bool(_num_experts(spec.config, spec.name))
    rows = []
    per_stage = gpus // s.pp
    for tp in range(1, per_stage + 1):
        if per_stage % tp or (gpus_per_node and tp > gpus_per_node) or tp % s.dcp:
            continue
        dp = per_stage // tp
        ep = s.enable_expert_parallel or (moe and dp > 1)
        redundant = s.num_redundant_experts if ep else 0
        try:
            variant = dep.with_settings(
                tp=tp, dp=dp, enable_expert_parallel=ep, num_redundant_experts=redundant
            )
            est, weights, cap = capacity(variant)
        except UsageError:  # the model does not split over tp ranks
            continue
        rank_tokens = max(cap.kv_cache_size_tokens, 0) if cap.fits else 0
        flags = f"--tensor-parallel-size {tp}" + (f" --data-parallel-size {dp}" if dp > 1 else "")
        if ep and not s.enable_expert_parallel:
            flags += " --enable-expert-parallel"
        rows.append(
            LayoutRow(
                tp=tp,
                dp=dp,
                expert_parallel=ep,
                weights_bytes=weights.bytes_per_rank,
                available_kv_bytes=cap.available_kv_bytes,
                kv_cache_size_tokens=rank_tokens,
                cluster_kv_cache_size_tokens=dp * rank_tokens,
                cluster_max_concurrency=round(dp * cap.max_concurrency, 4) if cap.fits else 0.0,
                fits=cap.fits,
                yours=(tp, dp) == (s.tp, s.dp),
                flags=flags,
            )
        )
    return rows


def best_layout(rows: list[LayoutRow]) -> LayoutRow | None:
    """The layout that starts and holds the most cluster tokens (ties: fewer DP ranks, i.e.
    fewer weight copies)."""
    started = [r for r in rows if r.fits and r.cluster_kv_cache_size_tokens > 0]
    return max(started, key=lambda r: (r.cluster_kv_cache_size_tokens, -r.dp), default=None)


def node_commands(command: str, dep: Deployment, nodes: int, gpus_per_node: int) -> list[str]:
    """The ``vllm serve`` command of every node for a data-parallel deployment over
    ``nodes`` (vLLM's internal load balancing: the head runs the API server and its local
    ranks; the others run ``--headless`` from ``--data-parallel-start-rank``). TP and PP stay
    inside a node. ``HEAD_NODE_IP`` is a placeholder."""
    s = dep.settings
    if nodes <= 1:
        return [command]
    per_replica = s.tp * s.pp
    if per_replica > gpus_per_node:
        raise UsageError(
            f"one replica needs {per_replica} GPUs (tp {s.tp} x pp {s.pp}) but a node has "
            f"{gpus_per_node}: keep TP x PP inside a node (vLLM runs a replica across nodes "
            "only on a Ray cluster)"
        )
    local = gpus_per_node // per_replica
    if local * nodes < s.dp:
        raise UsageError(
            f"--data-parallel-size {s.dp} needs {s.dp * per_replica} GPUs; {nodes} nodes x "
            f"{gpus_per_node} GPUs hold {local * nodes} replicas of {per_replica}"
        )
    words = shlex.split(command)
    address = [
        "--data-parallel-address",
        HEAD_ADDRESS,
        "--data-parallel-rpc-port",
        str(DEFAULT_RPC_PORT),
    ]
    out = []
    start = 0
    for node in range(nodes):
        here = min(local, s.dp - start)
        if here <= 0:
            break
        extra = ["--data-parallel-size-local", str(here)]
        if node:
            extra = ["--headless", *extra, "--data-parallel-start-rank", str(start)]
        out.append(shlex.join([*words, *extra, *address]))
        start += here
    return out
