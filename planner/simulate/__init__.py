"""``kvplan simulate``: replay a workload over vLLM's paged KV-block pool, one stage a module.

- :mod:`~planner.simulate.workload`: the requests, from a JSONL trace or a seeded YAML spec;
- :mod:`~planner.simulate.engine`: the scheduler and block pool replaying them
  (:func:`simulate`, one :class:`SimConfig` -> one :class:`SimResult`);
- :mod:`~planner.simulate.cluster`: data-parallel ranks, each an engine, and vLLM's load
  balancer dispatching requests to them (``SimConfig.data_parallel_size``);
- :mod:`~planner.simulate.roofline`: the bare roofline bound of a step (:class:`Roofline`);
- :mod:`~planner.simulate.clock`: how long each scheduler step takes, the roofline plus the
  terms real engines pay (:class:`~planner.simulate.clock.StepModel`), and fitted profiles;
- :mod:`~planner.simulate.calibrate`: ``--calibrate``, fitting those terms to a
  ``vllm bench serve --save-result`` file;
- :mod:`~planner.simulate.compare`: the model-level driver, one replay per variant of the serve
  settings, side by side, and the best for a goal (:func:`simulate_model` -> :class:`SimReport`).

This module only re-exports what callers use. Importing it loads the modules above, all but
:mod:`~planner.simulate.cluster` (the first data-parallel replay loads it); they import
nothing beyond the standard library and the planner modules ``kvplan estimate`` loads
anyway; keep it so (commands import the package lazily, when they simulate). Limits such as
``MAX_REQUESTS`` are not re-exported: patch them where the code reads them
(``planner.simulate.trace.MAX_REQUESTS`` for a trace).
"""

from __future__ import annotations

# first: it sends the compiled modules' imports to their sources where the build is stale
from planner.simulate import fast
from planner.simulate.compare import (
    SettingRun,
    SimReport,
    build_settings,
    pool_for_gpu,
    simulate_model,
)
from planner.simulate.engine import BlockLayout, Percentiles, SimConfig, SimResult
from planner.simulate.roofline import ModelParams, Roofline, estimate_params, roofline_for
from planner.simulate.run import simulate
from planner.simulate.spec import (
    Arrival,
    Empirical,
    LogNormal,
    WorkloadSpec,
    generate,
    parse_distribution,
    parse_spec,
)
from planner.simulate.trace import load_workload, parse_trace, trace_lines
from planner.simulate.workload import Request, Workload

__all__ = [
    "Arrival",
    "BlockLayout",
    "Empirical",
    "LogNormal",
    "ModelParams",
    "Percentiles",
    "Request",
    "Roofline",
    "SettingRun",
    "SimConfig",
    "SimReport",
    "SimResult",
    "Workload",
    "WorkloadSpec",
    "build_settings",
    "estimate_params",
    "generate",
    "load_workload",
    "parse_distribution",
    "parse_spec",
    "parse_trace",
    "pool_for_gpu",
    "roofline_for",
    "simulate",
    "simulate_model",
    "trace_lines",
]

fast.register_pickles()  # the compiled modules' frozen dataclasses (planner.simulate.fast)
