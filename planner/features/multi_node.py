"""Serving over several nodes (``--nodes`` x ``--gpus-per-node``): one ``vllm serve`` command
per node (:func:`planner.cluster.node_commands`)."""

from __future__ import annotations

from planner.cluster import node_commands
from planner.containers import rocm_node_docker_command
from planner.features.record import FeatureRecord, PlanContext
from planner.vllm_rules import NEWEST_VERSION

NAME = "multi_node"


def active(ctx: PlanContext) -> bool:
    return ctx.nodes > 1 and bool(ctx.gpus_per_node)


def contribute(ctx: PlanContext) -> FeatureRecord:
    assert ctx.gpus_per_node is not None
    commands = node_commands(ctx.vllm_command, ctx.at_length, ctx.nodes, ctx.gpus_per_node)
    version = ctx.dep.settings.vllm_version or NEWEST_VERSION
    dockers = [rocm_node_docker_command(c, ctx.dep.gpu, version) for c in commands]
    fields: dict[str, object] = {"node_commands": commands}
    if all(dockers):  # an AMD GPU: each node's command in vLLM's ROCm image
        fields["node_docker_commands"] = dockers
    return FeatureRecord(name=NAME, plan_fields=fields)
