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
from planner.gpu_support import engine_refusal, fp8_kv_refusal
from planner.gpus import Gpu
from planner.kv_layout import KVEstimate, tp_problems, valid_tp_sizes
from planner.layer_shapes import num_experts_of
from planner.model.specs import MLA, Engine, KVDtype
from planner.weights import Weights

DEFAULT_RPC_PORT = 13345  # the port vLLM's data-parallel docs use
HEAD_ADDRESS = "HEAD_NODE_IP"  # a placeholder the user replaces


@dataclass(frozen=True, kw_only=True)
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


DEFAULT_NODE_GPUS = 8  # an HGX / DGX node, where the catalog does not say (Gpu.node_gpus)


def node_size(gpu: Gpu | None, gpus_per_node: int | None) -> tuple[int, str]:
    """GPUs one node holds and where that figure comes from: ``--gpus-per-node``, the
    catalog's ``node_gpus``, else :data:`DEFAULT_NODE_GPUS` (8, an HGX board)."""
    if gpus_per_node is not None:
        return gpus_per_node, f"a node of {gpus_per_node} GPUs (--gpus-per-node)"
    if gpu is not None and gpu.node_gpus:
        return gpu.node_gpus, f"a {gpu.name} node ({gpu.node_gpus} GPUs)"
    return DEFAULT_NODE_GPUS, (
        f"a node of {DEFAULT_NODE_GPUS} GPUs (kvplan's assumption where the catalog does not "
        "give one)"
    )


@dataclass(frozen=True, kw_only=True)
class LayoutRow:
    """One way to split ``gpus`` between TP, PP and DP (JSON ``layouts[]``), per GPU and for
    the cluster; ``cluster_max_concurrency`` is the worst case: requests of ``max_model_len``
    running at once over every DP rank."""

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
    pp: int = 1
    chosen: bool = False  # the layout kvplan picked (--gpus without a layout)

    @property
    def label(self) -> str:
        """``TP 4 x PP 2``, ``TP 1 x DP 8 + EP``: the axes above 1 (TP always)."""
        words = f"TP {self.tp}" + (f" x PP {self.pp}" if self.pp > 1 else "")
        words += f" x DP {self.dp}" if self.dp > 1 else ""
        return words + (" + EP" if self.expert_parallel else "")

    @property
    def changes(self) -> dict[str, object]:
        """The layout as settings (``{"tp": 1, "dp": 8, "enable_expert_parallel": True}``)."""
        out: dict[str, object] = {"tp": self.tp}
        if self.pp > 1:
            out["pp"] = self.pp
        if self.dp > 1:
            out["dp"] = self.dp
        if self.expert_parallel:
            out["enable_expert_parallel"] = True
        return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(
    dep: Deployment,
    gpus: int,
    gpus_per_node: int | None,
    capacity: Callable[[Deployment], tuple[KVEstimate, Weights, VllmCapacity]],
    *,
    nodes: int = 1,
) -> list[LayoutRow]:
    """Every ``tp x pp x dp = gpus`` split the model takes, planned with the user's other
    settings. TP stays inside a node (``gpus_per_node``, the catalog's node size, else 8); over
    several nodes a whole replica (TP x PP) does, as :func:`node_commands` runs it. Routed
    experts go expert-parallel whenever dp > 1 on an MoE model (vLLM shards them over dp x tp
    either way; EP is what DP-attention deployments run)."""
    s, spec = dep.settings, dep.spec
    node, _ = node_size(dep.gpu, gpus_per_node)
    moe = bool(num_experts_of(spec.config, spec.name))
    rows: list[LayoutRow] = []
    for pp in _divisors(gpus):
        if pp > spec.num_layers:
            continue
        per_stage = gpus // pp
        for tp in _divisors(per_stage):
            if tp > node or tp % s.dcp or (nodes > 1 and tp * pp > node):
                continue
            dp = per_stage // tp
            ep = s.enable_expert_parallel or (moe and dp > 1)
            redundant = s.num_redundant_experts if ep else 0
            try:
                variant = dep.with_settings(
                    tp=tp, pp=pp, dp=dp, enable_expert_parallel=ep, num_redundant_experts=redundant
                )
                est, weights, cap = capacity(variant)
            except UsageError:  # the model does not split over tp ranks or pp stages
                continue
            rank_tokens = max(cap.kv_cache_size_tokens, 0) if cap.fits else 0
            flags = f"--tensor-parallel-size {tp}"
            flags += f" --pipeline-parallel-size {pp}" if pp > 1 else ""
            flags += f" --data-parallel-size {dp}" if dp > 1 else ""
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
                    yours=(tp, pp, dp) == (s.tp, s.pp, s.dp),
                    flags=flags,
                    pp=pp,
                )
            )
    return sorted(rows, key=lambda r: (r.pp, r.tp))


