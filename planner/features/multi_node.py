"""Serving over several nodes (``--nodes`` x ``--gpus-per-node``): one ``vllm serve`` command
per node (:func:`planner.cluster.node_commands`)."""

from __future__ import annotations

from planner.cluster import node_commands
from planner.features.record import FeatureRecord, PlanContext

NAME = "multi_node"


def active(ctx: PlanContext) -> bool:
    return ctx.nodes > 1 and bool(ctx.gpus_per_node)


def contribute(ctx: PlanContext) -> FeatureRecord:
    assert ctx.gpus_per_node is not None
    commands = node_commands(ctx.vllm_command, ctx.at_length, ctx.nodes, ctx.gpus_per_node)
    return FeatureRecord(name=NAME, plan_fields={"node_commands": commands})
