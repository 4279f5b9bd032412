"""Every deployment is checked for physical possibility before it is planned, and
``--gpus N`` alone picks a layout. Expected values come from arithmetic in the tests (GPU
counts, head counts, byte sums) or the cited vLLM lines."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from planner.cli import app
from planner.units import GIB

runner = CliRunner()
ENV = {"NO_COLOR": "1", "COLUMNS": "80", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}


def run(*args: str) -> Result:
    return runner.invoke(app, ["estimate", *args], env=ENV)


def as_json(*args: str, code: int) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == code, (result.stdout, result.stderr)
    data = json.loads(result.stdout)  # one object, whatever the outcome
    assert isinstance(data, dict)
    return data


def refused(*args: str) -> tuple[str, dict[str, Any]]:
    """The text and the JSON of a deployment that won't start: exit 1 both ways, no command."""
    text = run(*args)
    assert text.exit_code == 1, (text.stdout, text.stderr)
    assert "vllm serve" not in text.stdout and "✗ Won't start" in text.stdout
    assert text.stderr.startswith("Error: ") and len(text.stderr.strip().splitlines()) == 1
    data = as_json(*args, code=1)
    assert data["outcome"] == "wont_start" and data["fits"] is False
    assert data["commands"] == {} and data["outcome_reason"]
    return text.stdout, data


# --------------------------------------------------------------------------- GPU counts


def test_tp_16_on_8_gpus_wont_start() -> None:
    # 16 x 1 x 1 = 16 GPUs against 8 given; TP 16 is also wider than an 8-GPU node
    out, data = refused("llama-3.1-8b", "--gpu", "h100", "--tp", "16", "--gpus", "8")
    assert data["wont_start_check"] == "gpus"
    assert "= 16 GPUs, but --gpus gives 8" in data["outcome_reason"]
    assert "wider than a h100 node (8 GPUs)" in data["outcome_reason"]
    first = data["changes"][0]
    assert first["tp"] * first.get("pp", 1) * first.get("dp", 1) <= 8  # it fits the 8 given
    assert data["layouts"] and all(r["tp"] * r["pp"] * r["dp"] == 8 for r in data["layouts"])


def test_tp_4_dp_4_on_8_gpus_wont_start() -> None:
    _, data = refused("llama-3.1-8b", "--gpu", "h100", "--tp", "4", "--dp", "4", "--gpus", "8")
    assert "tp 4 x pp 1 x dp 4 = 16 GPUs, but --gpus gives 8" in data["outcome_reason"]
    assert {"dp": 2} in data["changes"]  # 8 // (4 x 1)
    assert "16 GPUs" not in json.dumps(data["layouts"])


def test_dp_2_on_one_gpu_wont_start() -> None:
    _, data = refused("llama-3.1-8b", "--gpu", "h100", "--dp", "2", "--gpus", "1")
    assert "= 2 GPUs, but --gpus gives 1" in data["outcome_reason"]
    assert data["changes"][0] == {"tp": 1, "dp": 1}
    assert (
        "the 2 GPUs hold"
        not in run("llama-3.1-8b", "--gpu", "h100", "--dp", "2", "--gpus", "1").stdout
    )


def test_tp_wider_than_a_node_wont_start_without_gpus() -> None:
    # no --gpus: the node size (8 where the catalog gives none) still bounds TP
    _, data = refused("llama-3.1-8b", "--gpu", "h100", "--tp", "16")
    assert data["wont_start_check"] == "node"
    assert data["changes"][0] == {"tp": 8, "pp": 2}  # 16 = 8 x 2: PP across the nodes


# --------------------------------------------------------------------------- memory


def test_kv_cache_memory_above_the_gpu_wont_start() -> None:
    # 100 GiB of KV + 14.96 GiB of weights on a 79.18 GiB H100
    _, data = refused("llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory", "100GiB")
    assert data["wont_start_check"] == "kv_cache_memory"
    assert data["available_kv_bytes"] == 100 * GIB
    total = data["gpu"]["memory_bytes"]
    assert 100 * GIB + data["weights_bytes"] > total
    (change,) = data["changes"]
    # the pool that starts leaves room for the weights and every other term on the GPU
    fit = change["kv_cache_memory_bytes"]
    assert fit + data["weights_bytes"] + data["non_torch_bytes"] < total
    assert data["change_flags"] == [f"--kv-cache-memory {fit // 2**20}MiB"]


def test_the_suggested_kv_cache_memory_starts() -> None:
    _, data = refused("llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory", "100GiB")
    flag, value = data["change_flags"][0].split()
    ok = as_json("llama-3.1-8b", "--gpu", "h100", flag, value, "--max-model-len", "8192", code=0)
    assert ok["outcome"] != "wont_start"


