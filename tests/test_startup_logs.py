"""kvplan's budget against public vLLM start-up logs (``tests/data/vllm_startups.json``, each
record citing its source): the logged "Available KV cache memory" must fall inside the range
kvplan states for its estimate (the measured spread of the activation, non-torch and
CUDA-graph terms, ``planner.budget.estimate_ranges``). The point figures and their error are
reported by ``benchmarks/budget_accuracy.py``, not asserted here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = json.loads((ROOT / "tests" / "data" / "vllm_startups.json").read_text())


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "budget_accuracy", ROOT / "benchmarks" / "budget_accuracy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


def test_every_record_cites_its_source() -> None:
    assert len(RECORDS) >= 20
    for rec in RECORDS:
        assert rec["source"].startswith("https://"), rec["id"]
        assert rec["set"] in ("calibration", "held_out")


@pytest.mark.parametrize("rec", RECORDS, ids=[r["id"] for r in RECORDS])
def test_the_logged_kv_memory_is_inside_the_stated_range(rec: dict[str, Any]) -> None:
    row = BENCH.predict(rec)
    if row["skipped"]:
        pytest.skip(row["skipped"])  # no total, or a quantized checkpoint without its config
    if not row["release_known"]:
        pytest.skip("release not in the log: not a regression target (reported only)")
    assert row["in_range"], (
        f"{rec['source']}: logged {row['logged_gib']} GiB outside kvplan's "
        f"{row['low_gib']}-{row['high_gib']} GiB (point {row['predicted_gib']})"
    )
