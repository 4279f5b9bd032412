"""The record a feature contributes to a plan, and the fold over the records
(:mod:`planner.features`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from planner.budget import VllmCapacity
from planner.config.fields import SETTINGS
from planner.config.setting import Concern
from planner.deployment import Deployment, ServeSettings
from planner.kv_layout import KVEstimate
from planner.weights import Weights

Capacity = Callable[[Deployment, KVEstimate, Weights], VllmCapacity]
DEFAULTS = ServeSettings()  # what a setting is when the user gave none (flags_of)


@dataclass(frozen=True, kw_only=True)
class PlanContext:
    """What a feature sees of the plan being made.

    Attributes:
        dep: the deployment as given (with an adapter's target modules resolved).
        at_length: ``dep`` at the planned ``max_model_len``.
        est, cap, weights: its KV estimate, vLLM budget and weights per GPU.
        capacity: plans another deployment's budget as ``plan`` does (for levers).
        vllm_command: the ``vllm serve`` command the plan emits.
        nodes, gpus_per_node: ``--nodes`` x ``--gpus-per-node`` (1 and None on one node).
    """

    dep: Deployment
    at_length: Deployment
    est: KVEstimate
    cap: VllmCapacity
    weights: Weights
    capacity: Capacity
    vllm_command: str
    nodes: int = 1
    gpus_per_node: int | None = None


@dataclass(frozen=True, kw_only=True)
class FeatureRecord:
    """What one feature adds to a plan (JSON ``features[]``, without ``plan_fields``).

    Attributes:
        name: the feature's name (its module's ``NAME``).
        weights_bytes: its share of ``weights_bytes`` per GPU (negative: weights it moves off).
        non_torch_bytes, activation_bytes: its share of those budget terms per GPU.
        kv_bytes_per_token: KV bytes per token its own layers add.
        host_ram: its parts of ``host_ram_bytes`` (:class:`planner.offload.HostRam` fields).
        flags: the ``vllm serve`` flags of its settings, as the user set them.
        notes, warnings: printed with the plan's own.
        plan_fields: the :class:`planner.recommend.Plan` fields it fills (its figures).
    """

    name: str
    weights_bytes: int = 0
    non_torch_bytes: int = 0
    activation_bytes: int = 0
    kv_bytes_per_token: int = 0
    host_ram: Mapping[str, int] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    plan_fields: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON ``features[]``: every figure of the record; its plan fields have their own
        keys in the plan's JSON."""
        return {
            "name": self.name,
            "weights_bytes": self.weights_bytes,
            "non_torch_bytes": self.non_torch_bytes,
            "activation_bytes": self.activation_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "host_ram_bytes": dict(self.host_ram),
            "flags": list(self.flags),
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }


class Feature(Protocol):
    """A feature module: ``NAME``, ``active(ctx)`` and ``contribute(ctx)``."""

    NAME: str

    def active(self, ctx: PlanContext) -> bool: ...

    def contribute(self, ctx: PlanContext) -> FeatureRecord: ...


def flags_of(ctx: PlanContext, *concerns: Concern, names: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The ``vllm serve`` flags of the settings of ``concerns`` (and ``names``) that the user
    set away from their defaults, as the declarations spell them."""
    s, default = ctx.dep.settings, DEFAULTS
    out: list[str] = []
    for setting in SETTINGS:
        flag = setting.engines["vllm"]
        if flag is None or (setting.concern not in concerns and setting.name not in names):
            continue
        value = getattr(s, setting.name, None)
        if value is not None and value != getattr(default, setting.name, None):
            out.append(flag)
    return tuple(out)


@dataclass(frozen=True)
class Folded:
    """The records of the active features, and what they fill in a plan together."""

    records: tuple[FeatureRecord, ...]

    @property
    def notes(self) -> list[str]:
        return [n for r in self.records for n in r.notes]

    @property
    def warnings(self) -> list[str]:
        return [w for r in self.records for w in r.warnings]

    @property
    def host_ram(self) -> dict[str, int]:
        parts: dict[str, int] = {}
        for r in self.records:
            for part, size in r.host_ram.items():
                parts[part] = parts.get(part, 0) + size
        return parts

    @property
    def plan_fields(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for r in self.records:
            clash = merged.keys() & r.plan_fields.keys()
            if clash:
                raise AssertionError(f"features {r.name} and another both fill {sorted(clash)}")
            merged.update(r.plan_fields)
        return merged


def fold_records(ctx: PlanContext, features: tuple[Any, ...]) -> Folded:
    """Every active feature's record, in the order given."""
    return Folded(tuple(f.contribute(ctx) for f in features if f.active(ctx)))
