"""Optional speed-ups, never other results: numpy where installed, the compiled event loop.

kvplan does not depend on numpy. Where it is installed, large replays sort their latency
columns with it and large generated workloads draw their random numbers with it
(:mod:`planner.simulate.spec`): the same floats either way, only sooner (sorting moves floats,
it computes none; the draws are CPython's generator reproduced exactly).

Nor does it need a compiler. ``python tools/build_fast.py`` compiles the modules in
:data:`COMPILED` (the engine's event loop and the step-time model it calls) with mypyc, in
place, as C extensions beside their sources; Python then imports the extension instead of the
``.py``. Pure Python stays the default and the fallback: :func:`use_compiled` (run by
``planner/simulate/__init__.py``, before any of them is imported) sends their imports to the
sources when ``KVPLAN_PURE_PYTHON=1`` is set, or when a source changed since the build (its
SHA-256 is not the one the build recorded in :data:`STAMP`), so a stale build never runs. The
compiled code does the same float operations in the same order (C doubles, no fused
multiply-adds: the build passes ``-ffp-contract=off``), so the same results to the last bit
(tests/test_sim_compiled.py). One difference is left, out of reach: compiled, ``int / int``
converts both to doubles before dividing, which is CPython's correctly rounded quotient only
while they are below 2**53; the quotients of these modules are of counts far below that.
Compiled, ``Roofline``, ``StepModel`` and ``ModelParams`` are native classes: no instance
``__dict__`` (``dataclasses.fields``, ``asdict`` and ``replace`` work, and
:func:`register_pickles` pickles them); the engine's dataclasses stay plain
(:func:`python_class`).
"""

from __future__ import annotations

import copyreg
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from functools import cache
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent
# the modules tools/build_fast.py compiles, and the shared library mypyc builds them into
COMPILED = ("planner.simulate.roofline", "planner.simulate.clock", "planner.simulate.engine")
GROUP = "planner.simulate._fast"
STAMP = HERE / "_fast_build.json"  # what the build compiled: {module: SHA-256 of its source}
PURE_ENV = "KVPLAN_PURE_PYTHON"

_C = TypeVar("_C", bound=type)


@cache
def numpy_module() -> Any:
    """The numpy module, or None where it is not installed."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def python_class(cls: _C) -> _C:
    """Keep ``cls`` a plain Python class where its module is compiled (instances with a
    ``__dict__``, as without the build): mypyc compiles a class decorated with anything but its
    own decorators as an ordinary class. For a public dataclass holding no closures
    (``planner.simulate.engine``'s)."""
    return cls


def _rebuild(cls: type, fields: dict[str, Any]) -> Any:
    return cls(**fields)


def _reduce(obj: Any) -> tuple[Any, ...]:
    """Pickle a frozen dataclass by its fields, rebuilt through its ``__init__``."""
    return _rebuild, (type(obj), {f.name: getattr(obj, f.name) for f in fields(obj) if f.init})


def register_pickles() -> None:
    """Let the frozen dataclasses of the compiled modules be pickled (the parallel replays
    send configs and results between processes): mypyc compiles them to native classes whose
    default unpickling sets their fields one by one, which a frozen dataclass refuses. Their
    fields go through their ``__init__`` instead, as they were made."""
    for name in compiled_modules():
        for obj in vars(sys.modules[name]).values():
            if (
                isinstance(obj, type)
                and obj.__module__ == name
                and is_dataclass(obj)
                and obj.__dataclass_params__.frozen  # type: ignore[attr-defined]
                and not obj.__dictoffset__  # native (a plain class's instances have a dict)
            ):
                copyreg.pickle(obj, _reduce)


def source_of(module: str) -> Path:
    """The ``.py`` file of ``module``, one of :data:`COMPILED`."""
    return HERE / (module.rsplit(".", 1)[1] + ".py")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def built(module: str) -> bool:
    """Whether a compiled extension of ``module`` lies beside its source."""
    src = source_of(module)
    return any(src.with_suffix(suffix).exists() for suffix in EXTENSION_SUFFIXES)


def fresh(module: str) -> bool:
    """Whether ``module`` is built from its source as it is now (so imported compiled)."""
    if not built(module):
        return False
    try:
        stamp = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get(module) == digest(source_of(module))


class _FromSource(MetaPathFinder):
    """Imports the listed modules from their ``.py`` sources, past their extensions."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self.names:
            return None
        return importlib.util.spec_from_file_location(fullname, source_of(fullname))


def use_compiled() -> list[str]:
    """Import :data:`COMPILED` compiled where all of them were built from their sources as they
    are (and ``KVPLAN_PURE_PYTHON`` is not ``1``), else all from their sources: all or none,
    since a class compiled in one (``Roofline``) cannot be the base of a class interpreted in
    another (``StepModel``). Returns the built ones sent to their sources."""
    present = [m for m in COMPILED if built(m)]
    if not present:
        return []
    fine = os.environ.get(PURE_ENV) != "1" and all(fresh(m) for m in COMPILED)
    if fine:
        return []
    if not any(isinstance(f, _FromSource) for f in sys.meta_path):
        sys.meta_path.insert(0, _FromSource(present))
    return present


def compiled_modules() -> list[str]:
    """Those of :data:`COMPILED` imported as compiled extensions in this process."""
    out = []
    for name in COMPILED:
        mod = sys.modules.get(name)
        if mod is not None and str(getattr(mod, "__file__", "")).endswith(
            tuple(EXTENSION_SUFFIXES)
        ):
            out.append(name)
    return out


# at import: planner/simulate/__init__.py imports this module first, before any of COMPILED
use_compiled()
