"""LoRA slots, weight offload, the CPU KV tier and host RAM.

Every expected figure is arithmetic written out here from the configs (shared/model-configs,
copied to tests/fixtures/configs) and vLLM 0.33's ``create_lora_weights`` shapes as
../shared/ENGINES-SCALE.md §4.4-4.5 quotes them with source lines; the adapters are PEFT files
copied to tests/fixtures/lora-adapters (SOURCES.md there).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from planner.cli import app
from planner.deployment import ServeSettings
from planner.errors import UsageError
from planner.lora import adapter_bytes, buffers, read_adapter, targets_from_adapter
from planner.model.load import load_model
from tests.helpers import check_command, plan_for

runner = CliRunner()
MIB, GIB = 1 << 20, 1 << 30
ADAPTERS = Path(__file__).parent / "fixtures" / "lora-adapters"
LLAMA_ADAPTER = str(ADAPTERS / "AswaniSahoo--llama-task-agent")  # r 16, q/k/v/o_proj
QWEN_ADAPTER_R8 = str(ADAPTERS / "wenhao999999999999--Practice")  # r 8, q/k/v/o_proj
QWEN_ADAPTER_ALL = str(ADAPTERS / "xueyufeizhang--DNLP-TemporalReasoning")  # r 16, 7 modules


def run_cli(*args: str) -> Result:
    return runner.invoke(app, list(args))


def estimate_json(*args: str, code: int = 0) -> dict[str, Any]:
    result = run_cli("estimate", *args, "--json")
    assert result.exit_code == code, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def lora_bytes(model: str, **flags: Any) -> int:
    spec = load_model(model).spec
    return buffers(spec, ServeSettings(enable_lora=True, **flags)).bytes_per_rank


# Llama-3.1-8B: H 4,096, 32 layers, 32 query / 8 KV heads of 128, I 14,336, vocab 128,256.
# One slot at rank r, TP 1, elements (lora_a + lora_b):
#   qkv_proj  3 slices x r x 4,096      + (4,096 + 1,024 + 1,024) x r  = 18,432 r
#   o_proj    r x 4,096                 + 4,096 x r                   =  8,192 r
#   gate_up   2 slices x r x 4,096      + 2 x 14,336 x r              = 36,864 r
#   down_proj r x 14,336                + 4,096 x r                   = 18,432 r
# = 81,920 r a layer, x 32 = 2,621,440 r; embed_tokens and lm_head (LlamaForCausalLM's
# embedding_modules) 2 x (128,256 + 4,096) x r = 264,704 r; in all 2,886,144 r elements, bf16.
LLAMA_8B_PER_RANK = 2 * (32 * 81_920 + 2 * (128_256 + 4_096))


def test_llama_8b_rank_16_one_slot_is_88_mib() -> None:
    expected = 16 * LLAMA_8B_PER_RANK
    assert expected == 92_356_608  # 88.08 MiB (ENGINES-SCALE §4.4 table)
    assert lora_bytes("llama-3.1-8b") == expected
    assert round(expected / MIB, 2) == 88.08


@pytest.mark.parametrize(
    ("rank", "slots", "expected", "gib"),
    [(64, 4, 1_477_705_728, 1.38), (128, 8, 5_910_822_912, 5.50)],
)
def test_llama_8b_buffers_grow_with_rank_times_slots(
    rank: int, slots: int, expected: int, gib: float
) -> None:
    assert slots * rank * LLAMA_8B_PER_RANK == expected
    assert lora_bytes("llama-3.1-8b", max_lora_rank=rank, max_loras=slots) == expected
    assert round(expected / GIB, 2) == gib


def test_llama_70b_at_tp4_rank_16_is_212_mib_per_gpu() -> None:
    # H 8,192, 80 layers, 64 / 8 heads of 128, I 28,672 (7,168 a rank at TP 4), vocab 128,256.
    # lora_a keeps the whole input of a column-parallel layer, lora_b the rank's outputs;
    # a row-parallel layer the reverse; embeddings and lm_head are whole on every rank.
    qkv = 3 * 16 * 8_192 + (2_048 + 256 + 256) * 16  # 10,240 q/k/v outputs / 4
    o = 16 * 2_048 + 8_192 * 16
    gate_up = 2 * 16 * 8_192 + 2 * 7_168 * 16
    down = 16 * 7_168 + 8_192 * 16
    edges = 2 * (128_256 + 8_192) * 16
    expected = 2 * (80 * (qkv + o + gate_up + down) + edges)
    assert expected == 222_380_032
    assert lora_bytes("llama-3.1-70b", tp=4) == expected
    assert round(expected / MIB) == 212


# Qwen3-30B-A3B: H 2,048, 48 layers all MoE, 32 / 4 heads of 128, 128 experts of I 768,
# vocab 151,936, Qwen3MoeForCausalLM lists embed_tokens and lm_head.
Q30_QKV = 3 * 16 * 2_048 + (4_096 + 512 + 512) * 16
Q30_O = 16 * 4_096 + 2_048 * 16
Q30_ROUTER = 16 * 2_048 + 128 * 16  # GateLinear is a ReplicatedLinear: wrapped too
Q30_EXPERT = 2 * 16 * 2_048 + 2 * 768 * 16 + 16 * 768 + 2_048 * 16  # w13 a, w13 b, w2 a, w2 b
Q30_EDGES = 2 * (151_936 + 2_048) * 16


def test_qwen3_30b_a3b_rank_16_is_1_58_gib_mostly_experts() -> None:
    experts = 48 * 128 * Q30_EXPERT
    expected = 2 * (48 * (Q30_QKV + Q30_O + Q30_ROUTER) + experts + Q30_EDGES)
    assert expected == 1_700_880_384
    b = buffers(load_model("qwen3-30b-a3b").spec, ServeSettings(enable_lora=True))
    assert b.bytes_per_rank == expected
    assert round(expected / GIB, 2) == 1.58
    assert b.by_module["experts"] == 2 * experts
    assert 2 * experts / expected > 0.97  # "experts are 98% of it"


def test_qwen3_30b_experts_per_gpu_with_and_without_expert_parallelism() -> None:
    spec = load_model("qwen3-30b-a3b").spec
    # TP 2 without EP: every expert on each GPU, its width split, I 768 / 2 = 384
    tp2 = 2 * 48 * 128 * (2 * 16 * 2_048 + 2 * 384 * 16 + 16 * 384 + 2_048 * 16)
    # DP 2 + EP at TP 1: 64 whole experts a GPU
    ep2 = 2 * 48 * 64 * Q30_EXPERT
    assert buffers(spec, ServeSettings(enable_lora=True, tp=2)).by_module["experts"] == tp2
    ep = ServeSettings(enable_lora=True, dp=2, enable_expert_parallel=True)
    assert buffers(spec, ep).by_module["experts"] == ep2


def test_target_modules_leave_the_experts_out() -> None:
    expected = 2 * 48 * (Q30_QKV + Q30_O)
    assert expected == 26_738_688
    got = lora_bytes("qwen3-30b-a3b", lora_target_modules=("qkv_proj", "o_proj"))
    assert got == expected
    # the PEFT names of the packed parts select the packed module, as vLLM's
    # is_in_target_modules does; an expert projection's name does not select the experts
    peft = lora_bytes("qwen3-30b-a3b", lora_target_modules=("q_proj", "o_proj", "gate_proj"))
    assert peft == expected


def test_a_target_module_the_model_lacks_is_a_warning() -> None:
    p = plan_for(
        "llama-3.1-8b",
        "h100",
        max_model_len=8192,
        enable_lora=True,
        lora_target_modules=("qkv", "o_proj"),
    )
    assert p.weights.lora_bytes_per_rank == 2 * 32 * 8_192 * 16  # o_proj only
    assert any("--lora-target-modules qkv: no such module" in w for w in p.warnings)


def test_fully_sharded_loras_split_the_rank_over_tp() -> None:
    # Llama-3.1-8B at TP 2, rank 16: fully sharded, a column layer's lora_a holds r / 2 rows
    # and a row layer's lora_b out / 2 (base_linear.py create_lora_weights)
    qkv = 3 * 8 * 4_096 + (2_048 + 512 + 512) * 16
    o = 16 * 2_048 + 2_048 * 16
    gate_up = 2 * 8 * 4_096 + 2 * 7_168 * 16
    down = 16 * 7_168 + 2_048 * 16
    expected = 2 * (32 * (qkv + o + gate_up + down) + 2 * (128_256 + 4_096) * 16)
    assert lora_bytes("llama-3.1-8b", tp=2, fully_sharded_loras=True) == expected


def test_pipeline_stages_each_hold_their_layers_buffers() -> None:
    # PP 2: 16 layers each; embed_tokens on the first stage, lm_head on the last
    b = buffers(load_model("llama-3.1-8b").spec, ServeSettings(enable_lora=True, pp=2))
    stage = 2 * 16 * (16 * 81_920 + 128_256 + 4_096)
    assert b.stage_bytes == (stage, stage)


def test_lora_counts_inside_the_weights_as_vllm_profiles_it() -> None:
    plain = plan_for("llama-3.1-8b", "h100", max_model_len=8192)
    lora = plan_for("llama-3.1-8b", "h100", max_model_len=8192, enable_lora=True)
    assert lora.weights.lora_bytes_per_rank == 92_356_608
    assert lora.weights.bytes_per_rank == plain.weights.bytes_per_rank + 92_356_608
    # and vLLM >= 0.19 captures every CUDA graph twice with LoRA on (without adapters and with
    # them: v1/cudagraph_dispatcher.py 0.19.0:110-126), which the graph term doubles
    assert lora.vllm.cuda_graph_bytes == 2 * plain.vllm.cuda_graph_bytes
    graphs = plain.vllm.cuda_graph_bytes
    assert lora.vllm.available_kv_bytes == plain.vllm.available_kv_bytes - 92_356_608 - graphs
    data = estimate_json("llama-3.1-8b", "--gpu", "h100", "--enable-lora")
    assert data["lora_bytes"] == 92_356_608
    assert data["lora"]["max_lora_rank"] == 16 and data["lora"]["max_loras"] == 1
    plain_json = estimate_json("llama-3.1-8b", "--gpu", "h100")
    assert data["weights_bytes"] == plain_json["weights_bytes"] + 92_356_608
    assert plain_json["lora_bytes"] == 0 and plain_json["lora"] is None


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ({"enable_lora": True, "max_lora_rank": 7}, "MaxLoRARanks"),
        ({"enable_lora": True, "max_loras": 4, "max_cpu_loras": 2}, "at least --max-loras"),
        ({"max_loras": 4}, "needs --enable-lora"),
        ({"kv_offloading_size": 0.0}, "positive"),
        ({"kv_offloading_backend": "lmcache"}, "needs --kv-offloading-size"),
        ({"kv_offloading_size": 8.0, "kv_offloading_backend": "disk"}, "native, lmcache"),
    ],
)
def test_settings_vllm_refuses(flags: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError, match=words):
        ServeSettings(**flags)


def test_expert_parallel_with_fully_sharded_loras_is_refused_on_moe() -> None:
    spec = load_model("qwen3-30b-a3b").spec
    s = ServeSettings(enable_lora=True, dp=2, enable_expert_parallel=True, fully_sharded_loras=True)
    with pytest.raises(UsageError, match="_verify_ep_fs"):
        buffers(spec, s)


def test_a_model_without_lora_support_is_refused() -> None:
    spec = load_model("falcon-7b-instruct").spec
    with pytest.raises(UsageError, match="no LoRA for FalconForCausalLM"):
        buffers(spec, ServeSettings(enable_lora=True))


def test_cli_refusals_are_one_line_usage_errors() -> None:
    result = run_cli(
        "estimate", "llama-3.1-8b", "--gpu", "h100", "--enable-lora", "--max-lora-rank", "24"
    )
    assert result.exit_code == 2 and "Error: --max-lora-rank must be one of" in result.output
    result = run_cli("estimate", "llama-3.1-8b", "--gpu", "h100", "--swap-space", "4")
    assert result.exit_code == 2
    assert "no swap space" in result.output and "recomputing" in result.output
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- adapters


def test_reading_an_adapter_takes_its_rank_and_targets() -> None:
    adapter = read_adapter(LLAMA_ADAPTER)
    assert adapter.rank == 16
    assert set(adapter.target_modules or ()) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    spec = load_model("llama-3.1-8b").spec
    assert targets_from_adapter(spec, adapter) == ("qkv_proj", "o_proj")
    # the CPU copy of one adapter: r x (in + out) per trained matrix, whole, bf16:
    # q and o 16 x (4,096 + 4,096), k and v 16 x (4,096 + 1,024), 32 layers
    per_layer = 2 * 16 * 8_192 + 2 * 16 * 5_120
    assert adapter_bytes(spec, 16, adapter.target_modules) == 2 * 32 * per_layer == 27_262_976


def test_the_adapter_sizes_the_buffers_and_the_command_serves_it() -> None:
    data = estimate_json(
        "llama-3.1-8b", "--gpu", "h100", "--enable-lora", "--lora-adapter", LLAMA_ADAPTER
    )
    # qkv_proj and o_proj only, rank 16: (18,432 + 8,192) x 16 x 32 layers x 2 B
    assert data["lora_bytes"] == 2 * 32 * (18_432 + 8_192) * 16 == 27_262_976
    assert data["lora"]["target_modules"] == ["qkv_proj", "o_proj"]
    # the note says what the restriction saves against every module: 92,356,608 - 27,262,976
    assert any("65,093,632" in n or "62.08 MiB" in n for n in data["plan_notes"])
    args = check_command(data["commands"]["vllm"])
    assert args["--enable-lora"] is True and args["--max-lora-rank"] == 16
    assert args["--lora-target-modules"] == ["qkv_proj", "o_proj"]
    assert args["--lora-modules"] == [f"AswaniSahoo--llama-task-agent={LLAMA_ADAPTER}"]
    # host RAM: one adapter (max_cpu_loras defaults to max_loras 1) on the one worker
    assert data["host_ram_bytes"]["lora_cpu_cache"] == 27_262_976


def test_an_adapter_of_rank_8_sizes_rank_8_slots() -> None:
    # Qwen2.5-7B (H 3,584, 28 layers, 28 / 4 heads of 128): r 8, q/k/v/o_proj; Qwen2 lists
    # no embedding_modules, so no embed_tokens / lm_head buffers
    qkv = 3 * 8 * 3_584 + (3_584 + 512 + 512) * 8
    o = 8 * 3_584 + 3_584 * 8
    data = estimate_json(
        "qwen2.5-7b-instruct",
        "--gpu",
        "l40s",
        "--enable-lora",
        "--lora-adapter",
        QWEN_ADAPTER_R8,
        "--max-model-len",
        "8192",
    )
    assert data["lora"]["max_lora_rank"] == 8
    assert data["lora_bytes"] == 2 * 28 * (qkv + o)


def test_a_rank_above_the_adapters_is_a_warning_with_what_it_frees() -> None:
    result = run_cli(
        "estimate",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--enable-lora",
        "--lora-adapter",
        LLAMA_ADAPTER,
        "--max-lora-rank",
        "64",
        "--json",
    )
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    # rank 64 against 16 on qkv_proj + o_proj: (64 - 16) x 26,624 x 32 x 2 B = 81,788,928
    assert data["lora_bytes"] == 64 * 26_624 * 32 * 2
    assert any("above the adapter's rank 16" in w and "78.00 MiB" in w for w in data["warnings"])


def test_an_adapter_rank_above_max_lora_rank_is_refused() -> None:
    result = run_cli(
        "estimate",
        "qwen2.5-7b-instruct",
        "--gpu",
        "l40s",
        "--enable-lora",
        "--lora-adapter",
        QWEN_ADAPTER_ALL,
        "--max-lora-rank",
        "8",
    )
    assert result.exit_code == 2 and "vLLM refuses to load it" in result.output


def test_target_modules_in_vllms_nargs_spelling() -> None:
    data = estimate_json(
        "qwen3-30b-a3b",
        "--gpu",
        "h200",
        "--enable-lora",
        "--lora-target-modules",
        "qkv_proj",
        "o_proj",
        "--max-model-len",
        "8192",
    )
    assert data["lora"]["target_modules"] == ["qkv_proj", "o_proj"]
    assert data["lora_bytes"] == 26_738_688


# --------------------------------------------------------------------------- offload


def test_cpu_offload_moves_weights_to_pinned_host_memory() -> None:
    plain = plan_for("llama-3.1-8b", "h100", max_model_len=8192)
    off = plan_for("llama-3.1-8b", "h100", max_model_len=8192, cpu_offload_gb=4.0)
    assert off.weights.bytes_per_rank == plain.weights.bytes_per_rank - 4 * GIB
    assert off.weights.offloaded_bytes_per_rank == 4 * GIB
    assert off.host_ram.pinned_weights == 4 * GIB
    # two GPUs offload 4 GiB each
    tp2 = plan_for("llama-3.1-8b", "h100", max_model_len=8192, cpu_offload_gb=4.0, tp=2)
    assert tp2.host_ram.pinned_weights == 8 * GIB
    assert any("Model Runner V2" in n for n in off.notes)


def test_cpu_offload_on_a_0_2x_release_is_a_warning() -> None:
    p = plan_for(
        "llama-3.1-8b", "h100", max_model_len=8192, cpu_offload_gb=2.0, vllm_version="0.25.1"
    )
    assert any("may do nothing" in w for w in p.warnings)
    assert p.weights.offloaded_bytes_per_rank == 2 * GIB  # still planned as asked


def test_native_kv_tier_tokens_for_llama_8b() -> None:
    # TP 1: a block is 16 tokens x 131,072 B = 2 MiB (page-aligned already); 64 GiB of CPU
    # tier is 64 x 2^30 // 2^21 = 32,768 blocks = 524,288 tokens
    data = estimate_json("llama-3.1-8b", "--gpu", "h100", "--kv-offloading-size", "64")
    assert data["cpu_kv_tokens"] == 32_768 * 16 == 524_288
    tier = data["kv_offload"]
    assert tier["copies"] == 1 and tier["cpu_blocks"] == 32_768
    assert tier["ratio_to_gpu_pool"] == round(32_768 / data["num_gpu_blocks"], 4)
    assert data["host_ram_bytes"]["kv_offload"] == 64 * GIB
    # TP 2: a rank's block is 1 MiB, both ranks' pages in one CPU block: the same tokens
    tp2 = estimate_json("llama-3.1-8b", "--gpu", "h100", "--tp", "2", "--kv-offloading-size", "64")
    assert tp2["kv_offload"]["copies"] == 2 and tp2["cpu_kv_tokens"] == 524_288


def test_mla_keeps_one_copy_in_the_cpu_tier() -> None:
    # DeepSeek-V2-Lite: 27 MLA layers of (512 + 64) x 2 B; a 16-token block is
    # 27 x 16 x 1,152 = 497,664 B, the same on both TP ranks (replicated latent), so the CPU
    # keeps one copy, page-aligned to 122 x 4,096 = 499,712 B
    data = estimate_json(
        "deepseek-v2-lite", "--gpu", "h100", "--tp", "2", "--kv-offloading-size", "32"
    )
    blocks = 32 * GIB // 499_712
    assert data["kv_offload"]["copies"] == 1
    assert data["kv_offload"]["cpu_block_bytes"] == 499_712
    assert data["cpu_kv_tokens"] == blocks * 16


def test_a_cpu_tier_smaller_than_the_gpu_pool_only_mirrors_it() -> None:
    # 1 GiB is 512 blocks of 2 MiB; an H100 holds tens of thousands
    result = run_cli(
        "estimate", "llama-3.1-8b", "--gpu", "h100", "--kv-offloading-size", "1", "--json"
    )
    data = json.loads(result.stdout)
    assert data["kv_offload"]["mirrors_only"] is True
    assert any("only mirrors" in w for w in data["warnings"])


def test_lmcache_capacity_lives_in_the_lmcache_server() -> None:
    data = estimate_json(
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--kv-offloading-size",
        "64",
        "--kv-offloading-backend",
        "lmcache",
    )
    assert data["cpu_kv_tokens"] is None
    assert data["host_ram_bytes"]["kv_offload"] == 0
    assert any("LMCache server" in n for n in data["plan_notes"])
    args = check_command(data["commands"]["vllm"])
    assert args["--kv-offloading-backend"] == "lmcache" and args["--kv-offloading-size"] == 64.0


# --------------------------------------------------------------------------- host RAM


def test_every_plan_has_a_host_ram_line() -> None:
    data = estimate_json("llama-3.1-8b", "--gpu", "h100")
    assert data["host_ram_bytes"] == {
        "total": 0,
        "kv_offload": 0,
        "pinned_weights": 0,
        "lora_cpu_cache": 0,
        "mm_processor_cache": 0,
    }
    result = run_cli("estimate", "llama-3.1-8b", "--gpu", "h100")
    assert "Host RAM: none held" in result.output


def test_host_ram_adds_its_parts() -> None:
    # --kv-offloading-size 32 (one engine) + 2 GPUs x 2 GiB offloaded + LoRA: 4 CPU slots of
    # a rank-16 adapter of every module, whole (92,356,608 B), on each of the 2 workers
    args = (
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--kv-offloading-size",
        "32",
        "--cpu-offload-gb",
        "2",
        "--enable-lora",
        "--max-cpu-loras",
        "4",
    )
    data = estimate_json(*args)
    ram = data["host_ram_bytes"]
    assert ram["kv_offload"] == 32 * GIB
    assert ram["pinned_weights"] == 2 * 2 * GIB
    assert ram["lora_cpu_cache"] == 4 * 92_356_608 * 2
    assert ram["total"] == 32 * GIB + 4 * GIB + 4 * 92_356_608 * 2
    result = run_cli("estimate", *args)
    lines = result.output.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("Host RAM"))
    shown = " ".join(lines[at : at + 2])  # the parts go on a second line past 80 columns
    assert "KV tier 32.00 GiB" in shown and "offloaded weights 4.00 GiB" in shown
    assert all(len(x) <= 80 for x in lines[at : at + 2])


def test_a_multimodal_model_keeps_processor_caches() -> None:
    # mm_processor_cache_gb 4 in each API server (api_server_count defaults to the DP size)
    # and each engine core: 4 GiB x (1 + 1) at DP 1
    data = estimate_json("qwen2.5-vl-7b-instruct", "--gpu", "h100", "--max-model-len", "8192")
    assert data["host_ram_bytes"]["mm_processor_cache"] == 8 * GIB


# --------------------------------------------------------------------------- commands, check


def test_the_vllm_command_carries_every_flag_the_plan_assumed() -> None:
    data = estimate_json(
        "qwen3-30b-a3b",
        "--gpu",
        "h200",
        "--enable-lora",
        "--max-loras",
        "2",
        "--max-cpu-loras",
        "8",
        "--max-lora-rank",
        "32",
        "--cpu-offload-gb",
        "0.5",
        "--kv-offloading-size",
        "200",
        "--max-model-len",
        "8192",
    )
    args = check_command(data["commands"]["vllm"])
    assert args["--max-loras"] == 2 and args["--max-lora-rank"] == 32
    assert args["--max-cpu-loras"] == 8
    assert args["--cpu-offload-gb"] == 0.5 and args["--kv-offloading-size"] == 200.0
    assert args["--kv-offloading-backend"] == "native"
    # pasted back into kvplan, the same plan
    words = shlex.split(data["commands"]["vllm"])[3:]
    again = estimate_json("qwen3-30b-a3b", "--gpu", "h200", *words)
    assert again["lora_bytes"] == data["lora_bytes"]
    assert again["cpu_kv_tokens"] == data["cpu_kv_tokens"]


def test_plans_files_take_the_keys(tmp_path: Path) -> None:
    from planner.check import check_file

    (tmp_path / "adapters").mkdir()
    target = tmp_path / "adapters" / "mine"
    target.mkdir()
    (target / "adapter_config.json").write_text(
        (Path(LLAMA_ADAPTER) / "adapter_config.json").read_text()
    )
    plans = tmp_path / "plans.yaml"
    plans.write_text(
        "deployments:\n"
        "  - {name: a, model: llama-3.1-8b, gpu: h100, max_model_len: 8192, enable_lora: true,"
        " max_loras: 2, lora_adapter: adapters/mine, kv_offloading_size: 64,"
        " cpu_offload_gb: 1}\n"
        "  - {name: b, model: llama-3.1-8b, gpu: h100, swap_space: 4}\n"
    )
    report = check_file(str(plans))
    problems = [p.message for p in report.problems]
    assert any("no swap space" in m for m in problems)
    (a,) = report.results
    assert a.status == "pass"
