"""A data-parallel boot log rank by rank and as one cluster.

vLLM with ``--data-parallel-size N`` runs N engines, each with its own KV cache pool on its
own GPUs; a request runs on one rank, and the front end's load balancer gives each rank about
the same number of requests (it balances by queue length, not by free KV). So:

- the cluster holds the sum of the ranks' pools: ``kv_cache_size_tokens`` and
  ``max_concurrency`` are sums over the ranks;
- when the ranks' pools differ, the smallest fills first: under an even load the cluster
  holds ``N x`` the smallest pool (``even_load_*``), and the rank is named (``min_rank``).

A rank that logged no KV cache size is counted as the smallest rank that did, and
``logged_ranks`` says which ranks the figures rest on. (vLLM 0.33 prints its startup sizes
with ``info_once(scope="local")``, once per node: DP rank 0's engine on a node with TP 1;
with TP above 1 each rank's engine prints its KV cache size, but only the node's first worker
its memory.)
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.diagnose.findings import Finding
from planner.diagnose.log_figures import BootLog, RankFigures

# Ranks whose KV pools differ by this share of the largest are a warning, not a note.
UNEVEN_PCT = 5.0


@dataclass(frozen=True)
class Cluster:
    """The DP ranks as one server (JSON ``cluster``).

    Attributes:
        ranks: how many DP ranks serve (``data_parallel_size``).
        logged_ranks: the ranks that logged their KV cache size; the others are counted as
            the smallest of these.
        kv_cache_size_tokens: tokens in all the ranks' pools together; None when no rank
            logged its size.
        max_concurrency: requests of ``max_model_len`` tokens all the ranks hold at once,
            the sum of the ranks' logged ``max_concurrency`` (each rounded to 0.01).
        min_rank: the rank with the fewest tokens when the ranks differ; None when they
            agree.
        even_load_kv_cache_size_tokens, even_load_max_concurrency: what the cluster holds
            when the balancer gives every rank the same load: ``ranks x`` the smallest rank's.

    Worked example (``vllm-v1-dp3-ep-qwen3-30b-a3b.log``): ranks 0, 1, 2 log 1,083,040,
    1,092,256 and 1,092,256 tokens (33.05x, 33.33x, 33.33x at 32,768 tokens), so the
    cluster holds 1,083,040 + 2 x 1,092,256 = 3,267,552 tokens and 33.05 + 2 x 33.33 =
    99.71x; rank 0 has the fewest (its GPUs hold 22 of Qwen3-30B-A3B's 128 experts, the
    others 21), so under an even load 3 x 1,083,040 = 3,249,120 tokens (99.15x).
    """

    ranks: int
    logged_ranks: list[int]
    kv_cache_size_tokens: int | None
    max_concurrency: float | None
    min_rank: int | None
    even_load_kv_cache_size_tokens: int | None
    even_load_max_concurrency: float | None


@dataclass(frozen=True)
class DataParallel:
    """What a data-parallel log says rank by rank and together (JSON top-level
    ``data_parallel_size``, ``expert_parallel``, ``ranks`` and ``cluster``).

    Attributes:
        data_parallel_size: vLLM's ``data_parallel_size`` as the log states it, else the
            number of ranks its prefixes show.
        expert_parallel: ``enable_expert_parallel`` as the log states it (None: not stated).
        ranks: each rank's own figures (:class:`~planner.diagnose.log_figures.RankFigures`),
            by rank; a rank that logged nothing of its budget is absent.
        cluster: the ranks together (:class:`Cluster`).
    """

    data_parallel_size: int
    expert_parallel: bool | None
    ranks: list[RankFigures]
    cluster: Cluster


def data_parallel(log: BootLog) -> DataParallel | None:
    """The rank-by-rank view of a data-parallel log; None for a log of one engine."""
    if not log.data_parallel:
        return None
    size = max([log.data_parallel_size or 1, *(rank + 1 for rank in log.ranks)])
    figures = list(log.ranks.values())
    return DataParallel(size, log.expert_parallel, figures, _cluster(size, figures))


def _cluster(size: int, figures: list[RankFigures]) -> Cluster:
    logged = [f for f in figures if f.kv_cache_size_tokens is not None]
    if not logged:
        return Cluster(size, [], None, None, None, None, None)
    smallest = min(logged, key=lambda f: (f.kv_cache_size_tokens or 0, f.rank))
    fewest = smallest.kv_cache_size_tokens or 0
    unlogged = size - len(logged)
    tokens = sum(f.kv_cache_size_tokens or 0 for f in logged) + unlogged * fewest
    concurrency = None
    if all(f.max_concurrency is not None for f in logged):
        least = smallest.max_concurrency or 0.0
        concurrency = round(sum(f.max_concurrency or 0.0 for f in logged) + unlogged * least, 2)
    differ = any(f.kv_cache_size_tokens != fewest for f in logged)
    even_concurrency = (
        round(size * smallest.max_concurrency, 2) if smallest.max_concurrency is not None else None
    )
    return Cluster(
        size,
        [f.rank for f in logged],
        tokens,
        concurrency,
        smallest.rank if differ else None,
        size * fewest,
        even_concurrency,
    )


def rank_findings(dp: DataParallel, notes: list[str]) -> list[Finding]:
    """The finding when the ranks' pools differ ("dp-ranks-differ"), and a note when some
    ranks logged no KV cache size."""
    c = dp.cluster
    logged = {f.rank: f for f in dp.ranks if f.kv_cache_size_tokens is not None}
    if logged and len(logged) < c.ranks:
        smallest = min(logged.values(), key=lambda f: (f.kv_cache_size_tokens or 0, f.rank))
        missing = [rank for rank in range(c.ranks) if rank not in logged]
        notes.append(
            f"DP rank{'s' if len(missing) > 1 else ''} {_names(missing)} logged no KV cache "
            "size (recent vLLM prints some startup sizes once per node); the cluster figures "
            f"count {'each' if len(missing) > 1 else 'it'} as rank {smallest.rank}'s "
            f"{smallest.kv_cache_size_tokens:,} tokens"
        )
    if c.min_rank is None:
        return []
    low = logged[c.min_rank]
    high = max(logged.values(), key=lambda f: (f.kv_cache_size_tokens or 0, -f.rank))
    low_tokens, high_tokens = low.kv_cache_size_tokens or 0, high.kv_cache_size_tokens or 0
    spread = round(100 * (high_tokens - low_tokens) / high_tokens, 2) if high_tokens else 0.0
    return [
        Finding(
            kind="dp-ranks-differ",
            severity="warning" if spread >= UNEVEN_PCT else "info",
            data={
                "min_rank": low.rank,
                "min_kv_cache_size_tokens": low_tokens,
                "max_rank": high.rank,
                "max_kv_cache_size_tokens": high_tokens,
                "spread_pct": spread,
                "ranks": c.ranks,
                "kv_cache_size_tokens": c.kv_cache_size_tokens,
                "even_load_kv_cache_size_tokens": c.even_load_kv_cache_size_tokens,
                "even_load_max_concurrency": c.even_load_max_concurrency,
            },
            fix=[
                f"find why rank {low.rank} has less KV memory: another process on its GPUs, or "
                "(expert parallelism) more experts on them when the experts do not divide "
                "evenly over dp x tp GPUs"
            ],
            lines=[low.lines.get("kv_cache_size_tokens", 0)],
        )
    ]


def _names(ranks: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``1-3, 5``."""
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
