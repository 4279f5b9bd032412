"""Which GPU, how many, at what cost: ``kvplan estimate MODEL --gpu any``.

Every priced catalog GPU x count (1, 2, 4, 8 GPUs, one node) x layout (every TP x DP split of
the count, experts parallel when DP > 1 on an MoE model) is planned as ``kvplan estimate``
plans it, with the user's settings. A candidate **meets the requirement** when vLLM starts and
``concurrency`` requests of ``max_model_len`` tokens run at once in the worst case (each DP rank
gets ``ceil(concurrency / dp)`` of them as its ``max_num_seqs``).

For each candidate that meets it, the workload (the user's, or a synthetic one around the given
averages, else 1,000-token prompts and 250-token outputs) is replayed at saturation by the
simulator on that GPU's roofline: its output tokens per second give the price per million
output tokens, ``usd_per_hour / (tokens_per_s x 3,600) x 10^6``. Rows are ranked by price per
hour, then per million output tokens; one row per GPU x count (its cheapest layout per token).

Prices: ``planner/data/prices.json`` (date and source in the file), or ``--prices FILE`` with
the same shape (``{"date": ..., "sources": [...], "prices": {"h100": {"usd_per_hour": 2.5}}}``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import DoesNotFitError, InputFileError, KvplanError, UsageError
from planner.files import read_text_file
from planner.gpus import GPUS, lookup_gpu
from planner.layer_shapes import num_experts_of
from planner.plan_types import WONT_START, PlanOptions
from planner.recommend import plan

if TYPE_CHECKING:
    from planner.deployment import Deployment
    from planner.simulate.workload import Workload

PRICES = Path(__file__).parent / "data" / "prices.json"
COUNTS = (1, 2, 4, 8)
DEFAULT_PROMPT, DEFAULT_OUTPUT = 1000, 250
REPLAYED = 300  # requests of the workload replayed per candidate, all waiting at once
SHOWN = 12


@dataclass(frozen=True, kw_only=True)
class PriceTable:
    date: str
    sources: list[str]
    usd_per_hour: dict[str, float]
    source: str  # the file


def load_prices(path: str | None = None) -> PriceTable:
    """The shipped price table, or ``path`` (same keys); GPU names are read against the
    catalog (``H100`` and ``h100-sxm`` are ``h100``).

    Raises:
        InputFileError: the file is missing, not JSON or has no ``prices`` of numbers.
    """
    file = Path(path) if path else PRICES
    text = read_text_file(file, limit=1 << 20, what="--prices file")
    try:
        data = json.loads(text)
        raw = data["prices"]
        prices = {}
        for name, entry in raw.items():
            value = entry["usd_per_hour"] if isinstance(entry, dict) else entry
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name}: usd_per_hour must be a positive number")
            try:
                key = lookup_gpu(name).gpu.name
            except UsageError as exc:
                raise ValueError(str(exc)) from None
            prices[key] = float(value)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as exc:
        what = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise InputFileError(
            f"--prices {file}: {what or type(exc).__name__}; want "
            '{"date": "...", "prices": {"h100": {"usd_per_hour": 2.5}}}'
        ) from None
    if not prices:
        raise InputFileError(f"--prices {file}: no prices")
    return PriceTable(
        date=str(data.get("date", "")),
        sources=[str(s) for s in data.get("sources", [])],
        usd_per_hour=prices,
        source=str(file) if path else "planner/data/prices.json",
    )


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One GPU x count x layout that meets the requirement (JSON ``gpu_ranking.rows[]``)."""

    gpu: str
    gpus: int
    tp: int
    dp: int
    expert_parallel: bool
    max_num_seqs: int  # per DP rank
    worst_case_running: int  # the whole deployment's, at max_model_len
    kv_cache_size_tokens: int  # the whole deployment's
    usd_per_hour: float
    output_tokens_per_s: float
    usd_per_million_output_tokens: float | None
    command: str


@dataclass(frozen=True, kw_only=True)
class Ranking:
    """JSON ``gpu_ranking``: the requirement, the prices used, the rows, and how many
    candidates were planned and how many met it."""

    model: str
    max_model_len: int
    concurrency: int
    workload: str
    prices: PriceTable
    rows: list[Candidate]
    planned: int
    met: int
    unpriced: list[str] = field(default_factory=list)


