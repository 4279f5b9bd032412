"""Speculative decoding (``--speculative-config``): the drafter's weights and KV layers on the
last pipeline stage (:mod:`planner.speculative`, :func:`planner.weights.for_deployment`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.features.record import FeatureRecord, PlanContext, flags_of
from planner.kv_layout import estimate
from planner.weights import for_deployment

NAME = "speculative"


@dataclass(frozen=True, kw_only=True)
class SpeculativeFigures:
    """JSON ``speculative``: the drafter's share of one GPU (on the last PP stage)."""

    method: str
    num_speculative_tokens: int
    num_lookahead_tokens: int
    draft_weights_bytes: int
    draft_kv_bytes_per_token: int
    draft_kv_layers: int


def active(ctx: PlanContext) -> bool:
    return ctx.dep.settings.speculative is not None


def contribute(ctx: PlanContext) -> FeatureRecord:
    spec_config = ctx.dep.settings.speculative
    assert spec_config is not None
    plain = ctx.dep.with_settings(speculative=None)
    at = ctx.at_length
    bare = estimate(at.spec, replace(at.settings, speculative=None), at.gpu, batch_sizes=())
    est = ctx.est
    figures = SpeculativeFigures(
        method=spec_config.method,
        num_speculative_tokens=spec_config.num_speculative_tokens,
        num_lookahead_tokens=spec_config.num_lookahead_tokens,
        draft_weights_bytes=ctx.weights.bytes_per_rank - for_deployment(plain).bytes_per_rank,
        draft_kv_bytes_per_token=est.kv_bytes_per_token - bare.kv_bytes_per_token,
        draft_kv_layers=sum(g.num_layers for g in est.layer_groups)
        - sum(g.num_layers for g in bare.layer_groups),
    )
    return FeatureRecord(
        name=NAME,
        weights_bytes=figures.draft_weights_bytes,
        kv_bytes_per_token=figures.draft_kv_bytes_per_token,
        flags=flags_of(ctx, "speculative"),
        plan_fields={"speculative": figures},
    )
