"""The vLLM memory budget against measured startups, and vLLM's capacity formulas by hand."""

from __future__ import annotations

import json

import pytest

import planner
from planner.activation import activation_peak_bytes
from planner.budget import VllmCapacity, non_torch_bytes, vllm_capacity
from planner.engine_budgets import sglang_mem_fraction_static
from planner.gpus import Gpu, get_gpu
from planner.units import parse_size
from planner.vllm_rules import rules_for
from planner.weights import from_config
from tests.conftest import fixture_config
from tests.helpers import plan_for

GIB = 1 << 30


def spec_of(name: str) -> planner.ModelSpec:
    return planner.load_model_spec(name)


def llama33_70b_fp8() -> planner.ModelSpec:
    # RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic: Llama-3.1-70B geometry, FP8 weights
    # (compressed-tensors, 8-bit float, per channel).
    raw = json.loads(fixture_config("meta-llama--Llama-3.1-70B").read_text())
    raw["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
    }
    return planner.parse_config(
        raw, name="RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", source="test"
    )


# CALIBRATION.md rows: (model, TP, gmu, weights GiB, activation GiB, non-torch GiB,
# KV available GiB as vLLM logged it). H100 79.18 GiB, max_model_len 16000, H100 batch
# defaults (8,192 tokens). Those startups did not subtract the CUDA-graph estimate
# (available = requested - weights - activation - non-torch, e.g. 71.26 - 14.99 - 4.76 - 0.13
# = 51.38), so the budget is computed with cuda_graph_bytes=0.
# NOTE: the gpt-oss-120b row only adds up with gpu_memory_utilization 0.95:
# 75.22 - 64.38 - 7.38 - 0.13 = 3.33.
# The release is v0.11.0 (CALIBRATION.md): the rows are that release's regression targets.
V0110 = rules_for("0.11.0")
CALIBRATION = [
    ("llama-3.1-8b", 1, 0.9, 14.99, 4.76, 0.13, 51.38),
    ("gpt-oss-20b", 1, 0.9, 13.47, 7.38, 0.13, 50.28),
    ("gpt-oss-120b", 1, 0.95, 64.38, 7.38, 0.13, 3.33),
    ("llama-3.3-70b-fp8", 2, 0.9, 33.88, 4.84, 0.55, 32.0),
    ("qwen3-0.6b", 1, 0.9, 1.12, 5.56, 0.13, 64.45),
    ("qwen3-32b", 1, 0.9, 61.03, 5.64, 0.14, 4.45),
]


def load(name: str) -> planner.ModelSpec:
    return llama33_70b_fp8() if name == "llama-3.3-70b-fp8" else spec_of(name)


def capacity_for(
    name: str, tp: int, gmu: float, weights_bytes: int, max_model_len: int = 16000
) -> VllmCapacity:
    spec = load(name)
    h100 = get_gpu("h100")

    def at(n: int) -> planner.KVEstimate:
        return planner.estimate(spec, gpu=h100, tp=tp, max_model_len=n)

    est = at(max_model_len)
    assert est.vllm is not None and est.vllm.max_num_batched_tokens == 8192
    return vllm_capacity(
        est,
        estimate_at=at,
        gpu_memory_bytes=h100.memory_bytes,
        weights_bytes=weights_bytes,
        activation_bytes=activation_peak_bytes(spec, 8192, rules=V0110, tp=tp),
        gpu_memory_utilization=gmu,
        cuda_graph_bytes=0,
        rules=V0110,
    )


@pytest.mark.parametrize(
    ("name", "tp", "gmu", "weights", "act", "non_torch", "kv"),
    CALIBRATION,
    ids=[r[0] for r in CALIBRATION],
)
def test_calibration_rows_available_kv_within_5_percent(
    name: str, tp: int, gmu: float, weights: float, act: float, non_torch: float, kv: float
) -> None:
    cap = capacity_for(name, tp, gmu, round(weights * GIB))
    assert cap.available_kv_bytes / GIB == pytest.approx(kv, rel=0.05)
    # each estimated term is close to the measured one
    assert cap.activation_peak_bytes / GIB == pytest.approx(act, abs=0.1)
    assert cap.non_torch_bytes / GIB == pytest.approx(non_torch, abs=0.02)


@pytest.mark.parametrize(
    ("name", "tp", "gmu", "weights", "act", "non_torch", "kv"),
    CALIBRATION,
    ids=[r[0] for r in CALIBRATION],
)
def test_calibration_rows_weights_from_config_within_1_percent(
    name: str, tp: int, gmu: float, weights: float, act: float, non_torch: float, kv: float
) -> None:
    derived = from_config(load(name), tp=tp).bytes_per_rank / GIB
    assert derived == pytest.approx(weights, rel=0.01)


def test_calibration_70b_fp8_on_one_h100_does_not_start() -> None:
    # 71.26 - 67.72 - 4.84 - 0.13 = -1.43 GiB (logged -1.44: "does not start").
    cap = capacity_for("llama-3.3-70b-fp8", 1, 0.9, round(67.72 * GIB))
    assert cap.available_kv_bytes / GIB == pytest.approx(-1.44, abs=0.05)
    assert not cap.fits and cap.num_gpu_blocks == 0
    assert "No available memory for the cache blocks" in (cap.error or "")


def test_activation_does_not_depend_on_max_model_len() -> None:
    # Qwen3-0.6B measured 5.56 GiB at 16k and 32k alike.
    a = capacity_for("qwen3-0.6b", 1, 0.9, round(1.12 * GIB), max_model_len=16000)
    b = capacity_for("qwen3-0.6b", 1, 0.9, round(1.12 * GIB), max_model_len=32000)
    assert a.activation_peak_bytes == b.activation_peak_bytes


def test_non_torch_grows_with_tensor_parallelism() -> None:
    assert non_torch_bytes(1) < non_torch_bytes(2) == non_torch_bytes(4)


def test_requested_is_ceil_of_total_times_gmu() -> None:
    cap = capacity_for("qwen3-0.6b", 1, 0.9, round(1.12 * GIB))
    assert cap.requested_bytes == -(-get_gpu("h100").memory_bytes * 9 // 10)


# ------------------------------------------------------------------ --kv-cache-memory, exact


def kv_plan(name: str, kv_bytes: int, max_model_len: int) -> VllmCapacity:
    return plan_for(
        spec_of(name), None, kv_cache_memory_bytes=kv_bytes, max_model_len=max_model_len
    ).vllm


def test_kv_cache_memory_full_attention_qwen3_14b() -> None:
    # 6.51 GiB = int(6.51 x 2^30) = 6,990,059,274 B. Block: 40 layers x 16 x 8 kv x 256 x 2 B
    # = 2,621,440 B -> 2,666 blocks. 32,768 tokens = 2,048 blocks per request.
    # concurrency 2,666 / 2,048 = 1.30x; tokens int(1.3017578125 x 32,768) = 42,656.
    cap = kv_plan("qwen3-14b", parse_size("6.51GiB"), 32_768)
    assert cap.num_gpu_blocks == 2_666
    assert cap.kv_cache_size_tokens == 42_656
    assert f"{cap.max_concurrency:.2f}" == "1.30"
    # vLLM 0.33 logs both on one line (kv_cache_utils.update_kv_cache_capacity)
    assert (
        "GPU KV cache size: 42,656 tokens, Maximum concurrency for 32,768 tokens per "
        "request: 1.30x" in cap.log_lines
    )


def test_kv_cache_memory_sliding_window_gemma2() -> None:
    # gemma-2-9b: 2,752,512 B per block (2 groups of 21 layers); 4 GiB -> 1,560 blocks.
    # Request at 8,192: 512 full + 513 sliding blocks = 1,025 (2,048 tokens/step, 2 in flight).
    # vLLM logs the blocks over its 2 groups x 16 (kv_cache_utils.py 0.19.0:1297-1311):
    # 1,560 // 2 x 16 = 12,480 tokens; 1,560 / 1,025 = 1.52 requests of 8,192.
    cap = kv_plan("gemma-2-9b", 4 * GIB, 8_192)
    assert (cap.num_gpu_blocks, cap.blocks_per_request) == (1_560, 1_025)
    assert cap.kv_cache_size_tokens == 12_480
    assert cap.max_concurrency == 1_560 / 1_025


def test_kv_cache_memory_mla_deepseek_v2_lite() -> None:
    # 27 layers x 16 x 576 x 2 B = 497,664 B per block; 2 GiB -> 4,315 blocks; 256 per request.
    cap = kv_plan("deepseek-v2-lite", 2 * GIB, 4_096)
    assert cap.num_gpu_blocks == 4_315
    assert cap.kv_cache_size_tokens == 4_315 * 16  # int(4,315 / 256 x 4,096)


def test_kv_cache_memory_mamba_hybrid_nemotron() -> None:
    # Nemotron-H-56B: 169,082,880 B per block (see test_kv_math); 20 GiB -> 127 blocks;
    # 20 blocks per request -> 6.35x; vLLM logs the blocks over its 7 groups (6 Mamba, 1
    # attention) at the 4,128-token block: 127 // 7 x 4,128 = 74,304 tokens.
    # Each decoding sequence needs a Mamba block: max_num_seqs <= 127.
    cap = kv_plan("nemotron-h-56b", 20 * GIB, 8_192)
    assert cap.num_gpu_blocks == 127
    assert cap.kv_cache_size_tokens == 18 * 4_128 == 74_304
    assert cap.max_concurrency == 127 / 20
    assert cap.mamba_max_num_seqs == 127


def test_admission_error_and_estimated_max_model_len() -> None:
    # Llama-3.1-8B with 1 GiB: the null block leaves 2^30 - 2 MiB = 1,071,644,672 B;
    # 131,072 tokens need 16 GiB; the longest fitting request has 511 blocks = 8,176 tokens.
    cap = kv_plan("llama-3.1-8b", GIB, 131_072)
    assert not cap.fits
    assert cap.estimated_max_model_len == 8_176
    assert "the estimated maximum model length is 8176" in (cap.error or "")
    assert "(16.00 GiB KV cache is needed" in (cap.error or "")


def test_auto_fit_max_model_len() -> None:
    # vLLM's --max-model-len -1 picks the estimated maximum (8,176 for 1 GiB, as above).
    p = plan_for(
        spec_of("llama-3.1-8b"),
        Gpu(name="x", memory_bytes=0, source="test"),
        kv_cache_memory_bytes=GIB,
        max_model_len=-1,
    )
    assert p.estimate.max_model_len == 8_176
    assert p.vllm.fits


# ------------------------------------------------------------------ other engines


def test_sglang_mem_fraction_static_h100_example() -> None:
    # ENGINES.md 2.3: H100 reporting 81,559 MiB, TP 1, non-MLA: reserved 512 + 1.5 x 8,192 +
    # 1/8 x 1,024 + 2 x 256 + 8 x 58 = 13,904 MiB -> (81,559 - 13,904) / 81,559 = 0.83.
    assert sglang_mem_fraction_static(81_559 << 20) == 0.83


def test_trtllm_fraction_applies_after_weights_and_activations() -> None:
    p = plan_for(
        spec_of("llama-3.1-8b"),
        "h100",
        max_model_len=8192,
    )
    trt = next(e for e in p.engines if e.engine == "trtllm")
    free = (
        p.gpu.memory_bytes
        - p.weights.bytes_per_rank
        - p.vllm.activation_peak_bytes
        - p.vllm.non_torch_bytes
    )
    assert trt.available_kv_bytes == int(free * 0.9)
    # 131,072 B per token; tokens rounded down to 32-token blocks
    assert trt.max_total_tokens == (trt.available_kv_bytes // 131_072) // 32 * 32


# ------------------------------------------------- after the pool is allocated (issue 23)

H100_TOTAL = get_gpu("h100").memory_bytes  # 79.18 GiB, as vLLM logs it


def test_gpt_oss_20b_at_gmu_095_on_vllm_019_dies_warming_up_the_sampler() -> None:
    # issue 23's log: 0.19.0 sized a 58.47 GiB pool at gmu 0.95, captured graphs, then
    # "CUDA out of memory occurred when warming up sampler with 1024 dummy requests"; 0.9
    # started. 0.19 does not reuse the activation reservation (vllm_rules), so what runs after
    # sizing must fit outside the request: total - CUDA context - ceil(total x 0.95).
    p = plan_for(
        "gpt-oss-20b",
        "h100",
        max_model_len=16_000,
        vllm_version="0.19.0",
        gpu_memory_utilization=0.95,
    )
    cap = p.vllm
    assert cap.gpu_memory_bytes == H100_TOTAL
    free = H100_TOTAL - GIB // 2 - -(-H100_TOTAL * 95 // 100)
    assert cap.post_allocation_free_bytes == free  # 3.46 GiB
    # graphs 24 layers x (51 PIECEWISE + 51 FULL decode) x 0.20 MiB (not subtracted before
    # 0.20; planner.activation), the compile-range forward over 8,192 tokens, the sampler
    # over 1,024 rows x 201,088 x 4 B x 3.70 + 27 MB
    graphs = 24 * (51 + 51) * round(0.20 * 2**20)
    forward = 8192 * 2 * (3 * 4 * 2880 + 4 * 2880)
    sampler = 1024 * 201_088 * 4 * 3700 // 1000
    assert cap.graphs_after_sizing_bytes == graphs
    assert cap.warmup_bytes == sampler + 27_100_000 + forward
    assert graphs + cap.warmup_bytes > free  # 4.05 > 3.46 GiB
    assert p.outcome == "wont_start" and cap.wont_start_term == "sampler_warmup"
    assert (cap.error or "").startswith(
        "CUDA out of memory occurred when warming up sampler with 1024 dummy requests. "
        "Please try lowering `max_num_seqs` or `gpu_memory_utilization`"
    )
    # the pool was still sized: 58.62 GiB against the logged 58.47
    assert cap.available_kv_bytes / GIB == pytest.approx(58.47, rel=0.01)
    # the changes that start: the highest gmu whose leftover holds it, fewer dummy requests
    top = (H100_TOTAL - GIB // 2 - graphs - cap.warmup_bytes) / H100_TOTAL
    assert cap.start_changes[0] == {"gpu_memory_utilization": int(top * 100) / 100}  # 0.94
    assert "max_num_seqs" in cap.start_changes[1]
    # --enforce-eager alone does not start it: the warm-up by itself (3.57 GiB) is over 3.46
    assert {"enforce_eager": True} not in cap.start_changes
    started = plan_for(
        "gpt-oss-20b",
        "h100",
        max_model_len=16_000,
        vllm_version="0.19.0",
        gpu_memory_utilization=0.9,
    )
    assert started.outcome != "wont_start" and started.vllm.wont_start_term is None


def test_v0110_reuses_the_reservation_gpt_oss_120b_at_095_starts() -> None:
    # CALIBRATION.md (v0.11.0): gpt-oss-120b at 0.95 started with 1.03 GiB of graphs captured
    # after a 3.33 GiB pool; the 7.38 GiB warm-up fits in the activation's reservation
    p = plan_for(
        "gpt-oss-120b",
        "h100",
        max_model_len=16_000,
        vllm_version="0.11.0",
        gpu_memory_utilization=0.95,
    )
    cap = p.vllm
    free = H100_TOTAL - GIB // 2 - -(-H100_TOTAL * 95 // 100) + cap.activation_peak_bytes
    assert cap.post_allocation_free_bytes == free
    assert cap.graphs_after_sizing_bytes + cap.warmup_bytes <= free
    assert cap.fits and cap.wont_start_term is None


def test_from_020_the_graphs_are_in_the_budget_and_nothing_runs_after_it() -> None:
    p = plan_for(
        "gpt-oss-20b",
        "h100",
        max_model_len=16_000,
        vllm_version="0.33.0",
        gpu_memory_utilization=0.95,
    )
    assert p.vllm.graphs_after_sizing_bytes == 0 and p.vllm.cuda_graph_bytes > 0
    assert p.vllm.fits
    eager = plan_for(
        "gpt-oss-20b",
        "h100",
        max_model_len=16_000,
        vllm_version="0.19.0",
        cuda_graph_bytes=0,  # --enforce-eager
        gpu_memory_utilization=0.95,
    )
    assert eager.vllm.graphs_after_sizing_bytes == 0  # --enforce-eager: no graphs at all


def test_a_gpu_partly_used_by_another_process_is_refused_in_vllms_words() -> None:
    # vLLM's request_memory (v1/worker/utils.py 0.33.0:757-765): the snapshot taken after the
    # CUDA context (60 - 0.5 = 59.50 GiB free) is below 0.92 x 79.18 = 72.85 GiB
    p = plan_for("llama-3.1-8b", "h100", max_model_len=16_000, gpu_free_memory_bytes=60 * GIB)
    cap = p.vllm
    assert p.outcome == "wont_start" and cap.wont_start_term == "gpu_free_memory"
    assert cap.error == (
        "Free memory on device (59.50/79.18 GiB) on startup is less than desired GPU memory "
        "utilization (0.92, 72.85 GiB). Decrease GPU memory utilization or reduce GPU memory "
        "used by other processes."
    )
    assert cap.start_changes == ({"gpu_memory_utilization": 0.75},)  # 59.5 / 79.18 = 0.751
    assert cap.log_lines == [f"ValueError: {cap.error}"]  # before any KV line
    # enough free memory: it starts, and the leftover is counted from the free figure
    ok = plan_for("llama-3.1-8b", "h100", max_model_len=16_000, gpu_free_memory_bytes=78 * GIB)
    assert ok.vllm.fits
    assert ok.vllm.post_allocation_free_bytes == (
        78 * GIB - GIB // 2 - ok.vllm.requested_bytes + ok.vllm.activation_peak_bytes
    )


def test_non_torch_by_release_layout_and_interconnect() -> None:
    v11, v19 = rules_for("0.11.0"), rules_for("0.19.0")
    # v0.11.0 (CALIBRATION.md): 0.13 alone, 0.55 at TP 2
    assert non_torch_bytes(1, rules=v11) == round(0.13 * GIB)
    assert non_torch_bytes(2, rules=v11) == round(0.13 * GIB) + round(0.42 * GIB)
    # 0.19: TP 1 0.25 (0.24-0.27 logged); NVLink TP 2/4 2.13 (2.06-2.21); PCIe TP 4 0.39 in
    # 0.19-0.23: gnosia93's 4 x L40S 0.19.0 log, 0.9 x 44.53 - 33.98 weights - 5.11 available
    # - 0.60 activation (tests/data/vllm_startups.json); the same from 0.24 (aws-samples'
    # 4 x L40S 0.24.0 log, -0.5 % with its 48 x 86 graphs at 0.39 MiB subtracted)
    assert non_torch_bytes(1, rules=v19) == round(0.25 * GIB)
    assert non_torch_bytes(4, rules=v19, interconnect="nvlink") == round(0.25 * GIB) + round(
        1.88 * GIB
    )
    assert non_torch_bytes(4, rules=v19, interconnect="pcie") == round(0.25 * GIB) + round(
        0.14 * GIB
    )
    assert non_torch_bytes(4, rules=rules_for("0.24.0"), interconnect="pcie") == round(
        0.25 * GIB
    ) + round(0.14 * GIB)
    # an unknown interconnect reads as NVLink (the larger figure)
    assert non_torch_bytes(2, rules=v19) == non_torch_bytes(2, rules=v19, interconnect="nvlink")
    # pipeline stages alone talk point-to-point: the single-GPU figure (issue 23: 0.07 logged)
    assert non_torch_bytes(1, 4, rules=v19) == non_torch_bytes(1, rules=v19)
    # custom all-reduce off: its three 8 MiB buffers (custom_all_reduce.py 0.19.0:59, :187)
    on = non_torch_bytes(2, rules=v19)
    assert on - non_torch_bytes(2, rules=v19, custom_all_reduce=False) == 24 << 20
    # over PCIe with more than 2 GPUs vLLM turns custom all-reduce off itself
    assert non_torch_bytes(4, rules=v19, interconnect="pcie", custom_all_reduce=False) == (
        non_torch_bytes(4, rules=v19, interconnect="pcie")
    )
    # ROCm: the middle of the two calibration R9700 Llama-3.1-8B start-ups (one vLLM build):
    # 0.98 x 31.98 - 15.0586 weights - 0.34 activation - 15.33 / 12.73 GiB logged pools
    warm = 0.98 * 31.98 - 15.0586 - 0.34 - 15.33
    cold = 0.98 * 31.98 - 15.0586 - 0.34 - 12.73
    assert (round(warm, 2), round(cold, 2)) == (0.61, 3.21)
    assert non_torch_bytes(1, rules=v19, rocm=True) == round(round((warm + cold) / 2, 2) * GIB)


def test_interconnect_setting_and_the_catalog_field() -> None:
    pcie = plan_for("llama-3.1-8b", "h100", tp=2, max_model_len=16_000, interconnect="pcie")
    nvl = plan_for("llama-3.1-8b", "h100", tp=2, max_model_len=16_000, interconnect="nvlink")
    assert nvl.vllm.non_torch_bytes - pcie.vllm.non_torch_bytes == round(1.88 * GIB) - round(
        0.14 * GIB
    )
    # the catalog's field is read where no setting is given
    from dataclasses import replace

    h100_pcie = replace(get_gpu("h100"), interconnect="pcie")
    by_catalog = plan_for("llama-3.1-8b", h100_pcie, tp=2, max_model_len=16_000)
    assert by_catalog.vllm.non_torch_bytes == pcie.vllm.non_torch_bytes


def test_rocm_skips_the_graph_estimate_until_026() -> None:
    # gpu_worker.py 0.19.0:377 "Skip on ROCm/HIP", 0.25.0:478 "current_platform.is_cuda()";
    # included from 0.26.0 ("ROCm is included: #44825", is_cuda_alike(), 0.26.0:495-502)
    from dataclasses import replace

    # (the catalog's "gfx942" is no CUDA capability; Gpu.has_native_fp8 cannot read it yet)
    mi300x = replace(get_gpu("mi300x"), compute_capability=None)
    old = plan_for("llama-3.1-8b", mi300x, max_model_len=16_000, vllm_version="0.24.0")
    new = plan_for("llama-3.1-8b", mi300x, max_model_len=16_000, vllm_version="0.33.0")
    assert old.vllm.cuda_graph_bytes == 0 and old.vllm.graphs_after_sizing_bytes > 0
    assert new.vllm.cuda_graph_bytes > 0 and new.vllm.graphs_after_sizing_bytes == 0
    for version, subtracted in (("0.25.0", False), ("0.26.0", True)):
        p = plan_for("llama-3.1-8b", mi300x, max_model_len=16_000, vllm_version=version)
        assert (p.vllm.cuda_graph_bytes > 0) is subtracted
    assert new.vllm.non_torch_bytes == round(1.91 * GIB)


def test_rocm_custom_all_reduce_only_on_mi300_and_mi350() -> None:
    # platforms/rocm.py 0.33.0:1270-1273: use_custom_allreduce is "gfx94" or "gfx95" in the
    # arch: a Radeon's TP group keeps none of its three 8 MiB buffers (custom_all_reduce.py
    # 0.19.0:59, :187), as --disable-custom-all-reduce takes them off on CUDA
    from planner.budget import custom_all_reduce_runs

    assert [custom_all_reduce_runs(get_gpu(g)) for g in ("mi300x", "mi355x", "h100")] == [
        True,
        True,
        True,
    ]
    assert not any(custom_all_reduce_runs(get_gpu(g)) for g in ("mi250x", "rx-7900-xtx"))
    r9700 = plan_for("llama-3.1-8b", "radeon-ai-pro-r9700", tp=2, max_model_len=8192)
    off = plan_for(
        "llama-3.1-8b",
        "radeon-ai-pro-r9700",
        tp=2,
        max_model_len=8192,
        disable_custom_all_reduce=True,
    )
    assert r9700.vllm.non_torch_bytes == off.vllm.non_torch_bytes
    mi300x = plan_for("llama-3.1-8b", "mi300x", tp=2, max_model_len=8192)
    mi300x_off = plan_for(
        "llama-3.1-8b", "mi300x", tp=2, max_model_len=8192, disable_custom_all_reduce=True
    )
    assert mi300x.vllm.non_torch_bytes - mi300x_off.vllm.non_torch_bytes == 24 << 20


def test_every_amd_catalog_gpu_is_rocm() -> None:
    # the catalog's vendor decides (rx-7900-xtx/-gre name no AMD word): each gets ROCm's
    # non-torch figure and rules, as vLLM's ROCm build runs it
    from planner.budget import ROCM_NON_TORCH_BYTES, is_rocm
    from planner.gpus import GPUS

    amd = [g for g in GPUS if g.vendor == "amd"]
    assert {"rx-7900-xtx", "rx-7900-gre"} <= {g.name for g in amd}
    assert all(is_rocm(g) for g in amd)
    xtx = plan_for("qwen2.5-0.5b", "rx-7900-xtx", max_model_len=4096)
    assert xtx.vllm.non_torch_bytes == ROCM_NON_TORCH_BYTES


def test_nvls_widens_the_non_torch_range_of_a_hopper_nvswitch_group_before_019() -> None:
    # NCCL turns NVLS on for more than 2 Hopper-or-later GPUs on NVSwitch (vllm#9699: "only
    # enabled for n > 2 GPUs", H100/H200) and maps "nvlsTotalSize 2415919104" bytes a GPU
    # (that TP 8 log): up to that much more non-torch memory; not on Ampere, not over
    # PCIe, not at TP 2
    from planner.budget import NVLS_BYTES, nvls_possible

    assert NVLS_BYTES == 2_415_919_104
    h100, a100, h100_pcie = get_gpu("h100"), get_gpu("a100"), get_gpu("h100-pcie")
    assert nvls_possible(h100, 4, "nvlink") and nvls_possible(h100, 8, None)
    assert not nvls_possible(h100, 2, "nvlink")
    assert not nvls_possible(a100, 8, "nvlink")
    assert not nvls_possible(h100, 8, "pcie")
    assert not nvls_possible(h100_pcie, 4, h100_pcie.interconnect)
    tp4 = plan_for("llama-3.1-8b", "h100", tp=4, max_model_len=16_000, vllm_version="0.10.0")
    tp2 = plan_for("llama-3.1-8b", "h100", tp=2, max_model_len=16_000, vllm_version="0.10.0")
    a4 = plan_for("llama-3.1-8b", "a100", tp=4, max_model_len=16_000, vllm_version="0.10.0")
    # the estimate is unchanged: 0.13 alone + 0.42 over NVLink (vllm_rules.py, through 0.18)
    assert (
        tp4.vllm.non_torch_bytes
        == tp2.vllm.non_torch_bytes
        == round(0.13 * GIB) + round(0.42 * GIB)
    )
    assert tp4.vllm.non_torch_range == (0, tp4.vllm.non_torch_bytes + NVLS_BYTES)
    assert tp2.vllm.non_torch_range == (0, round(1.6 * GIB))
    assert a4.vllm.non_torch_range == (0, round(1.6 * GIB))