def _splits(count: int, pp: int) -> list[tuple[int, int]]:
    per_stage = count // pp if count % pp == 0 else 0
    return [(tp, per_stage // tp) for tp in range(1, per_stage + 1) if per_stage % tp == 0]


def rank_gpus(
    dep: Deployment,
    *,
    concurrency: int | None,
    workload: Workload | None,
    prices: PriceTable,
    counts: tuple[int, ...] = COUNTS,
) -> Ranking:
    """Plan ``dep``'s model and settings on every priced catalog GPU x count x layout and rank
    those that meet the requirement (see the module docstring). ``dep.gpu`` is ignored."""
    from planner.advise import saturated, synthetic_workload
    from planner.simulate.compare import simulate_model

    s = dep.settings
    moe = bool(num_experts_of(dep.spec.config, dep.spec.name))
    need = max(concurrency or 1, 1)
    by_name = {g.name: g for g in GPUS}
    unpriced = [g.name for g in GPUS if g.name not in prices.usd_per_hour]
    length: int | None = s.max_model_len
    work_name = ""
    planned = 0
    met: list[Candidate] = []
    sims: dict[tuple[str, int, int], float] = {}
    for name, price in prices.usd_per_hour.items():
        gpu = by_name.get(name)
        if gpu is None:
            continue
        for count in counts:
            for tp, dp in _splits(count, s.pp):
                per_rank = math.ceil(need / dp)
                ep = s.enable_expert_parallel or (moe and dp > 1)
                try:
                    d = dep.on(gpu).with_settings(
                        tp=tp, dp=dp, enable_expert_parallel=ep, max_num_seqs=per_rank
                    )
                    p = plan(d, PlanOptions(grid_lens=(), batch_sizes=()))
                except (DoesNotFitError, UsageError):
                    continue
                except KvplanError:
                    continue
                planned += 1
                if p.outcome == WONT_START:
                    continue
                running = dp * p.worst_case_running
                if running < need:
                    continue
                max_len = p.estimate.max_model_len
                length = length or max_len
                at = d.with_settings(max_model_len=max_len)
                if workload is not None:
                    work = workload
                else:
                    work = synthetic_workload(
                        min(DEFAULT_PROMPT, max(max_len // 2, 1)),
                        min(DEFAULT_OUTPUT, max(max_len // 4, 1)),
                        max_len,
                    )
                work_name = work_name or work.name
                sat = saturated(work)
                sat = replace(sat, requests=sat.requests[:REPLAYED])
                sim_key = (name, tp, dp)
                if sim_key not in sims:
                    sims[sim_key] = simulate_model(at, sat).runs[0].result.output_tokens_per_s
                tps = sims[sim_key]
                usd = round(price * count, 4)
                per_m = round(usd / (tps * 3600) * 1e6, 4) if tps > 0 else None
                met.append(
                    Candidate(
                        gpu=name,
                        gpus=count,
                        tp=tp,
                        dp=dp,
                        expert_parallel=ep,
                        max_num_seqs=per_rank,
                        worst_case_running=running,
                        kv_cache_size_tokens=dp * max(p.vllm.kv_cache_size_tokens, 0),
                        usd_per_hour=usd,
                        output_tokens_per_s=round(tps, 1),
                        usd_per_million_output_tokens=per_m,
                        command=p.commands.get("vllm", ""),
                    )
                )
    best: dict[tuple[str, int], Candidate] = {}
    for c in met:
        key = (c.gpu, c.gpus)
        if key not in best or _per_token(c) < _per_token(best[key]):
            best[key] = c
    rows = sorted(best.values(), key=lambda c: (c.usd_per_hour, _per_token(c), c.gpu))
    return Ranking(
        model=dep.spec.name,
        max_model_len=length or 0,
        concurrency=need,
        workload=work_name,
        prices=prices,
        rows=rows,
        planned=planned,
        met=len(met),
        unpriced=unpriced,
    )


def _per_token(c: Candidate) -> float:
    v = c.usd_per_million_output_tokens
    return v if v is not None else math.inf


def as_json(r: Ranking) -> dict[str, Any]:
    return {
        "model": r.model,
        "requirement": {"max_model_len": r.max_model_len, "concurrency": r.concurrency},
        "workload": r.workload,
        "prices": {
            "date": r.prices.date,
            "sources": r.prices.sources,
            "file": r.prices.source,
            "usd_per_hour": r.prices.usd_per_hour,
        },
        "planned": r.planned,
        "met": r.met,
        "unpriced_gpus": r.unpriced,
        "rows": [asdict(c) for c in r.rows],
    }
