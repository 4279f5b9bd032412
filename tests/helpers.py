"""Builders the tests share: a Deployment or a Plan from a model name, a GPU name and flags."""

from __future__ import annotations

import shlex
from dataclasses import fields
from typing import Any

from planner.deployment import Deployment, Gpu, ServeSettings
from planner.gpus import get_gpu
from planner.model.load import LoadedModel, load_model, with_headers
from planner.model.specs import ModelSpec
from planner.recommend import Plan, PlanOptions, plan

_OPTIONS = {f.name for f in fields(PlanOptions)}


def settings(**flags: Any) -> ServeSettings:
    """ServeSettings from ``vllm serve``-named flags (``prefix_caching`` for
    ``enable_prefix_caching``; ``max_model_len=-1`` for auto-fit)."""
    if "prefix_caching" in flags:
        flags["enable_prefix_caching"] = flags.pop("prefix_caching")
    if flags.get("max_model_len") == -1:
        flags["max_model_len"], flags["auto_fit_max_model_len"] = None, True
    return ServeSettings(**flags)


def deployment(
    model: str | ModelSpec | LoadedModel, gpu: str | Gpu | None = None, **flags: Any
) -> Deployment:
    """A Deployment of a catalog model (or a spec) on a catalog GPU (or a Gpu, or none)."""
    if isinstance(model, str):
        model = load_model(model)
    elif isinstance(model, ModelSpec):
        model = with_headers(model)
    return Deployment(
        model=model, gpu=get_gpu(gpu) if isinstance(gpu, str) else gpu, settings=settings(**flags)
    )


def plan_for(
    model: str | ModelSpec | LoadedModel, gpu: str | Gpu | None = None, **kwargs: Any
) -> Plan:
    """:func:`planner.recommend.plan` for ``model`` on ``gpu``; keyword arguments are serve
    flags or :class:`PlanOptions` fields."""
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in _OPTIONS}
    return plan(deployment(model, gpu, **kwargs), PlanOptions(**options))


def parse_command(command: str) -> dict[str, str]:
    """Parse an engine command back into {flag: value} (used to check the emitted commands)."""
    words = shlex.split(command)
    out: dict[str, str] = {}
    if words[:2] == ["vllm", "serve"]:
        out["model"], rest = words[2], words[3:]
    elif words[:3] == ["python", "-m", "sglang.launch_server"]:
        rest = words[3:]
    elif words[:1] == ["trtllm-serve"]:
        out["model"], rest = words[1], words[2:]
    else:
        raise ValueError(f"not an engine command: {command}")
    it = iter(rest)
    for flag in it:
        if not flag.startswith("--"):
            raise ValueError(f"unexpected argument {flag!r}")
        out[flag[2:]] = next(it)
    if "model-path" in out:
        out["model"] = out.pop("model-path")
    return out
