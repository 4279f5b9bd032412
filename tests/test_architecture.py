"""The layers hold: import-linter's contracts (pyproject.toml), no private name imported across
modules, and no import cycle beyond the two left to remove."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_import_linter_contracts_are_kept() -> None:
    pytest.importorskip("importlinter")
    exe = Path(sys.executable).parent / "lint-imports"
    command = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 4 kept, 0 broken." in done.stdout


def _private_imports() -> list[str]:
    found = []
    for path in sorted([*(ROOT / "planner").rglob("*.py"), *(ROOT / "probes").rglob("*.py")]):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if not node.module.startswith(("planner", "probes")):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {alias.name}")
    return found


def test_no_private_name_is_imported_across_modules() -> None:
    assert _private_imports() == []


# No cycles in the import graph (runtime imports, TYPE_CHECKING left out): the last two went
# when the layer shapes weights and LoRA both read moved to planner/layer_shapes.py and the
# replay entry (one engine or DP ranks) to planner/simulate/run.py.
KNOWN_CYCLES: list[list[str]] = []


def test_no_import_cycle_beyond_the_known_two() -> None:
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph(
        "planner", include_external_packages=False, exclude_type_checking_imports=True
    )
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                cycles.append(sorted(part))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert sorted(cycles) == KNOWN_CYCLES