NEAR_TIE = 0.01  # layouts within 1 % of the most cluster tokens count as holding as much


def best_layout(rows: list[LayoutRow]) -> LayoutRow | None:
    """The layout that starts with the fewest pipeline stages, and among those holds the most
    cluster tokens; within :data:`NEAR_TIE` of that, fewer DP ranks (fewer weight copies),
    then fewer TP ranks. PP comes last because vLLM's distributed-serving guide splits TP
    inside a node and PP across nodes: on one node a pipeline only adds bubbles, so it is
    picked only where no layout without one starts."""
    started = [r for r in rows if r.fits and r.cluster_kv_cache_size_tokens > 0]
    if not started:
        return None
    fewest = min(r.pp for r in started)
    started = [r for r in started if r.pp == fewest]
    most = max(r.cluster_kv_cache_size_tokens for r in started)
    near = [r for r in started if r.cluster_kv_cache_size_tokens >= most * (1 - NEAR_TIE)]
    return min(near, key=lambda r: (r.dp, -r.cluster_kv_cache_size_tokens, r.tp))


def choice_reason(best: LayoutRow, rows: list[LayoutRow], gpus: int, length: int) -> str:
    """Why ``best`` was picked, with its figures and the runner-up's."""
    others = [r for r in rows if r is not best and r.fits and r.cluster_kv_cache_size_tokens]
    runner = max(others, key=lambda r: r.cluster_kv_cache_size_tokens, default=None)
    why = (
        f"{best.label} holds {best.cluster_kv_cache_size_tokens:,} KV tokens on the {gpus} GPUs "
        f"({best.cluster_max_concurrency:.2f} requests of {length:,} tokens at once)"
    )
    if best.pp > 1:
        why += "; no layout without pipeline stages starts"
    if runner is not None:
        why += f"; next {runner.label}: {runner.cluster_kv_cache_size_tokens:,}"
        if runner.cluster_kv_cache_size_tokens >= best.cluster_kv_cache_size_tokens:
            why += (
                " (with pipeline stages, which kvplan keeps for spanning nodes)"
                if runner.pp > best.pp
                else " (within 1 %: fewer weight copies win)"
            )
    failed = [r for r in rows if not r.fits]
    if failed:
        why += f"; {len(failed)} layout(s) won't start"
    return why


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


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One reason a deployment cannot start before any memory is counted: ``check`` names the
    rule (``gpus``, ``node``, ``divisibility``), ``changes`` the fixes as data (a sentence for
    one that is no setting), best first."""

    check: str
    reason: str
    changes: list[dict[str, object] | str]


def physical_problems(
    dep: Deployment, total: int | None, nodes: int, gpus_per_node: int | None
) -> list[Problem]:
    """What stops ``dep``'s layout on any machine: more GPUs than given (tp x pp x dp against
    ``--gpus`` / ``--nodes x --gpus-per-node``), TP wider than a node, a node larger than the
    GPU's board, and the engines' divisibility rules (heads over TP, the layers over PP, DCP
    over GQA heads, EP on a dense model). The changes here are the ones that need no plan; a
    layout that fits the GPUs given is added by the caller, which can plan them."""
    s, spec = dep.settings, dep.spec
    out: list[Problem] = []
    node, node_source = node_size(dep.gpu, gpus_per_node)
    layout = f"tp {s.tp} x pp {s.pp} x dp {s.dp} = {s.gpus} GPUs"
    if total is not None and s.gpus > total:
        given = (
            f"--nodes {nodes} x --gpus-per-node {gpus_per_node} give {total}"
            if gpus_per_node is not None
            else f"--gpus gives {total}"
        )
        fewer: list[dict[str, object] | str] = []
        if s.tp * s.pp <= total and s.dp > 1:
            fewer.append({"dp": total // (s.tp * s.pp)})
        fewer.append(f"{s.gpus} GPUs (--gpus {s.gpus})")
        out.append(Problem(check="gpus", reason=f"{layout}, but {given}", changes=fewer))
    if gpus_per_node is not None and dep.gpu is not None and dep.gpu.node_gpus:
        if gpus_per_node > dep.gpu.node_gpus:
            out.append(
                Problem(
                    check="node",
                    reason=f"--gpus-per-node {gpus_per_node}, but a {dep.gpu.name} node holds "
                    f"{dep.gpu.node_gpus}",
                    changes=[f"--gpus-per-node {dep.gpu.node_gpus}"],
                )
            )
    if s.tp > node:
        out.append(
            Problem(
                check="node",
                reason=f"TP {s.tp} is wider than {node_source}: kvplan keeps TP inside a "
                "node, where the GPUs share NVLink (vLLM runs TP across nodes only on a Ray "
                "cluster, at network speed)",
                changes=[{"tp": node, "pp": s.pp * s.tp // node}]
                if s.tp % node == 0
                else [{"tp": node}],
            )
        )
    elif nodes > 1 and s.tp * s.pp > node:
        out.append(
            Problem(
                check="node",
                reason=f"one replica needs {s.tp * s.pp} GPUs (tp {s.tp} x pp {s.pp}) but a node "
                f"has {node}: kvplan runs whole replicas inside a node over several nodes "
                "(vLLM runs a replica across nodes only on a Ray cluster)",
                changes=[f"TP x PP of at most {node} GPUs, DP across the nodes"],
            )
        )
    split = tp_problems(spec, s.tp)
    if split:
        valid = [t for t in valid_tp_sizes(spec) if t <= max(s.tp, 1)]
        out.append(
            Problem(
                check="divisibility",
                reason=f"--tp {s.tp} does not divide {' and '.join(split)} (vLLM's "
                "ModelConfig.verify_with_parallel_config: heads must split evenly over TP)",
                changes=[{"tp": valid[-1]}] if valid else [],
            )
        )
    if s.pp > spec.num_layers:
        out.append(
            Problem(
                check="divisibility",
                reason=f"--pp {s.pp} is more than the model's {spec.num_layers} layers",
                changes=[{"pp": spec.num_layers}],
            )
        )
    if s.enable_expert_parallel and not num_experts_of(spec.config, spec.name):
        out.append(
            Problem(
                check="divisibility",
                reason=f"--enable-expert-parallel on {spec.name}, which has no experts (vLLM: "
                '"Number of experts in the model must be greater than 0 when expert '
                'parallelism is enabled")',
                changes=[{"enable_expert_parallel": False}],
            )
        )
    out.extend(_dcp_problems(dep))
    out.extend(_gpu_problems(dep))
    return out


def _gpu_problems(dep: Deployment) -> list[Problem]:
    """What the GPU itself does not run (:mod:`planner.gpu_support`): the engine (TensorRT-LLM
    on AMD), vLLM's fp8 KV cache below compute capability 8.0."""
    s, out = dep.settings, []
    engine = engine_refusal(s.engine, dep.gpu)
    if engine:
        fix: list[dict[str, object] | str] = [{"engine": Engine.VLLM}, {"engine": Engine.SGLANG}]
        out.append(Problem(check="engine", reason=engine, changes=fix))
    fp8 = fp8_kv_refusal(dep.gpu) if s.engine is Engine.VLLM else None
    if fp8 and s.kv_cache_dtype.value.startswith("fp8"):
        # vLLM 0.33.0 triton_attn.py:520-523 suggests float16 below 8.0
        out.append(
            Problem(check="kv_cache_dtype", reason=fp8, changes=[{"kv_cache_dtype": KVDtype.FP16}])
        )
    return out


