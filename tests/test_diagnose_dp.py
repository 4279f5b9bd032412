"""kvplan diagnose on data-parallel vLLM logs: each DP engine prints its
startup figures under its own prefix, ``(EngineCore_DP1 pid=...)``; they are grouped by rank,
reported per rank and summed for the cluster. Also the speculative-decoding lines (the
``--speculative-config`` the log states, the "SpecDecoding metrics" stat lines).

Real lines come from tests/data/vllm_dp_logs.json, each record citing the issue it was
copied from; the two fixture logs are written in the shape those logs show (their records say
how). Expected figures are worked out here from the logged numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.diagnose import GIB, diagnose_file, parse_log
from planner.diagnose.boot_log import rank_of
from planner.diagnose.ranks import data_parallel
from planner.gpus import get_gpu

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "fixtures" / "logs"
DP2 = LOGS / "vllm-v1-dp2-llama8b-h100.log"
DP3 = LOGS / "vllm-v1-dp3-ep-qwen3-30b-a3b.log"
SINGLE = LOGS / "vllm-v1-llama8b-h100.log"
RECORDS = {r["id"]: r for r in json.loads((ROOT / "tests/data/vllm_dp_logs.json").read_text())}
NARROW = {"COLUMNS": "80", "NO_COLOR": "1"}


def gib(x: float) -> int:
    return round(x * GIB)


def real(record: str) -> str:
    return "\n".join(RECORDS[record]["lines"]) + "\n"


def test_every_record_cites_its_source() -> None:
    for rec in RECORDS.values():
        assert rec["source"].startswith("https://github.com/"), rec["id"]
        assert rec["kind"] in ("real", "real-shaped"), rec["id"]
        if rec["kind"] == "real-shaped":
            assert (ROOT / rec["file"]).is_file() and rec["shapes_from"], rec["id"]
        else:
            assert rec["lines"], rec["id"]


# ------------------------------------------------------------------ which rank printed a line


@pytest.mark.parametrize(
    ("record", "index", "rank"),
    [
        ("trl-3310-enginecore-n-prefix", 0, 1),  # vLLM 0.8.3: (EngineCore_1 pid=...)
        ("lmcache-2521-worker-dp-tp-ep-prefix", 0, 0),  # (Worker_DP0_TP0_EP0 pid=...)
        ("lmcache-2521-worker-dp-tp-ep-prefix", 1, 2),  # printed into a progress bar
        ("vllm-ascend-5461-worker-dp-tp-ep-prefix", 0, 0),  # TP 5, EP 5 of DP rank 0
        ("vllm-32105-enginecore-dp0-and-pp-worker", 0, 0),  # (EngineCore_DP0 pid=...)
        ("vllm-32105-enginecore-dp0-and-pp-worker", 1, 0),  # (Worker_PP0 pid=...)
        ("club-3090-91-speculative-mtp", 0, 0),  # (APIServer pid=1)
        ("club-3090-91-speculative-mtp", 2, 0),  # vLLM 0.2x without DP: (EngineCore pid=...)
        ("vllm-backport-36-capacity-line", 1, 0),  # no prefix at all
    ],
)
def test_the_rank_comes_from_vllms_process_prefix(record: str, index: int, rank: int) -> None:
    assert rank_of(RECORDS[record]["lines"][index]) == rank


def test_other_prefixes_are_rank_zero() -> None:
    assert rank_of("(EngineCore_DP12 pid=7) INFO GPU KV cache size: 1 tokens") == 12
    assert rank_of("(Worker_DP3_PP1_TP0 pid=8) INFO Available KV cache memory: 1.00 GiB") == 3
    assert rank_of("(VllmWorker rank=1 pid=106) INFO Model loading took 14.25 GiB") == 0  # TP
    assert rank_of("(Worker_TP1_EP1 pid=2) INFO Available KV cache memory: 1.00 GiB") == 0


def test_a_corrupt_rank_or_size_is_not_a_deployment() -> None:
    # found by tests/test_fuzz_inputs.py: a rank of 400 nines made the cluster sum overflow
    assert rank_of(f"(Worker_DP{'9' * 400}_TP0 pid=1) INFO Available KV cache memory") == 0
    assert rank_of("(EngineCore_DP4096 pid=1) INFO GPU KV cache size: 1 tokens") == 0
    assert rank_of("(EngineCore_DP4095 pid=1) INFO GPU KV cache size: 1 tokens") == 4095
    for size in ("9" * 400, "4097", "0", "True"):
        log = parse_log(f"INFO non-default args: {{'model': 'x', 'data_parallel_size': {size}}}")
        assert log.data_parallel_size is None and not log.data_parallel, size


# ------------------------------------------------------------------ real lines


def test_dp_and_ep_are_read_from_non_default_args_that_are_not_a_literal() -> None:
    # vLLM 0.25 prints an object's repr among the args (and the stored copy cuts the line
    # inside it): the pairs before it are still read.
    log = parse_log(real("vllm-51454-dp8-ep-args"))
    assert (log.data_parallel_size, log.expert_parallel) == (8, True)
    assert log.settings == {
        "dp": 8,  # a DP size above 1 and EP on are settings the plan takes
        "enable_expert_parallel": True,
        "block_size": 256,
        "gpu_memory_utilization": 0.95,
        "kv_cache_dtype": "fp8",
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 256,
    }
    assert log.model and log.model.endswith("7872f01b1d1fe23eabc4c98b48bffcef5a386062")
    dp = data_parallel(log)
    assert dp is not None and dp.data_parallel_size == 8 and dp.ranks == []
    assert dp.cluster.kv_cache_size_tokens is None  # no rank logged a size


def test_the_one_line_capacity_of_newer_vllm() -> None:
    log = parse_log(real("vllm-backport-36-capacity-line"))
    assert log.available_kv_bytes == gib(10.35)
    assert (log.kv_cache_tokens, log.concurrency_len, log.max_concurrency) == (
        1_676_933,
        262_144,
        6.40,
    )
    # vLLM prints int(max_concurrency * max_model_len): 6.40 is 1,676,933 / 262,144 rounded
    assert round(1_676_933 / 262_144, 2) == 6.40
    assert data_parallel(log) is None


def test_the_engines_model_is_not_the_draft_models() -> None:
    # vLLM prints SpeculativeConfig(method=..., model=<the draft>, num_spec_tokens=...) after
    # the target's model='...' (vllm/config/speculative.py __repr__, vllm/config/vllm.py
    # __str__); before, the draft's model= won.
    log = parse_log(
        "(EngineCore_DP0 pid=1) INFO [core.py:140] Initializing a V1 LLM engine (v0.33.0) with "
        "config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=SpeculativeConfig("
        "method='eagle', model='yuhuili/EAGLE-LLaMA3.1-Instruct-8B', num_spec_tokens=3), "
        "tokenizer='meta-llama/Llama-3.1-8B-Instruct', max_seq_len=16000, "
        "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1\n"
    )
    assert log.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert log.settings["max_model_len"] == 16_000 and log.data_parallel_size == 1
    assert not log.data_parallel
    # the real MTP line names the same checkpoint twice
    assert parse_log(real("club-3090-91-speculative-mtp")).model == (
        "~/.cache/huggingface/qwen3.6-27b-autoround-int4"
    )


def test_a_log_of_one_engine_has_no_ranks() -> None:
    for log in (parse_log(SINGLE.read_text()), parse_log(real("club-3090-91-speculative-mtp"))):
        assert not log.data_parallel and log.ranks == {}
        assert data_parallel(log) is None
    assert diagnose_file(SINGLE, model="llama-3.1-8b", gpu=get_gpu("h100")).data_parallel is None


# ------------------------------------------------------------------ DP 2, ranks alike


def test_each_rank_keeps_its_own_figures_and_the_log_keeps_rank_zeros() -> None:
    log = parse_log(DP2.read_text())
    assert log.data_parallel_size == 2 and sorted(log.ranks) == [0, 1]
    zero, one = log.ranks[0], log.ranks[1]
    for rank in (zero, one):
        assert rank.kv_cache_size_tokens == 420_880
        assert (rank.max_concurrency, rank.max_model_len) == (26.30, 16_000)
        assert rank.available_kv_bytes == gib(51.38)
        assert rank.weights_bytes == gib(14.99)
    # rank 0's lines, not the last rank's: before, rank 1's lines 25 and 28 won
    assert (zero.lines["available_kv_bytes"], one.lines["available_kv_bytes"]) == (24, 25)
    assert (zero.lines["kv_cache_size_tokens"], one.lines["kv_cache_size_tokens"]) == (26, 28)
    assert log.lines["available_kv_bytes"] == 24 and log.lines["kv_cache_tokens"] == 26
    assert log.kv_cache_tokens == 420_880  # once, not 2 x


def test_alike_ranks_sum_to_the_cluster() -> None:
    dg = diagnose_file(DP2, model="llama-3.1-8b", gpu=get_gpu("h100"))
    dp = dg.data_parallel
    assert dp is not None and dp.data_parallel_size == 2 and dp.expert_parallel is None
    c = dp.cluster
    assert c.ranks == 2 and c.logged_ranks == [0, 1]
    assert c.kv_cache_size_tokens == 2 * 420_880 == 841_760
    assert c.max_concurrency == round(2 * 26.30, 2) == 52.60
    assert c.min_rank is None  # the ranks agree
    assert c.even_load_kv_cache_size_tokens == 841_760
    assert c.even_load_max_concurrency == 52.60
    assert "dp-ranks-differ" not in [f.kind for f in dg.findings]
    # the per-GPU comparison is rank 0's, which is the single-engine log's boot
    single = diagnose_file(SINGLE, model="llama-3.1-8b", gpu=get_gpu("h100"))
    assert [(t.name, t.log, t.plan) for t in dg.terms] == [
        (t.name, t.log, t.plan) for t in single.terms
    ]


# ------------------------------------------------------------------ DP 3 x TP 2 with EP


def test_uneven_ranks_name_the_smallest_and_the_even_load_cluster() -> None:
    log = parse_log(DP3.read_text())
    assert (log.data_parallel_size, log.expert_parallel) == (3, True)
    assert log.settings["tp"] == 2 and log.settings["max_model_len"] == 32_768
    # One expert of Qwen3-30B-A3B on each of rank 0's GPUs more than on the others' (128
    # experts over 6 EP ranks: 22, 22, 21, 21, 21, 21) is 48 layers x 3 x 2048 x 768 x 2 B;
    # a KV block at TP 2 is 16 tokens x 48 layers x 2 (K, V) x 2 KV heads x 128 x 2 B.
    expert_bytes = 48 * 3 * 2048 * 768 * 2
    block_bytes = 16 * 48 * 2 * 2 * 128 * 2
    assert (expert_bytes, block_bytes) == (452_984_832, 786_432)
    fewer_tokens = expert_bytes // block_bytes * 16
    tokens = {r: f.kv_cache_size_tokens for r, f in log.ranks.items()}
    assert tokens == {0: 1_083_040, 1: 1_092_256, 2: 1_092_256}
    assert tokens[1] - tokens[0] == fewer_tokens == 9_216
    # only the node's first worker prints its memory (vLLM 0.33): ranks 1 and 2 have none
    assert log.ranks[0].available_kv_bytes == gib(49.58)
    assert log.ranks[1].available_kv_bytes is None and log.ranks[2].weights_bytes is None

    dg = diagnose_file(DP3)
    dp = dg.data_parallel
    assert dp is not None
    c = dp.cluster
    assert c.kv_cache_size_tokens == 1_083_040 + 2 * 1_092_256 == 3_267_552
    assert c.max_concurrency == round(33.05 + 2 * 33.33, 2) == 99.71
    assert c.min_rank == 0
    assert c.even_load_kv_cache_size_tokens == 3 * 1_083_040 == 3_249_120
    assert c.even_load_max_concurrency == round(3 * 33.05, 2) == 99.15
    [f] = [f for f in dg.findings if f.kind == "dp-ranks-differ"]
    # 9,216 of 1,092,256 tokens fewer: 0.84 %, under the 5 % that makes it a warning
    assert f.data["spread_pct"] == round(100 * 9_216 / 1_092_256, 2) == 0.84
    assert f.severity == "info" and f.lines == [21]
    assert (f.data["min_rank"], f.data["max_rank"]) == (0, 1)


def test_ranks_that_differ_by_five_percent_are_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "dp2.log"
    path.write_text(
        "(EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:1147] GPU KV cache size: 400,000 "
        "tokens, Maximum concurrency for 10,000 tokens per request: 40.00x\n"
        "(EngineCore_DP1 pid=2) INFO [kv_cache_utils.py:1147] GPU KV cache size: 300,000 "
        "tokens, Maximum concurrency for 10,000 tokens per request: 30.00x\n"
    )
    dg = diagnose_file(path)
    assert dg.data_parallel is not None
    c = dg.data_parallel.cluster
    assert (c.kv_cache_size_tokens, c.max_concurrency) == (700_000, 70.0)
    assert (c.min_rank, c.even_load_kv_cache_size_tokens, c.even_load_max_concurrency) == (
        1,
        2 * 300_000,
        60.0,
    )
    [f] = [f for f in dg.findings if f.kind == "dp-ranks-differ"]
    assert f.severity == "warning" and f.data["spread_pct"] == 25.0  # 100,000 of 400,000


# ------------------------------------------------------------------ ranks that logged nothing


def test_ranks_that_did_not_log_count_as_the_smallest_that_did(tmp_path: Path) -> None:
    # vLLM 0.33 with TP 1 on one node prints the capacity once per node: DP rank 0's only.
    path = tmp_path / "dp4.log"
    path.write_text(
        "(APIServer pid=1) INFO [startup.py:96] non-default args: {'model': 'x', "
        "'data_parallel_size': 4}\n"
        "(EngineCore_DP0 pid=2) INFO [gpu_worker.py:773] Available KV cache memory: 30.00 GiB\n"
        "(EngineCore_DP0 pid=2) INFO [kv_cache_utils.py:1147] GPU KV cache size: 245,760 "
        "tokens, Maximum concurrency for 16,000 tokens per request: 15.36x\n"
    )
    dg = diagnose_file(path)
    assert dg.data_parallel is not None
    c = dg.data_parallel.cluster
    assert (c.ranks, c.logged_ranks) == (4, [0])
    assert c.kv_cache_size_tokens == 4 * 245_760 == 983_040
    assert c.max_concurrency == round(4 * 15.36, 2) == 61.44
    assert c.min_rank is None
    assert any(
        note.startswith("DP ranks 1-3 logged no KV cache size")
        and "count each as rank 0's 245,760 tokens" in note
        for note in dg.notes
    )


def test_a_nodes_log_without_rank_zero_compares_its_lowest_rank(tmp_path: Path) -> None:
    # the second node of --data-parallel-size 4 --data-parallel-size-local 2: ranks 2 and 3
    path = tmp_path / "node1.log"
    path.write_text(
        "(APIServer pid=1) INFO non-default args: {'model': 'x', 'data_parallel_size': 4, "
        "'data_parallel_start_rank': 2, 'headless': True}\n"
        "(EngineCore_DP3 pid=4) INFO GPU KV cache size: 1,224,353 tokens, Maximum concurrency "
        "for 32,768 tokens per request: 37.36x\n"
        "(EngineCore_DP2 pid=3) INFO GPU KV cache size: 1,226,636 tokens, Maximum concurrency "
        "for 32,768 tokens per request: 37.43x\n"
    )
    log = parse_log(path.read_text())
    assert sorted(log.ranks) == [2, 3]
    assert (log.kv_cache_tokens, log.lines["kv_cache_tokens"]) == (1_226_636, 3)  # rank 2's
    dp = data_parallel(log)
    assert dp is not None
    c = dp.cluster
    assert (c.ranks, c.logged_ranks, c.min_rank) == (4, [2, 3], 3)
    # ranks 0 and 1 (the other node) count as rank 3, the smallest logged here
    assert c.kv_cache_size_tokens == 1_226_636 + 1_224_353 + 2 * 1_224_353 == 4_899_695
    assert c.max_concurrency == round(37.43 + 37.36 + 2 * 37.36, 2) == 149.51
    assert c.even_load_kv_cache_size_tokens == 4 * 1_224_353


# ------------------------------------------------------------------ JSON and text


def run(args: list[str], env: dict[str, str] | None = None) -> Any:
    result = runner.invoke(app, ["diagnose", *args], env=env)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_json_has_ranks_and_cluster_at_the_top_level() -> None:
    data = json.loads(run([str(DP3), "--json"]))
    assert (data["data_parallel_size"], data["expert_parallel"]) == (3, True)
    assert [r["rank"] for r in data["ranks"]] == [0, 1, 2]
    assert [r["kv_cache_size_tokens"] for r in data["ranks"]] == [1_083_040, 1_092_256, 1_092_256]
    assert [r["max_concurrency"] for r in data["ranks"]] == [33.05, 33.33, 33.33]
    assert data["ranks"][0]["available_kv_bytes"] == gib(49.58)
    assert data["ranks"][1]["available_kv_bytes"] is None
    assert data["cluster"] == {
        "ranks": 3,
        "logged_ranks": [0, 1, 2],
        "kv_cache_size_tokens": 3_267_552,
        "max_concurrency": 99.71,
        "min_rank": 0,
        "even_load_kv_cache_size_tokens": 3_249_120,
        "even_load_max_concurrency": 99.15,
    }
    assert "ranks" not in data["log"] and "data_parallel_size" not in data["log"]
    [text] = [f["text"] for f in data["findings"] if f["kind"] == "dp-ranks-differ"]
    assert "3 × 1,083,040 = 3,249,120 tokens (99.15x), not 3,267,552" in text


def test_json_of_one_engine_has_no_dp_keys() -> None:
    data = json.loads(run([str(SINGLE), "--model", "llama-3.1-8b", "--gpu", "h100", "--json"]))
    assert not {"data_parallel_size", "expert_parallel", "ranks", "cluster"} & set(data)


@pytest.mark.parametrize("log", [DP2, DP3])
def test_text_at_80_columns_shows_every_figure_whole(log: Path) -> None:
    out = run([str(log)], NARROW)
    data = json.loads(run([str(log), "--json"]))
    assert "…" not in out
    lines = out.splitlines()
    for rank in data["ranks"]:
        [row] = [line for line in lines if line.strip("│ ").split()[:1] == [str(rank["rank"])]]
        assert f"{rank['kv_cache_size_tokens']:,}" in row
        assert f"{rank['max_concurrency']:.2f}x" in row
    c = data["cluster"]
    [total] = [line for line in lines if line.strip("│ ").startswith("all ")]
    assert f"{c['kv_cache_size_tokens']:,}" in total and f"{c['max_concurrency']:.2f}x" in total
    assert (
        f"Cluster: {c['kv_cache_size_tokens']:,} KV tokens, {c['max_concurrency']:.2f}x "
        f"requests of {data['ranks'][0]['max_model_len']:,} tokens at once over {c['ranks']} "
        "DP ranks." in " ".join(out.split())  # prose wraps at 80 columns, words whole
    )
    assert max(len(line) for line in lines) <= 80
    table = [line for line in lines if line.startswith(("┃", "│", "┏", "└"))]
    assert max(len(line) for line in table) <= 80


def test_the_plans_verdict_is_said_to_be_one_ranks() -> None:
    out = run([str(DP2), "--model", "llama-3.1-8b", "--gpu", "h100"], NARROW)
    assert "✓ Verdict (the plan for these settings, each of 2 DP ranks): starts" in out


# ------------------------------------------------------------------ speculative decoding


@pytest.mark.parametrize(
    ("record", "accepted", "drafted", "length", "vllm_pct"),
    [
        # vLLM prints the acceptance rate itself: 9.1 % and 88.8 % (Avg Draft acceptance rate)
        ("aeon7-dflash-6-specdecode-metrics", 89, 975, 2.37, 9.1),
        ("vllm-24127-specdecode-metrics-older", 262, 295, 5.44, 88.8),
    ],
)
def test_spec_decoding_stat_lines(
    record: str, accepted: int, drafted: int, length: float, vllm_pct: float
) -> None:
    log = parse_log(real(record))
    spec = log.speculative
    assert spec is not None and log.recognised == 1
    assert (spec.accepted_tokens, spec.drafted_tokens) == (accepted, drafted)
    assert spec.mean_acceptance_length == [length]
    assert round(100 * accepted / drafted, 1) == vllm_pct


def test_the_speculative_config_is_read_from_args_and_config_line() -> None:
    lines = RECORDS["club-3090-91-speculative-mtp"]["lines"]
    for line in lines[:2]:  # the non-default args, the engine's config line
        spec = parse_log(line).speculative
        assert spec is not None
        assert (spec.method, spec.num_speculative_tokens) == ("mtp", 3)
    spec = parse_log(lines[1]).speculative
    assert spec is not None
    assert spec.draft_model == "~/.cache/huggingface/qwen3.6-27b-autoround-int4"
    assert parse_log(SINGLE.read_text()).speculative is None  # speculative_config=None


def test_a_bad_acceptance_length_leaves_the_line_unrecognised(tmp_path: Path) -> None:
    log = parse_log("INFO [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 2.3.7")
    assert log.recognised == 0 and log.speculative is None
    # a count of 400 digits is no count (found by fuzzing: the acceptance % overflowed)
    line = real("aeon7-dflash-6-specdecode-metrics").replace(
        "Accepted: 89", "Accepted: " + "9" * 400
    )
    spec = parse_log(line).speculative
    assert spec is not None and (spec.accepted_tokens, spec.drafted_tokens) == (0, 0)
    (tmp_path / "vllm.log").write_text(line)
    data = json.loads(run([str(tmp_path / "vllm.log"), "--json"]))
    assert data["speculative"]["draft_acceptance_pct"] is None


def test_speculative_decoding_in_json_and_text(tmp_path: Path) -> None:
    path = tmp_path / "mtp.log"
    path.write_text(
        real("club-3090-91-speculative-mtp") + real("aeon7-dflash-6-specdecode-metrics")
    )
    data = json.loads(run([str(path), "--json"]))
    assert data["speculative"] == {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "draft_model": "~/.cache/huggingface/qwen3.6-27b-autoround-int4",
        "samples": 1,
        "mean_acceptance_length": 2.37,
        "accepted_tokens": 89,
        "drafted_tokens": 975,
        "draft_acceptance_pct": round(100 * 89 / 975, 1),
    }
    assert "speculative" not in data["log"]
    out = run([str(path)], NARROW)
    assert (
        "Speculative decoding: mtp, 3 tokens a step; 1 stat line: 89 of 975 drafted tokens "
        "accepted (9.1 %), mean acceptance length 2.37." in " ".join(out.split())
    )
    single = json.loads(run([str(SINGLE), "--model", "llama-3.1-8b", "--gpu", "h100", "--json"]))
    assert "speculative" not in single