def test_weights_that_do_not_fit_print_one_json_object() -> None:
    # Qwen3-Next-80B bf16: 148.22 GiB of weights against 0.92 x 139.80 GiB on an H200
    data = as_json("qwen3-next-80b-a3b-thinking", "--gpu", "h200", code=1)
    assert data["wont_start_check"] == "weights"
    assert data["weights_bytes"] > data["requested_bytes"]
    assert data["requested_bytes"] == -(-int(data["gpu"]["memory_bytes"] * 0.92 * 1000) // 1000)
    assert data["changes"][0] == {"tp": 2}
    assert data["kv_bytes_per_token"] > 0  # the KV layout was computed: it is there


def test_fp8_checkpoints_are_not_suggested_where_vllm_cannot_run_them() -> None:
    # T4 is compute capability 7.5; vLLM's FP8 (native 8.9+, Marlin 8.0+) does not run there
    _, t4 = refused("llama-3.1-70b", "--gpu", "t4")
    assert not any("fp8 checkpoint" in str(c) for c in t4["changes"])
    _, a100 = refused("llama-3.1-70b", "--gpu", "a100-80gb")
    assert any("fp8 checkpoint" in str(c) for c in a100["changes"])


# --------------------------------------------------------------------------- divisibility


def test_tp_that_does_not_divide_the_heads_wont_start_on_a_gpu() -> None:
    # 32 attention heads, 8 KV heads: 3 divides neither; the largest valid TP below 3 is 2
    _, data = refused("llama-3.1-8b", "--gpu", "h100", "--tp", "3")
    assert data["wont_start_check"] == "divisibility"
    assert "32 attention heads" in data["outcome_reason"]
    assert data["changes"] == [{"tp": 2}]


def test_dcp_on_gqa_needs_tp_above_the_kv_heads() -> None:
    # vLLM 0.33 vllm/config/model.py:1580: tp (4) <= total KV heads (8) is refused
    _, data = refused("llama-3.1-8b", "--gpu", "h100", "--tp", "4", "--dcp", "2")
    assert "above the model's 8 KV heads" in data["outcome_reason"]
    assert {"dcp": 1} in data["changes"]


def test_expert_parallel_on_a_dense_model_wont_start() -> None:
    # vLLM 0.33 vllm/config/model.py:1499-1503
    _, data = refused("llama-3.1-8b", "--gpu", "h100", "--enable-expert-parallel")
    assert "has no experts" in data["outcome_reason"]


# --------------------------------------------------------------------------- --gpus alone


def test_deepseek_v3_on_8_h200s_picks_dp_attention() -> None:
    data = as_json("deepseek-v3", "--gpu", "h200", "--gpus", "8", code=0)
    chosen = [r for r in data["layouts"] if r["chosen"]]
    assert len(chosen) == 1
    (row,) = chosen
    assert (row["tp"], row["pp"], row["dp"], row["expert_parallel"]) == (1, 1, 8, True)
    # without pipeline stages, it holds the most cluster tokens
    flat = [r for r in data["layouts"] if r["pp"] == 1 and r["fits"]]
    assert row["cluster_kv_cache_size_tokens"] == max(
        r["cluster_kv_cache_size_tokens"] for r in flat
    )
    words = shlex.split(data["commands"]["vllm"])
    assert words[words.index("--data-parallel-size") + 1] == "8"
    assert "--enable-expert-parallel" in words
    assert data["layout_choice"].startswith("TP 1 x DP 8 + EP holds")


def test_llama_70b_on_4_h100s_picks_tp_4() -> None:
    # 70.55 B params x 2 B = 131.4 GiB: TP 2 keeps 65.7 GiB per GPU of 72.85 GiB that vLLM may
    # use, less than one 131,072-token request (80 layers x 4 KV heads x 128 x 2 x 2 B x
    # 131,072 = 20 GiB) needs; only layouts over all 4 GPUs start, TP 4 without a pipeline
    data = as_json("llama-3.1-70b", "--gpu", "h100", "--gpus", "4", code=0)
    by = {(r["tp"], r["pp"], r["dp"]): r for r in data["layouts"]}
    assert not by[(2, 1, 2)]["fits"] and not by[(1, 1, 4)]["fits"]
    assert by[(4, 1, 1)]["chosen"]
    assert data["tensor_parallel_size"] == 4
    words = shlex.split(data["commands"]["vllm"])
    assert words[words.index("--tensor-parallel-size") + 1] == "4"


def test_two_nodes_alone_pick_a_layout_and_a_command_per_node() -> None:
    data = as_json(
        "qwen3-235b-a22b", "--gpu", "h100", "--nodes", "2", "--gpus-per-node", "8", code=0
    )
    (row,) = [r for r in data["layouts"] if r["chosen"]]
    assert row["tp"] * row["pp"] <= 8 and row["tp"] * row["pp"] * row["dp"] == 16
    assert len(data["node_commands"]) == 2


def test_gpus_above_a_node_spread_over_whole_nodes() -> None:
    # --gpus 16 on H100s (8 a node): two nodes, a replica inside each
    data = as_json("qwen3-235b-a22b", "--gpu", "h100", "--gpus", "16", code=0)
    (row,) = [r for r in data["layouts"] if r["chosen"]]
    assert row["tp"] * row["pp"] <= 8
    assert len(data["node_commands"]) == 2


def test_no_layout_holds_the_weights() -> None:
    # Llama-3.1-405B bf16 is ~756 GiB: over 2 nodes a replica stays in 8 GPUs, 94.5 GiB each
    out, data = refused("llama-3.1-405b", "--gpu", "h100", "--gpus", "16")
    assert data["wont_start_check"] == "layouts"
    assert {"gpu": "h200"} in data["changes"]
    assert "--gpus 32" not in out  # more nodes do not help a replica that stays in one


@pytest.mark.parametrize("gpus", ["2", "8"])
def test_a_typed_layout_is_kept_and_compared(gpus: str) -> None:
    data = as_json(
        "llama-3.1-8b", "--gpu", "h100", "--tp", "1", "--dp", "2", "--gpus", gpus, code=0
    )
    assert data["data_parallel_size"] == 2 and "layout_choice" not in data  # only when picked
    # every row uses all the GPUs given: the user's 2 are one of them only on 2
    assert any(r["yours"] for r in data["layouts"]) == (gpus == "2")
