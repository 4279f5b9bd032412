"""What each command imports, in a fresh process: its own views and nothing heavy it does not use.

Not timed (benchmarks/cold_start.py times them): a module that is never imported costs nothing,
so these pin the cold start without flaky clocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "tests/fixtures/configs/meta-llama--Llama-3.1-8B/config.json"
HEAVY = {"torch", "transformers", "matplotlib"}
VIEWS = {"estimate", "catalog", "check", "diagnose", "simulate", "verify"}

# kvplan's console entry point, then the names of the modules it imported, to a file
RUN = """
import json, os, sys
from planner.cli import main
sys.argv = ["kvplan", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
finally:
    with open(os.environ["KVPLAN_TEST_MODULES"], "w") as f:
        json.dump(sorted(sys.modules), f)
"""


def imported(tmp_path: Path, *argv: str) -> set[str]:
    """The modules ``kvplan argv`` imports, run from the repository root in a new process."""
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if k not in ("KVPLAN_DEBUG", "HF_TOKEN")}
    path = [str(ROOT), env.get("PYTHONPATH", "")]  # this checkout's planner
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, path)),
        HF_HUB_OFFLINE="1",
        KVPLAN_TEST_MODULES=str(out),
    )
    subprocess.run(
        [sys.executable, "-c", RUN, *argv],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return set(json.loads(out.read_text()))


def views(modules: set[str]) -> set[str]:
    # a view is a module or package under planner.render (estimate.data is estimate's)
    return {
        m.removeprefix("planner.render.").split(".")[0]
        for m in modules
        if m.startswith("planner.render.")
    }


def test_help_imports_no_view_and_nothing_heavy(tmp_path: Path) -> None:
    modules = imported(tmp_path, "--help")
    assert "planner.cli" in modules
    assert not (HEAVY | {"huggingface_hub", "yaml"}) & modules
    assert not {m for m in modules if m.startswith(("planner.render", "probes", "rich"))}


@pytest.mark.parametrize(
    ("view", "argv"),
    [
        ("estimate", ["estimate", CONFIG, "--json"]),
        ("estimate", ["estimate", CONFIG, "--gpu", "h100"]),
        ("catalog", ["gpus", "--json"]),
        ("catalog", ["models"]),
        ("check", ["check", "examples/plans.yaml", "--format", "json"]),
        (
            "diagnose",
            ["diagnose", "tests/fixtures/logs/vllm-v1-llama8b-h100.log", "--model", CONFIG],
        ),
        (
            "simulate",
            ["simulate", CONFIG, "--gpu", "h100", "-w", "examples/workloads/chat.yaml"]
            + ["--num-requests", "20", "--json"],
        ),
        # flags are checked before torch is imported: a bad one stops it there
        ("verify", ["verify", CONFIG]),
    ],
)
def test_a_command_imports_only_its_own_views(tmp_path: Path, view: str, argv: list[str]) -> None:
    modules = imported(tmp_path, *argv)
    assert views(modules) == {"_output", view}
    assert not HEAVY & modules, sorted(HEAVY & modules)


def test_estimate_imports_no_other_command_s_library(tmp_path: Path) -> None:
    modules = imported(tmp_path, "estimate", CONFIG, "--json")
    # the libraries of check, diagnose and simulate (and anything inside those packages)
    others = ("planner.check", "planner.diagnose", "planner.simulate")
    loaded = {m for m in modules if m in others or m.startswith(tuple(o + "." for o in others))}
    assert not loaded, sorted(loaded)
    assert not {m for m in modules if m.startswith("probes")}
    # JSON needs no console: rich is imported where a table or a warning is drawn
    assert not {m for m in modules if m.startswith("rich")}
