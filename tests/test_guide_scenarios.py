"""The field guide's scenarios (shared/field-guide-zh.txt) as tests: every expected
value is the guide's arithmetic, written out here, never kvplan's output pasted.

Covered elsewhere and not repeated: the four Qwen2.5-7B pairs through ``recommend.plan`` and
16,384 -> 8,192 doubling who runs at once (tests/test_worst_case_outcome.py), the 800-token prefix shared
by 100 requests (tests/test_recommend.py::test_prefix_sharing_saves_full_blocks and the
simulated one in tests/test_cli_simulate.py), fp8 caveats in estimate's plan notes on each GPU
kind (tests/test_worst_case_outcome.py::test_fp8_kv_always_comes_with_its_caveat).
"""

# ruff: noqa: E501  (expected lines stay whole, as the user reads them)

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.check import check_file
from planner.cli import app
from planner.gpus import custom_gpu
from planner.kv_layout import estimate
from planner.plan_types import QUEUES_AT_WORST_CASE
from tests.helpers import deployment, guide_plan, guide_pool_blocks, plan_for

runner = CliRunner()
GIB = 1 << 30
LOGS = Path(__file__).parent / "fixtures" / "logs"


# ------------------------------------------------------------ (a) the 7B MHA sizing (§2.2)


def test_a_7b_mha_model_caches_half_a_mebibyte_per_token() -> None:
    # Llama-2-7B: 32 layers, 32 attention heads and 32 KV heads (MHA), head_dim 128, fp16.
    # 2 (K, V) x 32 layers x 32 heads x 128 x 2 B = 524,288 B = 512 KiB per token
    per_token = 2 * 32 * 32 * 128 * 2
    assert per_token == 524_288 == 512 * 1024
    dep = deployment("llama-2-7b", max_model_len=4096)
    est = estimate(dep.spec, dep.settings, None, batch_sizes=(1, 16))
    assert (est.attention_type, est.num_kv_heads, est.num_attention_heads) == ("MHA", 32, 32)
    assert est.kv_bytes_per_token == per_token
    # "at 4,096 tokens one request is 2 GB": 4,096 x 512 KiB = 2 GiB (256 whole 16-token blocks)
    assert est.kv_bytes_per_sequence == 4096 * per_token == 2 * GIB
    # "with batch size 16, 32 GB is gone"
    sixteen = next(e for e in est.examples if e.batch == 16)
    assert sixteen.kv_bytes == 16 * 2 * GIB == 32 * GIB
    # the same figure from the command line's JSON
    result = runner.invoke(app, ["estimate", "llama-2-7b", "--max-model-len", "4096", "--json"])
    assert json.loads(result.stdout)["kv_bytes_per_token"] == per_token


# ------------------------------------ (b, c) Qwen2.5-7B-Instruct on a 24 GiB card (§5.1)

# 28 layers x 16 tokens x 4 KV heads x 128 x 2 (K, V) x 2 B = 917,504 B (896 KiB) per block.
# kvplan's budget at gpu_memory_utilization 0.9 gives a pool that depends on max_num_seqs (the
# sampler warm-up and the captured CUDA-graph sizes, tests/helpers.guide_pool_blocks): 7,877
# blocks at 64, 8,161 at 32, 8,303 at 16, one of them vLLM's null block. A request of L
# tokens takes L / 16 blocks.
PAIRS = [(4096, 64), (8192, 32), (8192, 64), (16384, 16)]


