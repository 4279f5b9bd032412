"""`kvplan estimate MODEL --gpu any`: catalog GPUs x counts x layouts that meet the
requirement, cheapest first; prices from the shipped table or --prices FILE."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from planner.cli import app

ENV = {"HF_HUB_OFFLINE": "1", "COLUMNS": "80", "NO_COLOR": "1"}
PRICES = Path(__file__).parents[1] / "planner" / "data" / "prices.json"


def run(args: list[str]) -> Any:
    return CliRunner().invoke(app, args, env=ENV)


def ranked(args: list[str]) -> dict[str, Any]:
    result = run(["estimate", *args, "--gpu", "any", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["gpu_ranking"]  # type: ignore[no-any-return]


def _prices(tmp_path: Path, table: dict[str, float]) -> str:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"date": "2026-01-01", "prices": table}))
    return str(path)


def test_the_shipped_table_has_a_date_and_sources() -> None:
    data = json.loads(PRICES.read_text())
    assert data["date"] and data["sources"]
    assert all(v["usd_per_hour"] > 0 and v["source"] for v in data["prices"].values())
    # Runpod lists per-second rates: the table is each x 3,600, e.g. H100 PRO $0.00116/s
    assert data["prices"]["h100"]["usd_per_hour"] == round(0.00116 * 3600, 4)


def test_rows_meet_the_requirement_and_their_prices_are_the_tables(tmp_path: Path) -> None:
    table = {"h100": 2.0, "l40s": 1.0, "rtx-4090": 0.5}
    r = ranked(
        ["qwen2.5-7b", "--max-model-len", "8192", "--max-num-seqs", "32"]
        + ["--prices", _prices(tmp_path, table)]
    )
    assert r["requirement"] == {"max_model_len": 8192, "concurrency": 32}
    rows = r["rows"]
    assert rows and {row["gpu"] for row in rows} <= set(table)
    for row in rows:
        assert row["usd_per_hour"] == round(table[row["gpu"]] * row["gpus"], 4)
        per_m = row["usd_per_hour"] / (row["output_tokens_per_s"] * 3600) * 1e6
        assert math.isclose(row["usd_per_million_output_tokens"], per_m, rel_tol=1e-3)
        assert row["gpus"] == row["tp"] * row["dp"]
        assert row["worst_case_running"] >= 32
        assert row["max_num_seqs"] == math.ceil(32 / row["dp"])
    hourly = [row["usd_per_hour"] for row in rows]
    assert hourly == sorted(hourly)
    # one GPU x count once
    assert len({(row["gpu"], row["gpus"]) for row in rows}) == len(rows)


def test_each_row_is_what_estimate_says_on_that_gpu(tmp_path: Path) -> None:
    r = ranked(
        ["qwen2.5-7b", "--max-model-len", "8192", "--max-num-seqs", "32"]
        + ["--prices", _prices(tmp_path, {"l40s": 1.0})]
    )
    for row in r["rows"][:2]:
        flags = ["--gpu", "l40s", "--tp", str(row["tp"]), "--dp", str(row["dp"])]
        seqs = ["--max-model-len", "8192", "--max-num-seqs", str(row["max_num_seqs"])]
        result = run(["estimate", "qwen2.5-7b", *flags, *seqs, "--json"])
        assert result.exit_code == 0, result.output
        plan = json.loads(result.stdout)
        assert plan["outcome"] == "fits_at_worst_case"
        assert plan["commands"]["vllm"] == row["command"]


def test_a_gpu_the_weights_do_not_fit_is_not_ranked(tmp_path: Path) -> None:
    """Llama-3.1-70B in bf16 is 70.6e9 parameters x 2 B = 131.5 GiB: more than one H200's
    139.80 GiB x 0.92 = 128.6 GiB, so H200 x 1 is absent; x 2 (65.7 GiB a GPU) is there."""
    r = ranked(
        ["llama-3.1-70b", "--max-model-len", "8192", "--max-num-seqs", "1"]
        + ["--prices", _prices(tmp_path, {"h200": 3.0})]
    )
    counts = {row["gpus"] for row in r["rows"]}
    assert 1 not in counts
    assert 2 in counts


def test_text_output_fits_80_columns_and_names_its_prices(tmp_path: Path) -> None:
    args = ["estimate", "qwen2.5-7b", "--gpu", "any", "--max-model-len", "8192"]
    result = run([*args, "--max-num-seqs", "8"])
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert json.loads(PRICES.read_text())["date"] in result.stdout
    assert "per million output tokens" in result.stdout


def test_bad_prices_file_is_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"prices": {"h100": "cheap"}}')
    result = run(["estimate", "qwen2.5-7b", "--gpu", "any", "--prices", str(path)])
    assert result.exit_code == 2
    assert "--prices" in result.stderr
    path.write_text('{"prices": {"h999": 1.0}}')
    assert run(["estimate", "qwen2.5-7b", "--gpu", "any", "--prices", str(path)]).exit_code == 2
    assert run(["estimate", "qwen2.5-7b", "--gpu", "h100", "--prices", str(path)]).exit_code == 2


def test_a_requirement_nothing_meets_is_exit_1(tmp_path: Path) -> None:
    args = ["estimate", "llama-3.1-70b", "--gpu", "any", "--max-model-len", "131072"]
    prices = _prices(tmp_path, {"l4": 1.0})
    result = run([*args, "--max-num-seqs", "64", "--prices", prices])
    assert result.exit_code == 1
    assert "Error:" in result.stderr and "--max-model-len" in result.stderr
