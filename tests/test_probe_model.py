"""Real-shaped weights and the model passes: shapes, prefill through the pool, profile peak."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import planner  # noqa: E402
from planner.model.specs import KVDtype  # noqa: E402
from probes.alloc import BudgetedAllocator  # noqa: E402
from probes.model import ProbeModel, allocate_weights, model_windows  # noqa: E402
from probes.paged import PagedKVPool, pool_layout, rank_layers  # noqa: E402
from probes.weights import model_dims, total_weight_bytes, weight_specs  # noqa: E402
from tests.conftest import fixture_config  # noqa: E402
from tests.probe_helpers import tiny_spec  # noqa: E402

CPU = torch.device("cpu")


def load(folder: str) -> planner.ModelSpec:
    return planner.load_model_spec(str(fixture_config(folder)))


@pytest.mark.parametrize(
    ("folder", "params"),
    [
        # embed + head 2 x 128,256 x 4,096; 32 x (q 4,096^2 + k, v 2 x 1,024 x 4,096 + o 4,096^2
        # + gate/up/down 3 x 4,096 x 14,336 + 2 norms 4,096) + final norm 4,096; the published
        # Llama-3.1-8B count.
        ("meta-llama--Llama-3.1-8B", 8_030_261_248),
        # tied embedding 151,936 x 1,024 = 155,582,464; 28 x (q 2,048 x 1,024 + k, v
        # 2 x 1,024^2 + o 1,024 x 2,048 + 3 x 1,024 x 3,072 + 2 x 1,024 = 15,730,688) + 1,024;
        # Qwen's q/k norms (2 x 128 per layer) are left out.
        ("Qwen--Qwen3-0.6B", 596_042_752),
    ],
)
def test_weight_shapes_add_up_to_the_model(folder: str, params: int) -> None:
    spec = load(folder)
    assert sum(w.numel for w in weight_specs(model_dims(spec))) == params
    assert total_weight_bytes(model_dims(spec), 2) == 2 * params


def test_tensor_parallel_splits_heads_and_mlp() -> None:
    # Llama-3.1-8B at TP 2: q 2,048 x 4,096, kv 2 x 512 x 4,096 (4 KV heads), MLP 7,168 wide,
    # vocabulary 128,256 / 2 = 64,128 rows.
    dims = model_dims(load("meta-llama--Llama-3.1-8B"), tp=2)
    shapes = {w.name: w.shape for w in weight_specs(dims)}
    assert shapes["layers.0.qkv"] == (2048 + 2 * 512, 4096)
    assert shapes["layers.0.up"] == (2 * 7168, 4096)
    assert shapes["embed"] == (64_128, 4096)


def test_fp8_checkpoint_weights_take_one_byte() -> None:
    # DeepSeek-V3's linear layers are fp8 (1 B); embedding, head and norms stay bf16.
    dims = model_dims(load("deepseek-ai--DeepSeek-V3"))
    specs = weight_specs(dims)
    quant = sum(w.numel for w in specs if w.quant)
    plain = sum(w.numel for w in specs if not w.quant)
    assert total_weight_bytes(dims, 2) == quant + 2 * plain


def build(name: str, dtype=torch.float32, **estimate_args):
    spec = tiny_spec(name)
    est = planner.estimate(
        spec, kv_cache_dtype=KVDtype.FP32, max_num_batched_tokens=32, **estimate_args
    )
    dims = dataclasses.replace(model_dims(spec, 1))
    weights, _ = allocate_weights(dims, dtype, CPU)
    model = ProbeModel(dims, weights, dtype)
    model.set_windows(
        model_windows({i: s for i, s in enumerate(rank_layers(spec, est)) if s is not None})
    )
    return spec, est, model


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma3", "llama4", "mla", "moe"])
def test_chunked_prefill_through_pool_equals_contiguous_forward(name: str) -> None:
    # 70 tokens in chunks of 32 through the paged pool vs one pass without a cache; windows
    # (24) and chunks (32) are shorter than the prompt. float32, tolerance 1e-4 (the hidden
    # state is O(1) after a few residual layers).
    spec, est, model = build(name, max_model_len=128)
    pool = PagedKVPool(pool_layout(spec, est), 200, CPU)
    seq = pool.add_sequence(0, 128)
    ids = torch.randint(0, 256, (70,), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        paged = model.prefill(pool, seq, ids, chunk_tokens=32, max_chunk_bytes=1 << 20)
        contiguous = model.forward_contiguous(ids)
    torch.testing.assert_close(paged, contiguous, atol=1e-4, rtol=0)
    assert seq.num_tokens == 70


def test_decode_writes_one_slot_per_sequence() -> None:
    spec, est, model = build("llama", max_model_len=64)
    pool = PagedKVPool(pool_layout(spec, est), 20, CPU)
    seqs = [pool.add_sequence(10, 64), pool.add_sequence(30, 64)]
    cache = pool.attention_cache(0)
    cache.key.zero_()
    with torch.inference_mode():
        model.decode_step(pool, seqs)
    assert [s.num_tokens for s in seqs] == [11, 31]
    # exactly one new token position per sequence holds non-zero keys in layer 0
    written = (cache.key.abs().sum(dim=(2, 3)) > 0).nonzero().tolist()
    expected = [[seqs[0].tables[0][0], 10], [seqs[1].tables[0][1], 14]]  # 30 = 16 + 14
    assert sorted(written) == sorted(expected)


def test_profile_peak_one_layer_per_shape_equals_full_pass() -> None:
    # Activations are freed layer by layer, so the peak of a 6-layer pass is the peak of its
    # largest layer; the CPU probe relies on this to profile one layer of each shape.
    spec = tiny_spec("gemma3")
    est = planner.estimate(spec, max_num_batched_tokens=64)
    dims = model_dims(spec)
    peaks = {}
    for all_layers in (True, False):
        with torch.inference_mode(), BudgetedAllocator(1 << 30) as mem:
            weights, owners = allocate_weights(dims, torch.bfloat16, CPU)
            model = ProbeModel(dims, weights, torch.bfloat16)
            model.set_windows(
                model_windows({i: s for i, s in enumerate(rank_layers(spec, est)) if s})
            )
            torch.manual_seed(0)
            base = mem.allocated()
            mem.reset_peak()
            model.profile_step(64, 8, all_layers=all_layers)
            peaks[all_layers] = mem.peak() - base
            assert mem.allocated() == base  # nothing stays behind
            del model, weights, owners
    assert len(model_windows({})) == 0
    assert peaks[True] == peaks[False] > 0


def test_garbage_memory_under_a_new_pool_does_not_reach_the_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Memory handed back by the allocator may hold NaN bit patterns. The unwritten rest of a
    # block gets zero attention weight, but 0 x NaN is NaN in the matmul, so a pool built on
    # such memory made the test above fail now and then (whenever the allocator reused it).
    spec, est, model = build("llama", max_model_len=128)
    empty = torch.empty

    def garbage(*args, **kwargs):  # what uninitialized memory may look like
        return empty(*args, **kwargs).fill_(0xFF)  # every float32 / bf16 element NaN

    monkeypatch.setattr(torch, "empty", garbage)
    pool = PagedKVPool(pool_layout(spec, est), 200, CPU)
    monkeypatch.setattr(torch, "empty", empty)
    seq = pool.add_sequence(0, 128)
    ids = torch.randint(0, 256, (70,), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        paged = model.prefill(pool, seq, ids, chunk_tokens=32, max_chunk_bytes=1 << 20)
        contiguous = model.forward_contiguous(ids)
    torch.testing.assert_close(paged, contiguous, atol=1e-4, rtol=0)
