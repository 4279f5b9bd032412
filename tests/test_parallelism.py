"""Data + expert parallelism, DP attention, EPLB, DCP, speculative decoding, nodes.

Every expected figure is arithmetic written out here from the configs (shared/model-configs,
copied to tests/fixtures/configs) or from vLLM 0.33's rules as ../shared/ENGINES-SCALE.md §4.1-4.2
quotes them with source lines.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import planner
from planner.cli import app
from planner.cluster import best_layout
from planner.deployment import Deployment, ServeSettings
from planner.errors import UsageError
from planner.layer_shapes import Placement
from planner.model.load import load_draft
from planner.plan_types import PlanOptions
from planner.recommend import plan
from planner.speculative import SpeculativeConfig, parse_speculative
from planner.weights import from_tensors, per_rank
from tests.conftest import fixture_config
from tests.helpers import check_command, moe_checkpoint

runner = CliRunner()


def run_cli(*args: str) -> Result:
    return runner.invoke(app, list(args))


MIB = 1 << 20
EAGLE_8B = str(fixture_config("yuhuili--EAGLE-LLaMA3-Instruct-8B").parent)


def mtp(k: int = 1) -> SpeculativeConfig:
    return SpeculativeConfig(method="mtp", num_speculative_tokens=k)


# --------------------------------------------------------------------------- KV of drafters


def test_deepseek_v3_mtp_adds_one_mla_layer_to_the_pool() -> None:
    # MLA latent kv_lora_rank 512 + qk_rope_head_dim 64, bf16, not split by TP:
    # 61 layers x 576 x 2 B = 70,272 B/token/rank; MTP (num_nextn_predict_layers 1) adds one
    # more layer of the same spec: 62 x 1,152 = 71,424 (ENGINES-SCALE §4.2)
    spec = planner.load_model_spec("deepseek-v3")
    plain = planner.estimate(spec, ServeSettings(tp=8))
    with_mtp = planner.estimate(spec, ServeSettings(tp=8, speculative=mtp()))
    assert plain.kv_bytes_per_token == 61 * 576 * 2 == 70_272
    assert with_mtp.kv_bytes_per_token == 62 * 576 * 2 == 71_424
    assert with_mtp.vllm is not None and len(with_mtp.vllm.groups) == 1  # same spec, one group
    assert with_mtp.vllm.groups[0].num_layers == 62


def test_llama_8b_with_a_one_layer_eagle_head() -> None:
    # target: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B/token; the EAGLE
    # head's config has num_hidden_layers 1, 8 KV heads, head dim 4,096 / 32 = 128: one more
    # layer of the same spec, 33 x 4,096 = 135,168 (ENGINES-SCALE §4.2)
    settings = ServeSettings(
        speculative=parse_speculative(
            {"method": "eagle", "model": EAGLE_8B, "num_speculative_tokens": 3}
        )
    )
    settings, draft = load_draft(settings)
    assert draft is not None
    est = planner.estimate(planner.load_model_spec("llama-3.1-8b"), settings)
    assert est.kv_bytes_per_token == 33 * 8 * 128 * 2 * 2 == 135_168
    assert est.vllm is not None and [g.num_layers for g in est.vllm.groups] == [33]


def test_the_drafter_sits_on_the_last_pipeline_stage() -> None:
    # PP 2 splits Llama-3.1-8B's 32 layers 16 / 16; the drafter exists only on the last
    # stage (gpu_model_runner: get_pp_group().is_last_rank), so that stage holds 17 layers
    settings, _ = load_draft(
        ServeSettings(
            pp=2,
            speculative=parse_speculative(
                {"method": "eagle", "model": EAGLE_8B, "num_speculative_tokens": 1}
            ),
        )
    )
    est = planner.estimate(planner.load_model_spec("llama-3.1-8b"), settings)
    assert est.pp_stage == 1
    assert est.kv_bytes_per_token == 17 * 4_096


def test_lookahead_slots_by_method() -> None:
    # VllmConfig.num_lookahead_tokens: k for eagle / mtp / draft models, k + 1 for dflash,
    # 0 for prompt lookup
    assert mtp(3).num_lookahead_tokens == 3
    assert (
        SpeculativeConfig(method="dflash", model="x", num_speculative_tokens=3).num_lookahead_tokens
        == 4
    )
    assert SpeculativeConfig(method="ngram", num_speculative_tokens=3).num_lookahead_tokens == 0


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ("{method: mtp}", "must be JSON"),
        ('{"method": "medusa", "num_speculative_tokens": 2}', "not one kvplan sizes"),
        ('{"method": "eagle", "num_speculative_tokens": 2}', 'needs "model"'),
        ('{"method": "mtp"}', "num_speculative_tokens"),
        ('{"method": "mtp", "num_speculative_tokens": 0}', "from 1 to 64"),
        ('{"method": "mtp", "num_speculative_tokens": 1, "acceptance": 0.7}', "does not size"),
    ],
)
def test_speculative_config_refusals(given: str, error: str) -> None:
    with pytest.raises(UsageError, match=error):
        parse_speculative(given)


def test_mtp_on_a_model_without_mtp_layers_is_refused() -> None:
    with pytest.raises(UsageError, match="has no MTP layers"):
        Deployment(
            model=planner.load_model("llama-3.1-8b"),
            gpu=None,
            settings=ServeSettings(speculative=mtp()),
        )


def test_draft_tp_must_be_one_or_the_targets() -> None:
    spec = SpeculativeConfig(
        method="eagle", model="x", num_speculative_tokens=1, draft_tensor_parallel_size=2
    )
    assert spec.draft_tp(2) == 2
    with pytest.raises(UsageError, match="must be 1 or the target's --tp 4"):
        spec.draft_tp(4)


# --------------------------------------------------------------------------- weights


def test_experts_shard_over_dp_times_tp_the_rest_over_tp(tmp_path: Path) -> None:
    model = planner.load_model(str(moe_checkpoint(tmp_path, mtp_layer=False, tower=False)))
    # per layer: 8 MiB attention + 1 MiB shared expert (TP-sharded) and 4 x 1 MiB experts;
    # embeddings 2 MiB and head 2 MiB (vocab-parallel)
    non_expert = 2 * (8 + 1) + 2 + 2  # 22 MiB
    experts = 2 * 4  # 8 MiB
    assert per_rank(model, tp=2).bytes_per_rank == (non_expert + experts) * MIB // 2
    # DP 2 x TP 2: non-experts over the rank's TP 2, experts over dp x tp = 4
    dp2 = Placement(tp=2, dp=2)
    assert per_rank(model, placement=dp2).bytes_per_rank == (non_expert // 2 + experts // 4) * MIB
    # the same with EP (whole experts, 4 / 4 = 1 per layer): the same bytes
    ep = Placement(tp=2, dp=2, ep=True)
    assert per_rank(model, placement=ep).bytes_per_rank == (11 + 2 * 1) * MIB
    # EPLB: 4 + 2 redundant experts over 4 GPUs -> ceil(6 / 4) = 2 per layer on the busiest
    eplb = Placement(tp=2, dp=2, ep=True, redundant_experts=2)
    assert per_rank(model, placement=eplb).bytes_per_rank == (11 + 2 * 2) * MIB


def test_mtp_layer_loads_only_with_mtp_and_shards_like_the_target(tmp_path: Path) -> None:
    model = planner.load_model(str(moe_checkpoint(tmp_path, tower=False)))
    base = (2 * (8 + 1) + 2 + 2 + 2 * 4) * MIB // 2  # 15 MiB at TP 2, as without the layer
    assert per_rank(model, tp=2).bytes_per_rank == base
    # MTP on: its 4 MiB attention over TP 2 and its 4 x 1 MiB experts over TP 2
    on = per_rank(model, placement=Placement(tp=2, mtp=True)).bytes_per_rank
    assert on == base + (4 + 4) * MIB // 2
    # whole model total counts it either way: 22 + 8 + 8 MiB
    assert per_rank(model, tp=2).total_bytes == 38 * MIB


def test_tower_is_not_a_language_model_layer(tmp_path: Path) -> None:
    model = planner.load_model(str(moe_checkpoint(tmp_path, mtp_layer=False)))
    # the tower's 2 + 2 + 1 MiB sit on the first stage, TP-sharded (mm_encoder_tp_mode
    # "weights"): +2.5 MiB per rank at TP 2, not added to LM layers 0 and 1
    assert per_rank(model, tp=2).bytes_per_rank == (30 + 5) * MIB // 2
    # PP 2: stage 0 = layer 0 (8 + 1 + 4) + embed 2 + tower 5 = 20 MiB; stage 1 = layer 1
    # (13) + head 2 = 15 MiB; TP 1: the busiest is stage 0
    assert per_rank(model, pp=2).bytes_per_rank == 20 * MIB


def test_from_tensors_reads_the_mtp_prefix_of_qwen3_next() -> None:
    # Qwen3-Next keeps its MTP layer under "mtp.*", not model.layers.{L}
    tensors = [
        ("model.layers.0.self_attn.q.weight", {"dtype": "BF16", "shape": [1024, 1024]}),
        ("mtp.layers.0.self_attn.q.weight", {"dtype": "BF16", "shape": [1024, 1024]}),
    ]
    off = from_tensors(tensors, 1, mtp_layers=1)
    on = from_tensors(tensors, 1, mtp_layers=1, placement=Placement(mtp=True))
    assert (off.bytes_per_rank, on.bytes_per_rank) == (2 * MIB, 4 * MIB)


def test_deepseek_v3_dp8_ep_against_tp8_from_the_config() -> None:
    # routed experts: 58 MoE layers x 256 experts x 3 x 7,168 x 2,048 x 1 B (fp8) are spread
    # over 8 GPUs either way; what DP 8 adds is the non-expert part at TP 1 instead of TP 8
    model = planner.load_model("deepseek-v3")
    tp8 = per_rank(model, tp=8).bytes_per_rank
    dp8 = per_rank(model, placement=Placement(tp=1, dp=8, ep=True)).bytes_per_rank
    experts = 58 * 256 * 3 * 7_168 * 2_048
    whole = per_rank(model, tp=1).bytes_per_rank  # everything on one GPU
    non_expert = whole - experts
    assert dp8 == pytest.approx(non_expert + experts / 8, abs=64)
    # ENGINES-SCALE §4.1: the config path gives 79.27 GiB at TP 8 and ~93.9 GiB at DP 8 + EP
    assert tp8 / 2**30 == pytest.approx(79.27, abs=0.01)
    assert dp8 / 2**30 == pytest.approx(93.9, abs=0.1)
    # EPLB with 8 redundant experts: ceil(264 / 8) = 33 local instead of 32, one more expert
    # per MoE layer: 58 x 3 x 7,168 x 2,048 B = 2.55 GB ("≈ 2.4 GB for one redundant expert")
    eplb = per_rank(model, placement=Placement(tp=1, dp=8, ep=True, redundant_experts=8))
    assert eplb.bytes_per_rank - dp8 == 58 * 3 * 7_168 * 2_048


# --------------------------------------------------------------------------- cluster, layouts


def test_dp_ranks_are_independent_pools() -> None:
    dep = Deployment(
        model=planner.load_model("qwen3-30b-a3b"),
        gpu=planner.get_gpu("h100"),
        settings=ServeSettings(tp=1, dp=4, enable_expert_parallel=True, max_model_len=8192),
    )
    p = plan(dep)
    assert p.cluster is not None
    assert p.cluster.gpus == 4
    assert p.cluster.kv_cache_size_tokens == 4 * p.vllm.kv_cache_size_tokens
    assert p.cluster.max_num_seqs == 4 * p.vllm.max_num_seqs  # --max-num-seqs is per DP rank


def test_on_8_h200s_deepseek_v3_holds_most_with_dp_attention() -> None:
    # MLA: TP 8 stores the 576-wide latent on every rank, so its pool is the cluster's;
    # DP 8 + EP gives 8 pools with ~14.6 GiB more weights each (ENGINES-SCALE §4.1 worked
    # example: ~674k tokens at TP 8, ~3.5M for the cluster at DP 8, 5.2x)
    dep = Deployment(
        model=planner.load_model("deepseek-v3"),
        gpu=planner.get_gpu("h200"),
        settings=ServeSettings(tp=8),
    )
    p = plan(dep, PlanOptions(gpus=8))
    by = {(r.tp, r.dp): r for r in p.layouts if r.pp == 1}  # the PP rows come after
    assert set(by) == {(1, 8), (2, 4), (4, 2), (8, 1)}
    assert {(r.tp, r.pp, r.dp) for r in p.layouts if r.pp > 1} == {
        (1, 2, 4),
        (2, 2, 2),
        (4, 2, 1),
        (1, 4, 2),
        (2, 4, 1),
        (1, 8, 1),
    }
    assert by[(8, 1)].yours and not by[(8, 1)].expert_parallel
    assert by[(1, 8)].expert_parallel
    assert by[(8, 1)].cluster_kv_cache_size_tokens == by[(8, 1)].kv_cache_size_tokens
    ratio = by[(1, 8)].cluster_kv_cache_size_tokens / by[(8, 1)].cluster_kv_cache_size_tokens
    assert 4.5 < ratio < 6
    assert best_layout(p.layouts) == by[(1, 8)]
    assert any("--data-parallel-size 8" in n for n in p.notes)


def test_dcp_splits_a_request_over_the_tp_ranks() -> None:
    # DCP 2 at TP 2: a block spans 16 x 2 tokens (resolve_dcp_kv_block_size), so a
    # 8,192-token request needs 8,192 / 32 = 256 blocks instead of 512, and a fixed pool logs
    # twice the tokens
    spec = planner.load_model_spec("llama-3.1-8b")
    plain = planner.estimate(spec, ServeSettings(tp=2, max_model_len=8192))
    dcp = planner.estimate(spec, ServeSettings(tp=2, dcp=2, max_model_len=8192))
    assert plain.vllm is not None and dcp.vllm is not None
    assert (plain.vllm.blocks_per_request, dcp.vllm.blocks_per_request) == (512, 256)
    assert dcp.vllm.bytes_per_block == plain.vllm.bytes_per_block
    with pytest.raises(UsageError, match="must divide --tp 2"):
        ServeSettings(tp=2, dcp=4)


# --------------------------------------------------------------------------- commands


def test_the_vllm_command_carries_every_parallel_and_speculative_flag() -> None:
    result = run_cli(
        "estimate",
        "deepseek-v3",
        "--gpu",
        "h200",
        "--dp",
        "8",
        "--enable-expert-parallel",
        "--num-redundant-experts",
        "32",
        "--speculative-config",
        '{"method":"mtp","num_speculative_tokens":2}',
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    parsed = check_command(data["commands"]["vllm"])
    assert parsed["--data-parallel-size"] == 8
    assert parsed["--enable-expert-parallel"] is True
    assert parsed["--enable-eplb"] is True
    assert parsed["--eplb-config"] == {"num_redundant_experts": 32}
    assert parsed["--speculative-config"] == {"method": "mtp", "num_speculative_tokens": 2}
    assert data["data_parallel_size"] == 8 and data["expert_parallel"] is True
    assert data["cluster"]["kv_cache_size_tokens"] == 8 * data["kv_cache_size_tokens"]
    sp = data["speculative"]
    assert (sp["method"], sp["num_speculative_tokens"], sp["num_lookahead_tokens"]) == ("mtp", 2, 2)
    assert sp["draft_kv_bytes_per_token"] == 576 * 2  # one MLA layer
    assert data["kv_bytes_per_token"] == 62 * 576 * 2
    assert sp["draft_weights_bytes"] > 0
    sglang = check_command(data["commands"]["sglang"])
    assert (sglang["--tp-size"], sglang["--attn-dp-size"], sglang["--ep-size"]) == (8, 8, 8)


def test_two_nodes_get_a_head_and_a_headless_command() -> None:
    result = run_cli(
        "estimate",
        "deepseek-v3",
        "--gpu",
        "h200",
        "--dp",
        "16",
        "--enable-expert-parallel",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    head, other = json.loads(result.stdout)["node_commands"]
    h, o = check_command(head), check_command(other)
    assert h["--data-parallel-size-local"] == o["--data-parallel-size-local"] == 8
    assert "--headless" not in h and o["--headless"] is True
    assert o["--data-parallel-start-rank"] == 8
    assert h["--data-parallel-address"] == o["--data-parallel-address"]
    assert "--headless" in shlex.split(other)


def test_bad_speculative_json_is_one_usage_line() -> None:
    result = run_cli("estimate", "deepseek-v3", "--speculative-config", "{mtp}")
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: --speculative-config must be JSON")
    assert len(result.stderr.strip().splitlines()) == 1


def test_plans_file_takes_the_new_keys(tmp_path: Path) -> None:
    plans = tmp_path / "plans.yaml"
    plans.write_text(
        "deployments:\n"
        "  - name: dsv3\n    model: deepseek-v3\n    gpu: h200\n    dp: 8\n"
        "    enable_expert_parallel: true\n"
        "    speculative_config: {method: mtp, num_speculative_tokens: 1}\n"
        "  - name: typo\n    model: deepseek-v3\n    gpu: h200\n    dp: '8'\n"
    )
    result = run_cli("check", str(plans), "--json")
    data = json.loads(result.stdout)
    assert data["counts"]["passed"] == 1
    assert data["counts"]["invalid"] == 1  # dp: '8' is a string in a typed file
    assert any("dp" in json.dumps(p) for p in data["problems"])


def test_mamba_layers_keep_a_state_page_per_draft_token() -> None:
    # vLLM MambaSpec: num_speculative_blocks = num_speculative_tokens (any method), and the
    # conv state keeps conv_kernel - 1 + k columns (ENGINES.md §1.3). Nemotron-H-56B at TP 1:
    # conv dim 20,480 (intermediate 16,384 + 2 x 8 groups x 256 state), kernel 4, bf16:
    # k = 2 adds 2 columns = 20,480 x 2 x 2 B = 81,920 B per Mamba layer
    config = json.loads(fixture_config("nvidia--Nemotron-H-56B-Base-8K").read_text())
    mamba_layers = config["hybrid_override_pattern"].count("M")
    spec = planner.load_model_spec("nemotron-h-56b")
    ngram = SpeculativeConfig(method="ngram", num_speculative_tokens=2)
    plain = planner.estimate(spec, ServeSettings(enable_prefix_caching=False))
    spec_ = planner.estimate(spec, ServeSettings(enable_prefix_caching=False, speculative=ngram))
    grown = spec_.state_bytes_per_sequence - plain.state_bytes_per_sequence
    assert grown == mamba_layers * 20_480 * 2 * 2
    assert plain.vllm is not None and spec_.vllm is not None
    states = [g for g in spec_.vllm.groups if g.is_state]
    assert {g.blocks_per_request for g in states} == {1 + 2}  # mode "none": 1 + k pages


def test_gpt_oss_with_an_eagle_head_pads_the_window_group(tmp_path: Path) -> None:
    # vLLM's comment in _get_kv_cache_groups_uniform_page_size: gpt-oss-20b + eagle is
    # "12 sw + 13 full ... pad it to (13 sw, 13 full)": a draft layer with the target's full
    # attention spec (8 KV heads x 64, bf16) joins the full group, and 13 < 12 x 1.5 sizes
    # the groups at 13, one padding layer in the window group
    draft = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "num_hidden_layers": 1,
        "intermediate_size": 8192,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(draft))
    settings, _ = load_draft(
        ServeSettings(
            speculative=parse_speculative(
                {"method": "eagle3", "model": str(tmp_path), "num_speculative_tokens": 3}
            )
        )
    )
    est = planner.estimate(planner.load_model_spec("gpt-oss-20b"), settings)
    assert est.vllm is not None
    assert est.vllm.padding_layers == 1
    assert sorted(g.num_layers for g in est.vllm.groups) == [12, 13]


def test_an_eagle_head_shares_the_targets_embeddings() -> None:
    # EAGLE-LLaMA3-Instruct-8B: one Llama layer (q, o 4,096 x 4,096; k, v 4,096 x 1,024;
    # MLP 3 x 4,096 x 14,336; two norms of 4,096) plus fc 2 x 4,096 -> 4,096, bf16; the
    # target's embeddings and lm_head are shared (vLLM's EagleProposer)
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    fc = 2 * 4096 * 4096
    result = run_cli(
        "estimate",
        "llama-3-8b",
        "--gpu",
        "h100",
        "--max-model-len",
        "4096",
        "--speculative-config",
        '{"method":"eagle","model":"eagle-llama3-instruct-8b","num_speculative_tokens":3}',
        "--json",
    )
    data = json.loads(result.stdout)
    assert data["speculative"]["draft_weights_bytes"] == (layer + fc) * 2
    # the command names the draft by the Hub id vLLM loads, not kvplan's catalog name
    command = check_command(data["commands"]["vllm"])
    assert command["--speculative-config"]["model"] == "yuhuili/EAGLE-LLaMA3-Instruct-8B"


def test_plans_file_checks_the_cluster_tokens(tmp_path: Path) -> None:
    # min_kv_tokens is one DP rank's pool (vLLM logs it per EngineCore_DP{i});
    # min_cluster_kv_tokens is dp x that pool
    plans = tmp_path / "plans.yaml"
    entry = (
        "  - name: {name}\n    model: qwen3-30b-a3b\n    gpu: h100\n    max_model_len: 8192\n"
        "    dp: 4\n    enable_expert_parallel: true\n    min_cluster_kv_tokens: {need}\n"
    )
    plans.write_text("deployments:\n" + entry.format(name="a", need=1))
    one = json.loads(run_cli("check", str(plans), "--json").stdout)["deployments"][0]
    per_rank = one["figures"]["kv_cache_size_tokens"]
    plans.write_text(
        "deployments:\n"
        + entry.format(name="fits", need=4 * per_rank)
        + entry.format(name="short", need=4 * per_rank + 1)
    )
    result = run_cli("check", str(plans), "--json")
    assert result.exit_code == 1
    fits, short = json.loads(result.stdout)["deployments"]
    assert (fits["status"], short["status"]) == ("pass", "fail")
    assert fits["settings"]["dp"] == 4


def test_simulate_replays_dp_ranks_and_speculative_lookahead(tmp_path: Path) -> None:
    # 40 identical requests (100 prompt + 20 output tokens) arrive at once on 2 DP ranks:
    # every one completes, each rank's result is kept, and the ranks' counts add up
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 20}) + "\n"
            for _ in range(40)
        )
    )
    result = run_cli(
        "simulate",
        "qwen3-30b-a3b",
        "--gpu",
        "h100",
        "-w",
        str(trace),
        "--dp",
        "2",
        "--enable-expert-parallel",
        "--max-model-len",
        "4096",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    res = json.loads(result.stdout)["runs"][0]["result"]
    assert len(res["ranks"]) == 2
    assert res["completed"] == sum(r["completed"] for r in res["ranks"]) == 40
    assert {r["completed"] for r in res["ranks"]} == {20}  # the balancer splits them evenly
    spec = run_cli(
        "simulate",
        "deepseek-v3",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "-w",
        str(trace),
        "--speculative-config",
        '{"method":"mtp","num_speculative_tokens":3}',
        "--max-model-len",
        "4096",
        "--json",
    )
    assert spec.exit_code == 0, spec.stderr
    notes = json.loads(spec.stdout)["notes"]
    assert any("3 lookahead slot(s)" in n for n in notes)


def test_simulate_sizes_the_pool_as_estimate_does_with_lora_and_a_vision_tower() -> None:
    # the same deployment in both commands: the same KV blocks (LoRA buffers and the tower
    # come out of the same budget)
    for model, extra in (
        ("llama-3.1-8b", ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "64"]),
        ("qwen2.5-vl-7b", ["--limit-mm-per-prompt", '{"image":1,"video":0}']),
    ):
        common = [model, "--gpu", "h100", "--max-model-len", "8192", *extra]
        est = json.loads(run_cli("estimate", *common, "--json").stdout)
        sim = json.loads(
            run_cli(
                "simulate",
                *common,
                "-w",
                "examples/workloads/chat.yaml",
                "--num-requests",
                "50",
                "--json",
            ).stdout
        )
        assert sim["runs"][0]["num_gpu_blocks"] == est["num_gpu_blocks"], model


def test_diagnose_plans_with_the_lora_and_speculative_settings_of_the_log(tmp_path: Path) -> None:
    # the same boot log with LoRA slots and MTP-free n-gram drafting in its non-default args:
    # the plan takes them (weights grow by the LoRA buffers, as estimate's do)
    base = Path("tests/fixtures/logs/vllm-v1-llama8b-h100.log").read_text()
    args = "'max_model_len': 16000, 'gpu_memory_utilization': 0.9}"
    assert args in base
    log = tmp_path / "lora.log"
    log.write_text(
        base.replace(
            args,
            "'max_model_len': 16000, 'gpu_memory_utilization': 0.9, 'enable_lora': True, "
            "'max_loras': 4, 'max_lora_rank': 64, 'speculative_config': {'method': 'ngram', "
            "'num_speculative_tokens': 3, 'prompt_lookup_max': 4}}",
        )
    )
    result = run_cli("diagnose", str(log), "--gpu", "h100", "--json")
    assert result.exit_code in (0, 1), result.stderr
    data = json.loads(result.stdout)
    assert data["settings"]["enable_lora"] is True and data["settings"]["max_loras"] == 4
    assert data["settings"]["speculative"]["method"] == "ngram"
    est = json.loads(
        run_cli(
            "estimate",
            "llama-3.1-8b",
            "--gpu",
            "h100",
            "--max-model-len",
            "16000",
            "--gpu-memory-utilization",
            "0.9",
            "--enable-lora",
            "--max-loras",
            "4",
            "--max-lora-rank",
            "64",
            "--json",
        ).stdout
    )
    weights = next(t for t in data["terms"] if t["name"] == "weights")
    assert weights["plan"] == est["weights_bytes"]  # LoRA buffers counted in both


def test_deepep_buffers_are_counted_where_vllm_reserves_them() -> None:
    # DeepEP's NVLink buffer, VLLM_DEEPEP_BUFFER_SIZE_MB = 1,024 MiB per GPU outside torch
    # (vllm/distributed/device_communicators/all2all.py): non-torch grows by 2^30 B, the KV
    # pool shrinks by as much; the default allgather_reducescatter reserves none
    common = ["deepseek-v3", "--gpu", "h200", "--dp", "8", "--enable-expert-parallel", "--json"]
    plain = json.loads(run_cli("estimate", *common).stdout)
    deepep = json.loads(
        run_cli("estimate", *common, "--all2all-backend", "deepep_high_throughput").stdout
    )
    assert deepep["non_torch_bytes"] - plain["non_torch_bytes"] == 1 << 30
    assert plain["available_kv_bytes"] - deepep["available_kv_bytes"] == 1 << 30
    command = check_command(deepep["commands"]["vllm"])
    assert command["--all2all-backend"] == "deepep_high_throughput"
    bad = run_cli("estimate", "deepseek-v3", "--all2all-backend", "pigeon")
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: --all2all-backend 'pigeon'")