def running(length: int, seqs: int) -> int:
    """Requests of ``length`` tokens that fit the usable blocks at once, at most ``seqs``."""
    return min(seqs, (guide_pool_blocks(seqs) - 1) // (length // 16))


def test_the_guides_four_pairs_by_hand() -> None:
    # 7,844 // 256 = 30; 7,921 // 512 = 15; 7,844 // 512 = 15; 7,960 // 1,024 = 7: fewer
    # than max_num_seqs each time
    assert [running(n, s) for n, s in PAIRS] == [30, 15, 15, 7]


def test_grid_and_check_agree_on_the_guides_four_pairs(tmp_path: Path) -> None:
    p = guide_plan(
        max_model_len=8192,
        max_num_seqs=32,
        grid_lens=(4096, 8192, 16384),
    )
    cells = {(c.max_model_len, c.max_num_seqs): c for c in p.grid}
    entries = "".join(
        f"  - {{name: len{n}-seqs{s}, model: qwen2.5-7b-instruct, gpu_memory: 24GiB, "
        f"gpu_memory_utilization: 0.9, max_model_len: {n}, max_num_seqs: {s}}}\n"
        for n, s in PAIRS
    )
    plans = tmp_path / "guide.yaml"
    plans.write_text("deployments:\n" + entries)
    report = check_file(plans)
    # vLLM starts all four (one request of each length fits); each queues at worst case
    assert report.exit_code == 0
    for (n, s), row in zip(PAIRS, report.results, strict=True):
        cell = cells[(n, s)]
        assert row.figures is not None and row.figures.num_gpu_blocks == guide_pool_blocks(s)
        assert cell.num_gpu_blocks == guide_pool_blocks(s)
        assert (cell.outcome, cell.worst_case_running, cell.fits) == (
            QUEUES_AT_WORST_CASE,
            running(n, s),
            True,
        )
        assert (row.status, row.outcome, row.worst_case_running) == (
            "pass",
            QUEUES_AT_WORST_CASE,
            running(n, s),
        )
    result = runner.invoke(app, ["check", str(plans)])
    assert (
        f"kvplan check {plans}: 4 of 4 deployments start; 4 queue at worst case; 4 of 4 pass"
        in " ".join(result.stdout.split())
    )
    for n, s in PAIRS:
        assert f"queues {running(n, s)}/{s}" in result.stdout


def test_halving_the_length_doubles_the_worst_case_concurrency_in_check(tmp_path: Path) -> None:
    # 16,384 -> 8,192 tokens halves a request's blocks (1,024 -> 512): vLLM's "Maximum
    # concurrency" (pool tokens / max_model_len) doubles; the requests at once, its floor,
    # go 7,876 // 1,024 = 7 -> 7,876 // 512 = 15
    plans = tmp_path / "halve.yaml"
    plans.write_text(
        "deployments:\n"
        + "".join(
            f"  - {{name: len{n}, model: qwen2.5-7b-instruct, gpu_memory: 24GiB, "
            f"gpu_memory_utilization: 0.9, max_model_len: {n}, max_num_seqs: 64}}\n"
            for n in (16384, 8192)
        )
    )
    long, short = check_file(plans).results
    assert long.figures is not None and short.figures is not None
    assert long.figures.max_concurrency == pytest.approx(
        guide_pool_blocks(64) * 16 / 16384, abs=1e-4
    )
    assert short.figures.max_concurrency == pytest.approx(
        2 * long.figures.max_concurrency, abs=1e-3
    )
    assert (
        (long.worst_case_running, short.worst_case_running)
        == (7, 15)
        == (
            running(16384, 64),
            running(8192, 64),
        )
    )


# ------------------------------------------------------------ (d) block size 8/16/32 (§3.3)


@pytest.mark.parametrize("length", [4096, 8192, 16384])
def test_block_size_rows(length: int) -> None:
    # the last block of a request is on average half empty: (bs - 1) / 2 tokens wasted; the
    # block table holds ceil(length / bs) entries; against the default average request of
    # length / 2 tokens that is 100 x w / (length / 2 + w) percent
    p = plan_for("qwen2.5-7b-instruct", custom_gpu(24 * GIB), max_model_len=length)
    rows = {r.block_size: r for r in p.block_sizes}
    assert sorted(rows) == [8, 16, 32]
    for bs, row in rows.items():
        wasted = (bs - 1) / 2
        assert row.wasted_tokens_per_seq == wasted
        assert row.block_table_entries == math.ceil(length / bs)
        assert row.fragmentation_pct == round(100 * wasted / (length // 2 + wasted), 2)
    # the guide's trade-off: 8 wastes least and has the largest table, 32 the reverse
    assert rows[8].block_table_entries == 4 * rows[32].block_table_entries
    assert rows[8].wasted_tokens_per_seq < rows[32].wasted_tokens_per_seq


# ------------------------------------ (e) fp8 comes with its caveat wherever it is suggested


CAVEAT = "fp8 KV can cost accuracy without calibrated k/v scales"
# an A100 is compute capability 8.0: no native fp8 (vLLM stores fp8 and computes in 16 bits)
NO_NATIVE = "a100-40gb (compute capability 8.0) has no native fp8"


def test_estimate_check_and_diagnose_all_caveat_fp8_on_an_a100(tmp_path: Path) -> None:
    # estimate: fp8 KV is one of the alternatives for a bf16 cache
    result = runner.invoke(app, ["estimate", "qwen2.5-7b-instruct", "--gpu", "a100-40gb", "--json"])
    data = json.loads(result.stdout)
    assert any(a["changes"].get("kv_cache_dtype") == "fp8" for a in data["alternatives"])
    assert any(n.startswith(CAVEAT) and NO_NATIVE in n for n in data["plan_notes"])
    # check: fp8's 1-byte cache holds twice the bf16 tokens in about the same pool, so a
    # min_concurrency halfway between bf16's and twice it fails, with fp8 as a fix
    bf16 = plan_for("qwen2.5-7b-instruct", "a100-40gb", max_model_len=32768).vllm.max_concurrency
    need = round(1.5 * bf16, 2)
    plans = tmp_path / "plans.yaml"
    plans.write_text(
        "deployments:\n"
        + "".join(
            f"  - {{name: rag{i}, model: qwen2.5-7b-instruct, gpu: a100-40gb, "
            f"max_model_len: 32768, min_concurrency: {need}}}\n"
            for i in (1, 2)
        )
    )
    result = runner.invoke(app, ["check", str(plans), "-f", "json"])
    rows = json.loads(result.stdout)["deployments"]
    for row in rows:
        assert "kv_cache_dtype: fp8" in row["fix"]
        [caveat] = row["caveats"]
        assert caveat.startswith(CAVEAT) and NO_NATIVE in caveat
    # the table says it once, not once per row
    table = runner.invoke(app, ["check", str(plans)]).stdout
    assert table.count(CAVEAT) == 1
    markdown = runner.invoke(app, ["check", str(plans), "-f", "markdown"]).stdout
    assert markdown.count(CAVEAT) == 1
    # diagnose: the V0 log's KV usage is pinned, and fp8 KV is one of the fixes
    log = LOGS / "vllm-v0-qwen7b-a100.log"
    data = json.loads(
        runner.invoke(app, ["diagnose", str(log), "--gpu", "a100-40gb", "--json"]).stdout
    )
    [pinned] = [f for f in data["findings"] if f["kind"] == "kv-pinned"]
    assert any(fix.startswith("fp8 KV") for fix in pinned["fix"])
    [caveat] = pinned["caveats"]
    assert caveat.startswith(CAVEAT) and NO_NATIVE in caveat


def test_no_caveat_where_no_fix_suggests_fp8(tmp_path: Path) -> None:
    # a failing entry whose cache is already fp8 gets no fp8 fix and so no caveat
    plans = tmp_path / "plans.yaml"
    plans.write_text(
        "deployments:\n"
        "  - {name: rag, model: qwen2.5-7b-instruct, gpu: a100-40gb, max_model_len: 32768, kv_cache_dtype: fp8, min_concurrency: 64}\n"
    )
    [row] = json.loads(runner.invoke(app, ["check", str(plans), "-f", "json"]).stdout)[
        "deployments"
    ]
    assert row["status"] == "fail" and "fp8" not in row["fix"] and row["caveats"] == []
