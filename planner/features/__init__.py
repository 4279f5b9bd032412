"""The features a plan folds over: each is one module contributing through one record.

A feature (LoRA, offloading weights to the CPU, the CPU KV tier, expert parallelism, a
speculative drafter, a multimodal tower, multi-node serving) is active or not for a deployment;
an active one says what it adds to the plan in a :class:`FeatureRecord`: its share of the
memory terms (weights, non-torch, activation, KV per token, host RAM), the serve flags that
turn it on, its notes and warnings, and the :class:`planner.recommend.Plan` fields it fills.
:func:`planner.recommend.plan` folds over :data:`FEATURES` in order; adding a feature is one
module here with ``NAME``, ``active`` and ``contribute``, and its name in :data:`FEATURES`.

The memory terms are those the budget already counted (:mod:`planner.weights`,
:mod:`planner.budget`): a record names the feature's share of them, term by term, so that
``estimate --json`` (``features[]``) shows what each feature costs.
"""

from __future__ import annotations

from typing import Any

from planner.features import (
    expert_parallel,
    kv_offload,
    lora,
    measured_pool,
    multi_node,
    multimodal,
    speculative,
    weight_offload,
)
from planner.features.record import (
    Capacity,
    Feature,
    FeatureRecord,
    Folded,
    PlanContext,
    flags_of,
    fold_records,
)

__all__ = [
    "FEATURES",
    "Capacity",
    "Feature",
    "FeatureRecord",
    "Folded",
    "PlanContext",
    "flags_of",
    "fold",
]

# the order the plan shows their notes in
FEATURES: tuple[Any, ...] = (
    expert_parallel,
    speculative,
    multimodal,
    lora,
    weight_offload,
    kv_offload,
    multi_node,
    measured_pool,
)


def fold(ctx: PlanContext, features: tuple[Any, ...] | None = None) -> Folded:
    """Every active feature's record, in :data:`FEATURES` order (or ``features``')."""
    return fold_records(ctx, FEATURES if features is None else features)