def _dcp_problems(dep: Deployment) -> list[Problem]:
    """vLLM 0.33's decode-context-parallel rules for GQA/MQA (``vllm/config/model.py``
    ``verify_with_parallel_config``, lines 1578-1606): TP above the KV heads, DCP at most
    ``tp // kv_heads``, and the query heads per KV head a multiple of DCP. MLA has none."""
    s, spec = dep.settings, dep.spec
    if s.dcp <= 1 or any(isinstance(layer, MLA) for layer in spec.layers):
        return []
    kv, heads = spec.num_kv_heads, spec.num_attention_heads
    if not kv:
        return []
    if s.tp <= kv:
        return [
            Problem(
                check="divisibility",
                reason=f"--decode-context-parallel-size {s.dcp} on GQA needs --tp above the "
                f"model's {kv} KV heads, got {s.tp} (vLLM's ModelConfig)",
                changes=[{"dcp": 1}, {"tp": kv * s.dcp, "dcp": s.dcp}],
            )
        ]
    most = s.tp // kv
    if s.dcp > most:
        return [
            Problem(
                check="divisibility",
                reason=f"--decode-context-parallel-size {s.dcp} exceeds {most} (tp {s.tp} // "
                f"{kv} KV heads; vLLM's ModelConfig)",
                changes=[{"dcp": most}],
            )
        ]
    if (heads // kv) % s.dcp:
        return [
            Problem(
                check="divisibility",
                reason=f"{heads // kv} query heads per KV head do not divide by "
                f"--decode-context-parallel-size {s.dcp} (vLLM's ModelConfig)",
                changes=[{"dcp": 1}],
            )
        ]
    return []
