"""numpy where it is installed: an optional speed-up for big arrays, never other results.

kvplan does not depend on numpy. Where it is installed, large replays sort their latency
columns with it and large generated workloads draw their random numbers with it
(:mod:`planner.simulate.spec`): the same floats either way, only sooner (sorting moves floats,
it computes none; the draws are CPython's generator reproduced exactly)."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def numpy_module() -> Any:
    """The numpy module, or None where it is not installed."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy
