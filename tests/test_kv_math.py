"""KV bytes per token and per sequence for vLLM, against arithmetic written out here.

Geometry in each row is copied from the model's published config.json (fixtures); the expected
bytes are computed in the test from the engines' formulas (shared/ENGINES.md), never from kvplan.
"""

from __future__ import annotations

import pytest

import planner
from planner import Engine, KVDtype, cdiv
from planner.deployment import ServeSettings
from tests.conftest import fixture_config

# (fixture folder, attention layers, attention heads, total KV heads, head size, comment)
# bytes/token/rank = layers * max(1, kv // tp) * 2 (K and V) * head * dtype_bytes, when vLLM
# accepts the split: heads % tp == 0 and (kv % tp == 0 if kv >= tp else tp % kv == 0).
GQA_MODELS = [
    ("meta-llama--Llama-3.1-8B", 32, 32, 8, 128, "32 L x 8 kv x 128; TP1 bf16 = 131,072"),
    ("meta-llama--Llama-3.1-70B", 80, 64, 8, 128, "80 L x 8 kv x 128; TP1 bf16 = 327,680"),
    ("Qwen--Qwen2.5-7B-Instruct", 28, 28, 4, 128, "28 heads: TP 8 is refused"),
    ("Qwen--Qwen3-8B", 36, 32, 8, 128, "explicit head_dim 128"),
    ("mistralai--Mistral-7B-v0.1", 32, 32, 8, 128, "every layer sliding (4096); per-token same"),
    ("google--gemma-2-9b-it", 42, 16, 8, 256, "head_dim 256 != 3584/16; 21 sliding + 21 full"),
    ("google--medgemma-27b-it", 62, 32, 16, 128, "text_config nested (Gemma 3 VLM)"),
    ("openai--gpt-oss-20b", 24, 64, 8, 64, "alternating sliding(128)/full"),
    ("meta-llama--Llama-4-Scout-17B-16E-Instruct", 48, 40, 8, 128, "36 chunked + 12 NoPE full"),
    ("THUDM--chatglm3-6b", 28, 32, 2, 128, "multi_query_group_num 2; TP 4/8 replicate"),
    ("tiiuae--falcon-40b", 60, 128, 8, 64, "RefinedWeb: n_head_kv 8, hidden 8192 forces new arch"),
    ("Qwen--Qwen3-Next-80B-A3B-Thinking", 12, 16, 2, 256, "only every 4th layer is attention"),
    ("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 6, 32, 2, 128, "6 '*' layers in the pattern"),
]
# MLA: bytes/token/rank = layers * (kv_lora_rank 512 + qk_rope 64) * dtype, NOT divided by TP.
MLA_MODELS = [
    ("deepseek-ai--DeepSeek-V3", 61),  # 61 * 576 * 2 = 70,272 (ENGINES.md 1.11)
    ("deepseek-ai--DeepSeek-V2-Lite", 27),  # 27 * 576 * 2 = 31,104
    ("moonshotai--Kimi-K2-Instruct", 61),
]
TP_SIZES = [1, 2, 4, 8]
DTYPES = [(KVDtype.AUTO, 2), (KVDtype.FP8, 1)]  # every model here is bf16/fp16 -> 2 bytes


def load(folder: str) -> planner.ModelSpec:
    return planner.load_model_spec(str(fixture_config(folder)))


@pytest.mark.parametrize("tp", TP_SIZES)
@pytest.mark.parametrize(("kv_dtype", "dtype_bytes"), DTYPES)
@pytest.mark.parametrize(
    ("folder", "layers", "heads", "kv_heads", "head", "why"),
    GQA_MODELS,
    ids=[m[0] for m in GQA_MODELS],
)
def test_gqa_bytes_per_token(
    folder: str,
    layers: int,
    heads: int,
    kv_heads: int,
    head: int,
    why: str,
    tp: int,
    kv_dtype: KVDtype,
    dtype_bytes: int,
) -> None:
    splits = heads % tp == 0 and (kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0)
    if not splits:
        with pytest.raises(planner.UsageError, match=f"--tp {tp} does not divide"):
            planner.estimate(load(folder), tp=tp, kv_cache_dtype=kv_dtype)
        return
    expected = layers * max(1, kv_heads // tp) * 2 * head * dtype_bytes
    est = planner.estimate(load(folder), tp=tp, kv_cache_dtype=kv_dtype)
    assert est.kv_bytes_per_token == expected
    assert est.kv_heads_per_rank == max(1, kv_heads // tp)


@pytest.mark.parametrize("tp", TP_SIZES)
@pytest.mark.parametrize(("kv_dtype", "dtype_bytes"), DTYPES)
@pytest.mark.parametrize(("folder", "layers"), MLA_MODELS, ids=[m[0] for m in MLA_MODELS])
def test_mla_bytes_per_token_not_split_by_tp(
    folder: str, layers: int, tp: int, kv_dtype: KVDtype, dtype_bytes: int
) -> None:
    est = planner.estimate(load(folder), tp=tp, kv_cache_dtype=kv_dtype)
    assert est.kv_bytes_per_token == layers * (512 + 64) * dtype_bytes
    assert est.attention_type == "MLA"


def test_mla_is_not_counted_as_expanded_heads() -> None:
    # The mistake calculators make: 128 heads x (192 + 128) x 2 B = 81,920 B/token/layer for
    # DeepSeek-V3 (transformers 4.x expanded cache) vs the 1,152 B latent vLLM stores.
    est = planner.estimate(load("deepseek-ai--DeepSeek-V3"))
    assert est.mha_bytes_per_token == 61 * 128 * (128 + 64 + 128) * 2
    assert est.mha_bytes_per_token // est.kv_bytes_per_token == 71  # 81,920 / 1,152 = 71.1


@pytest.mark.parametrize(
    ("folder", "attention_type"),
    [
        ("meta-llama--Llama-2-7b-hf", "MHA"),  # 32 heads, 32 kv heads
        ("meta-llama--Llama-3.1-8B", "GQA"),
        ("tiiuae--falcon-7b-instruct", "MQA"),  # multi_query, old architecture -> 1 kv head
        ("google--gemma-3-1b-it", "MQA + sliding"),  # 1 kv head, 5:1 local/global
        ("deepseek-ai--DeepSeek-V2-Lite", "MLA"),
        ("Qwen--Qwen3-Next-80B-A3B-Thinking", "hybrid GQA + linear"),
        ("nvidia--Nemotron-H-56B-Base-8K", "hybrid GQA + mamba"),
        ("state-spaces--mamba-2.8b-hf", "attention-free (mamba)"),
    ],
)
def test_attention_type_names(folder: str, attention_type: str) -> None:
    assert load(folder).attention_type == attention_type


def test_falcon_7b_mqa_bytes() -> None:
    # 32 layers x 1 kv head x 2 x (4544 / 71 = 64) x 2 B = 8,192 B/token
    assert planner.estimate(load("tiiuae--falcon-7b-instruct")).kv_bytes_per_token == 8192


# ------------------------------------------------------------------ per-sequence bytes (vLLM)


def test_full_attention_sequence_block_rounding() -> None:
    # Llama-3.1-8B, block 16: page = 16 x 8 x 256 x 2 = 65,536 B; 32 layers -> 2 MiB per block.
    # 1,000 tokens -> cdiv(1000, 16) = 63 blocks -> 63 x 2,097,152 B.
    est = planner.estimate(load("meta-llama--Llama-3.1-8B"), max_model_len=1000)
    assert est.vllm is not None
    assert est.vllm.bytes_per_block == 2_097_152
    assert est.vllm.blocks_per_request == 63
    assert est.kv_bytes_per_sequence == 63 * 2_097_152


@pytest.mark.parametrize(("tokens", "blocks"), [(16, 1), (17, 2), (32, 2), (33, 3)])
def test_page_boundaries(tokens: int, blocks: int) -> None:
    # vLLM's page tests: 16 tokens -> 1 page, 17 -> 2.
    est = planner.estimate(load("meta-llama--Llama-3.1-8B"), max_model_len=tokens)
    assert est.vllm is not None and est.vllm.blocks_per_request == blocks


def test_gpt_oss_sliding_sequence_matches_engines_worked_example() -> None:
    # ENGINES.md 1.11: gpt-oss (36 layers, SW 128 / full alternating, 8 kv x 64, bf16),
    # block 16, max_num_batched_tokens 8192, async -> in flight 16,384.
    # page = 16 x 8 x 128 x 2 = 32,768 B; 2 groups x 18 layers -> 589,824 B per block.
    # full: 131,072 / 16 = 8,192 blocks; SW: cdiv(min(127 + 16,384, L), 16) + 1 = 1,033.
    est = planner.estimate(load("openai--gpt-oss-120b"), max_num_batched_tokens=8192)
    assert est.vllm is not None
    assert est.vllm.bytes_per_block == 589_824
    assert sorted(g.blocks_per_request for g in est.vllm.groups) == [1_033, 8_192]
    assert est.kv_bytes_per_sequence == 9_225 * 589_824


def test_mistral_sliding_window_every_layer() -> None:
    # Mistral-7B-v0.1: no layer_types, sliding_window 4096 -> every layer sliding (vLLM's
    # CacheConfig.sliding_window). L = 32,768, default tokens 2048 -> in flight 4,096.
    # blocks = cdiv(min(4,095 + 4,096, 32,768), 16) + 1 = 512 + 1 = 513; block = 2 MiB.
    est = planner.estimate(load("mistralai--Mistral-7B-v0.1"))
    assert est.vllm is not None
    assert [g.kind for g in est.vllm.groups] == ["sliding"]
    assert est.kv_bytes_per_sequence == 513 * 32 * 65_536


def test_explicit_null_sliding_window_is_full_attention() -> None:
    # Mistral-7B-Instruct-v0.3 writes "sliding_window": null: full attention, 32,768 tokens
    # -> 2,048 blocks x 2 MiB. (The class default of 4096 must not be filled in.)
    est = planner.estimate(load("mistralai--Mistral-7B-Instruct-v0.3"))
    assert est.layer_groups[0].kind == "full"
    assert est.kv_bytes_per_sequence == 2_048 * 32 * 65_536


def test_gemma2_interleaved_sequence() -> None:
    # gemma-2-9b: 42 layers, even ones sliding (4096), 8 kv x 256 -> page 16 x 8 x 512 x 2 =
    # 131,072 B; 2 groups of 21 -> 2,752,512 B per block. L = 8,192:
    # full 512 blocks; SW cdiv(min(4,095 + 4,096, 8,192), 16) + 1 = 513 -> 1,025 blocks.
    est = planner.estimate(load("google--gemma-2-9b-it"))
    assert est.vllm is not None
    assert est.vllm.bytes_per_block == 21 * 131_072
    assert est.kv_bytes_per_sequence == 1_025 * 21 * 131_072


def test_gemma3_27b_groups_and_padding() -> None:
    # ENGINES.md 1.4: Gemma-3-27B, 52 sliding + 10 full -> group_size 10 -> 1 full group +
    # 6 SW groups (9, 9, 9, 9, 8, 8); 6 x 10 - 52 = 8 padding layers.
    est = planner.estimate(load("google--medgemma-27b-it"), max_model_len=32_768)
    assert est.vllm is not None
    sizes = sorted((g.kind, g.num_layers) for g in est.vllm.groups)
    assert sizes == [("full", 10)] + [("sliding", n) for n in (8, 8, 9, 9, 9, 9)]
    assert est.vllm.padding_layers == 8
    # page = 16 x 16 kv x 256 x 2 = 131,072 B; bytes per block = 10 x page.
    # full: 2,048 blocks; each SW group: cdiv(min(1,023 + 4,096, L), 16) + 1 = 320 + 1 = 321.
    assert est.vllm.bytes_per_block == 10 * 131_072
    assert est.vllm.blocks_per_request == 2_048 + 6 * 321


def test_llama4_chunked_local() -> None:
    # Llama-4-Scout: 48 layers, no_rope_layers empty -> every 4th layer NoPE full (12), the
    # rest chunked (36, chunk 8192). page = 16 x 8 x 256 x 2 = 65,536 B. Buckets 36 / 12 ->
    # group size 12 -> 3 chunked groups + 1 full; 12 x 65,536 = 786,432 B per block.
    # L = 32,768: full 2,048 blocks; chunked cdiv(min(8,192 + 4,096, L), 16) = 768 per group.
    est = planner.estimate(load("meta-llama--Llama-4-Scout-17B-16E-Instruct"), max_model_len=32_768)
    assert est.vllm is not None
    assert est.vllm.bytes_per_block == 786_432
    assert est.vllm.blocks_per_request == 2_048 + 3 * 768
    assert est.kv_bytes_per_sequence == (2_048 + 3 * 768) * 786_432


def test_mla_sequence() -> None:
    # DeepSeek-V2-Lite at 4,096 tokens: page = 16 x 576 x 2 = 18,432 B; 27 layers ->
    # 497,664 B per block; 256 blocks. Same at TP 8 (latent not split).
    for tp in (1, 8):
        est = planner.estimate(load("deepseek-ai--DeepSeek-V2-Lite"), max_model_len=4096, tp=tp)
        assert est.kv_bytes_per_sequence == 256 * 27 * 18_432


def test_nemotron_h_hybrid_block_alignment_and_padding() -> None:
    # Nemotron-H-56B: 10 attention layers (8 kv x 128), 54 Mamba-2 layers, SSM state float32.
    # Mamba page = conv (16,384 + 2 x 8 x 256) x 3 x 2 B + ssm 256 x 64 x 256 x 4 B
    #            = 122,880 + 16,777,216 = 16,900,096 B.
    # attention per token per layer = 8 x 256 x 2 = 4,096 B ->
    # block = 16 x cdiv(16,900,096, 16 x 4,096) = 16 x 258 = 4,128 tokens;
    # Mamba page padded to 4,128 x 4,096 = 16,908,288 B.
    # Buckets 10 / 54 -> group size 10 -> 1 attention group + 6 Mamba groups (6 padding layers),
    # 10 x 16,908,288 B per block. Prefix caching on -> "align": 2 + 1 checkpoint page per
    # Mamba group; attention cdiv(8,192, 4,128) = 2 blocks.
    est = planner.estimate(load("nvidia--Nemotron-H-56B-Base-8K"))
    assert est.block_size == 4_128
    assert est.state_bytes_per_sequence == 54 * 16_900_096
    layout = est.vllm
    assert layout is not None
    assert layout.mamba_page_size_padded == 16_908_288
    assert layout.bytes_per_block == 10 * 16_908_288
    assert layout.padding_layers == 6
    assert layout.blocks_per_request == 2 + 6 * 3
    assert est.kv_bytes_per_sequence == 2 * 10 * 16_908_288


def test_nemotron_without_prefix_caching_one_state_page() -> None:
    est = planner.estimate(load("nvidia--Nemotron-H-56B-Base-8K"), prefix_caching=False)
    assert est.vllm is not None and est.vllm.blocks_per_request == 2 + 6 * 1


def test_a_hybrids_prefix_caching_default_follows_the_release() -> None:
    # vLLM turns prefix caching on by default for hybrids from 0.26.0 only (config/model.py
    # 0.25.0:1883-1887 vs 0.26.0:1895-1897); off, Mamba's cache mode is "none": one state
    # page a request (kv_cache_interface.py 0.19.0:293-300), as with prefix caching off; on,
    # "align" keeps 3 for Mamba-2 (2 + a prefill checkpoint page, as above)
    spec = load("nvidia--Nemotron-H-56B-Base-8K")
    for version, state_pages in (("0.19.0", 1), ("0.25.0", 1), ("0.26.0", 3), (None, 3)):
        est = planner.estimate(spec, vllm_version=version)
        assert est.vllm is not None and est.vllm.blocks_per_request == 2 + 6 * state_pages
        assert est.vllm.mamba_cache_mode == ("align" if state_pages == 3 else "none")
    # stated, it holds in every release; a model without state layers is on by default
    old = planner.estimate(spec, vllm_version="0.19.0", prefix_caching=True)
    assert old.vllm is not None and old.vllm.blocks_per_request == 2 + 6 * 3
    assert ServeSettings(vllm_version="0.19.0").prefix_caching(load("Qwen--Qwen3-8B"))
    # a model of state layers alone is off in every release ("Attention free models do not
    # support prefix caching", config/model.py 0.19.0:1791-1796, 0.33.0:2280-2285)
    mamba = planner.load_model_spec("mamba-2.8b-hf")
    assert not ServeSettings().prefix_caching(mamba)
    assert ServeSettings(enable_prefix_caching=True).prefix_caching(mamba)


def test_qwen3_next_gated_deltanet_state() -> None:
    # Qwen3-Next: 36 GDN layers: conv (2 x 16 x 128 + 32 x 128) x 3 x 2 B = 49,152 B,
    # recurrent 32 x 128 x 128 x 2 B = 1,048,576 B -> 1,097,728 B per layer per sequence.
    # Attention per token per layer 2 kv x 512 x 2 B = 2,048 -> block 16 x cdiv(1,097,728,
    # 32,768) = 544. TP 2: heads halve -> 548,864 B per layer; attention 1 kv x 512 x 2 = 1,024.
    assert planner.estimate(load("Qwen--Qwen3-Next-80B-A3B-Thinking")).block_size == 544
    for tp, per_layer in ((1, 1_097_728), (2, 548_864)):
        est = planner.estimate(load("Qwen--Qwen3-Next-80B-A3B-Thinking"), tp=tp)
        assert est.state_bytes_per_sequence == 36 * per_layer


def test_pure_mamba_state_served_in_bf16() -> None:
    # mamba-2.8b: float32 checkpoint served in bf16 by vLLM; intermediate 2 x 2,560 = 5,120;
    # conv 5,120 x 3 + ssm 5,120 x 16 = 97,280 elements x 2 B x 64 layers = 12,451,840 B.
    est = planner.estimate(load("state-spaces--mamba-2.8b-hf"))
    assert est.kv_bytes_per_token == 0
    assert est.state_bytes_per_sequence == 12_451_840
    # transformers keeps float32 and the whole conv window (kernel 4, not 3):
    # (5,120 x 4 + 5,120 x 16) x 4 B x 64 = 26,214,400 B.
    hf = planner.estimate(load("state-spaces--mamba-2.8b-hf"), engine=Engine.HF)
    assert hf.state_bytes_per_sequence == 26_214_400


def test_mamba2_groups_replicate_when_tp_does_not_divide() -> None:
    # Nemotron-3-Nano: n_groups 8, 64 heads x 64, state 128. TP 16 does not divide 8 groups ->
    # groups become 16: conv (4,096 + 2 x 16 x 128) / 16 = 512 x 3 x 2 B = 3,072 B;
    # ssm 64/16 x 64 x 128 x 4 B = 131,072 B.
    spec = load("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    state = spec.state_layers[0].for_rank(
        tp=16, kv_dtype_bytes=2, engine=Engine.VLLM, model_dtype_bytes=2
    )
    assert state.state_bytes == 3_072 + 131_072


# ------------------------------------------------------------------ pipeline parallel


@pytest.mark.parametrize(
    ("layers", "pp", "sizes"),
    [(61, 4, [15, 15, 16, 15]), (32, 2, [16, 16]), (80, 3, [27, 27, 26]), (7, 3, [2, 3, 2])],
)
def test_get_pp_indices(layers: int, pp: int, sizes: list[int]) -> None:
    # n // pp each; the remainder goes one each to stages pp-2, pp-3, ... (never the last).
    # 80 / 3: 26 each, remainder 2 -> stages 1 and 0: [27, 27, 26].
    got = [b - a for a, b in (planner.get_pp_indices(layers, r, pp) for r in range(pp))]
    assert got == sizes
    assert sum(got) == layers


def test_pp_reports_most_loaded_stage() -> None:
    # DeepSeek-V3, 61 layers over 4 stages: 15/15/16/15 -> stage 2 holds 16 x 1,152 B/token.
    est = planner.estimate(load("deepseek-ai--DeepSeek-V3"), pp=4)
    assert est.pp_stage == 2
    assert est.pp_layers == (30, 46)
    assert est.kv_bytes_per_token == 16 * 1_152


# ------------------------------------------------------------------ other engines


def test_sglang_keeps_gemma2_windows_full_length() -> None:
    # SGLang's hybrid-SWA pool excludes Gemma 2: every layer holds all 8,192 tokens, page 1.
    # 42 layers x 8 kv x 512 x 2 B = 344,064 B/token x 8,192.
    est = planner.estimate(load("google--gemma-2-9b-it"), engine=Engine.SGLANG)
    assert est.block_size == 1
    assert est.kv_bytes_per_sequence == 344_064 * 8_192


def test_sglang_frees_gpt_oss_windows() -> None:
    # gpt-oss is on SGLang's hybrid-SWA list: SW layers hold 128 tokens, full layers L.
    # per layer per token 8 x 128 x 2 = 2,048 B (20b: 12 SW + 12 full), L = 131,072.
    est = planner.estimate(load("openai--gpt-oss-20b"), engine=Engine.SGLANG)
    assert est.kv_bytes_per_sequence == 12 * 2_048 * (131_072 + 128)


def test_trtllm_tokens_per_block_32() -> None:
    # TRT-LLM: tokens_per_block 32; Llama-3.1-8B at 1,000 tokens -> cdiv(1000, 32) = 32 blocks
    # x 32 tokens x 131,072 B.
    est = planner.estimate(
        load("meta-llama--Llama-3.1-8B"), engine=Engine.TRTLLM, max_model_len=1000
    )
    assert est.block_size == 32
    assert est.kv_bytes_per_sequence == cdiv(1000, 32) * 32 * 131_072


def test_hf_sliding_keeps_window_minus_one() -> None:
    # transformers' DynamicSlidingWindowLayer keeps W - 1 tokens: gemma-2 at 8,192 tokens:
    # 21 full x 8,192 + 21 sliding x 4,095 tokens, 8,192 B/token/layer, no blocks.
    est = planner.estimate(load("google--gemma-2-9b-it"), engine=Engine.HF)
    assert est.kv_bytes_per_sequence == 21 * 8_192 * (8_192 + 4_095)


def test_fp8_checkpoint_kv_scheme_resolves_auto_to_fp8() -> None:
    raw = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_size": 256,
        "max_position_embeddings": 1024,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "kv_cache_scheme": {"num_bits": 8, "type": "float"},
        },
    }
    est = planner.estimate(planner.parse_config(raw, name="fp8-kv", source="test"))
    # 2 layers x 2 kv x 2 x 64 x 1 B
    assert est.kv_cache_dtype == "fp8" and est.kv_bytes_per_token == 512


def test_hf_qwen3_next_recurrent_state_is_float32() -> None:
    # transformers' delta-rule kernels keep the GDN recurrent state in float32 (found by
    # kvplan verify --hf-cache): 36 GDN layers x (conv 8,192 x 4 x 2 B = 65,536 (HF keeps the
    # whole kernel window) + recurrent 32 x 128 x 128 x 4 B = 2,097,152) = 77,856,768 B.
    # vLLM keeps the model dtype: 36 x (49,152 + 1,048,576) = 39,518,208 B.
    spec = load("Qwen--Qwen3-Next-80B-A3B-Thinking")
    assert planner.estimate(spec, engine=Engine.HF).state_bytes_per_sequence == 77_856_768
    assert planner.estimate(spec).state_bytes_per_sequence == 39_518_208


@pytest.mark.parametrize(
    ("folder", "hf_bytes", "vllm_bytes"),
    [
        # Falcon's remote code (modelling_RW.py, model_type RefinedWeb) broadcasts K/V to every
        # query head before caching: 60 layers x 128 heads x 64 x 2 (K, V) x 2 B = 1,966,080;
        # vLLM caches the 8 KV heads: 60 x 8 x 64 x 2 x 2 B = 122,880.
        ("tiiuae--falcon-40b", 1_966_080, 122_880),
        # transformers' built-in falcon caches the KV heads from 5.25 (modeling_falcon.py
        # 5.25.0:297-301): 80 layers x 8 x 64 x 2 x 2 B = 163,840 on both engines.
        ("tiiuae--falcon-180B-chat", 163_840, 163_840),
        # falcon-7b is multi-query and not the new architecture: 32 x 1 x 64 x 2 x 2 B both.
        ("tiiuae--falcon-7b-instruct", 8_192, 8_192),
    ],
)
def test_hf_falcon_remote_code_caches_every_query_head(
    folder: str, hf_bytes: int, vllm_bytes: int
) -> None:
    spec = load(folder)
    assert planner.estimate(spec, engine=Engine.HF).kv_bytes_per_token == hf_bytes
    assert planner.estimate(spec).kv_bytes_per_token == vllm_bytes


def test_hf_falcon_note_names_the_older_transformers_layout() -> None:
    # up to transformers 5.24 (modeling_falcon.py 5.24.0:257-261) _split_heads broadcast K and
    # V to all 232 query heads: 232 / 8 = 29x the 5.25 bytes. The note is for --engine hf only.
    spec = load("tiiuae--falcon-180B-chat")
    hf = planner.estimate(spec, engine=Engine.HF)
    assert any("before 5.25" in n and "all 232 query heads (29x" in n for n in hf.notes)
    assert not any("5.25" in n for n in planner.estimate(spec).notes)
