"""vLLM 0.34's extensible KV cache: the pool is sized after warm-up and CUDA-graph capture from
the memory measured then, not from the profile run (planner.budget.MeasuredSizing). Expected
values are the arithmetic of ``measure_kv_cache_bytes`` (v1/worker/extensible_kv_cache.py
0.34.0:592-618) over the plan's own terms:

    pool = min(requested - N, free_at_start - N - margin) - P,  margin = max(1 GiB, 0.75 P)

with N the weights, non-torch and captured graphs, P the activation peak plus the graph
estimate (gpu_worker.py 0.34.0:942-948: the graphs count twice), free_at_start the total less
the CUDA context, and gpu_memory_utilization 1.0 unless given (config/cache.py 0.34.0:495-501).
"""

from __future__ import annotations

import shlex

from planner.budget import CUDA_CONTEXT_BYTES
from planner.commands import vllm_parallel_flags
from planner.deployment import ServeSettings
from planner.vllm_rules import NEWEST_VERSION, rules_for
from tests.helpers import plan_for

GIB = 1 << 30


def terms(cap: object) -> int:
    """The profile's terms: weights, activation, non-torch, graphs."""
    return (
        cap.weights_bytes  # type: ignore[attr-defined]
        + cap.activation_peak_bytes  # type: ignore[attr-defined]
        + cap.non_torch_bytes  # type: ignore[attr-defined]
        + cap.cuda_graph_bytes  # type: ignore[attr-defined]
    )


def n_plus_p(cap: object) -> int:
    """N + P of the module docstring: the terms with the graphs a second time."""
    return terms(cap) + cap.cuda_graph_bytes  # type: ignore[attr-defined]


def peak(cap: object) -> int:
    return cap.activation_peak_bytes + cap.cuda_graph_bytes  # type: ignore[attr-defined]


def test_the_pool_is_what_is_free_after_warm_up_less_the_margin_and_the_peak() -> None:
    p = plan_for("llama-3.1-8b", "h100", max_model_len=8192, vllm_version="0.34.0")
    cap = p.vllm
    total = p.gpu.memory_bytes
    assert cap.gpu_memory_utilization == 1.0 and cap.requested_bytes == total
    # P is the activation (0.93 GiB) and the graph estimate (0.64): 0.75 x 1.57 GiB is above
    # the 1 GiB floor
    margin = peak(cap) * 750 // 1000
    assert margin > GIB and cap.measured_margin_bytes == margin
    free = total - CUDA_CONTEXT_BYTES
    assert cap.available_kv_bytes == min(total - n_plus_p(cap), free - n_plus_p(cap) - margin)
    assert cap.available_kv_bytes == free - n_plus_p(cap) - margin  # the device binds
    # what it reserves first, and logs as "Available KV cache memory": the request less the
    # profile's terms (the graphs once, as its estimate)
    assert cap.reserved_kv_bytes == total - terms(cap)
    lines = cap.log_lines
    assert lines[1] == (
        f"Extended KV cache to {cap.num_gpu_blocks} blocks "
        f"({cap.num_gpu_blocks * cap.bytes_per_block / GIB:.2f} GiB)."
    )
    # against 0.33 (gmu 0.92, the pool what the profile leaves of the request), the same terms:
    # 0.34 gains 0.08 x total less the context, the margin and the graphs' second count
    old = plan_for("llama-3.1-8b", "h100", max_model_len=8192, vllm_version="0.33.0").vllm
    assert terms(old) == terms(cap)
    assert old.available_kv_bytes == old.requested_bytes - terms(old)
    gain = total - CUDA_CONTEXT_BYTES - margin - cap.cuda_graph_bytes - old.requested_bytes
    assert cap.available_kv_bytes - old.available_kv_bytes == gain > 0


def test_eager_mode_keeps_the_floor() -> None:
    # no graphs: P is the activation alone (0.93 GiB), 0.75 x it under the 1 GiB floor
    p = plan_for(
        "llama-3.1-8b", "h100", max_model_len=8192, vllm_version="0.34.0", cuda_graph_bytes=0
    )
    cap = p.vllm
    assert cap.activation_peak_bytes * 750 // 1000 < GIB and cap.measured_margin_bytes == GIB
    free = p.gpu.memory_bytes - CUDA_CONTEXT_BYTES
    assert cap.available_kv_bytes == free - terms(cap) - GIB


def test_a_given_utilisation_caps_the_pool() -> None:
    p = plan_for(
        "llama-3.1-8b",
        "h100",
        max_model_len=8192,
        vllm_version="0.34.0",
        gpu_memory_utilization=0.9,
    )
    cap = p.vllm
    # 0.9 x 79.18 - N - P is below what the device leaves: the request binds
    assert cap.available_kv_bytes == cap.requested_bytes - n_plus_p(cap)


def test_a_large_activation_sets_a_larger_margin() -> None:
    # 32,768 batched tokens: the forward peak 32,768 x 2 x (3 x 14,336 + 4 x 4,096) B = 3.75
    # GiB (+ 27 MB)
    p = plan_for(
        "llama-3.1-8b",
        "h100",
        max_model_len=8192,
        vllm_version="0.34.0",
        max_num_batched_tokens=32_768,
    )
    cap = p.vllm
    assert cap.activation_peak_bytes == 32_768 * 2 * (3 * 14_336 + 4 * 4_096) + 27_100_000
    margin = peak(cap) * 750 // 1000
    assert cap.measured_margin_bytes == margin > 3 * GIB
    free = p.gpu.memory_bytes - CUDA_CONTEXT_BYTES
    assert cap.available_kv_bytes == free - n_plus_p(cap) - margin


def test_rocm_keeps_a_3_gib_floor() -> None:
    # KV_CACHE_MARGIN_FLOOR_BYTES is 3 GiB on ROCm (extensible_kv_cache.py 0.34.0:64)
    cap = plan_for("llama-3.1-8b", "mi300x", max_model_len=8192, vllm_version="0.34.0").vllm
    assert cap.measured_margin_bytes == 3 * GIB


def test_a_shared_gpu_shrinks_the_pool_instead_of_refusing() -> None:
    # 0.34 never refuses the request against free memory with the extensible cache
    # (v1/worker/utils.py 0.34.0:783-796); 0.33 does
    shared = dict(max_model_len=8192, gpu_free_memory_bytes=40 * GIB)
    new = plan_for("llama-3.1-8b", "h100", vllm_version="0.34.0", **shared)
    assert new.vllm.fits and new.outcome != "wont_start"
    free = 40 * GIB - CUDA_CONTEXT_BYTES
    margin = peak(new.vllm) * 750 // 1000
    assert new.vllm.available_kv_bytes == free - n_plus_p(new.vllm) - margin
    old = plan_for("llama-3.1-8b", "h100", vllm_version="0.33.0", **shared)
    assert old.vllm.wont_start_term == "gpu_free_memory"


def test_a_fixed_pool_or_the_flag_sizes_it_from_the_profile_as_before() -> None:
    fixed = plan_for(
        "llama-3.1-8b",
        "h100",
        max_model_len=8192,
        vllm_version="0.34.0",
        kv_cache_memory_bytes=20 * GIB,
    ).vllm
    assert fixed.measured_margin_bytes is None and fixed.available_kv_bytes == 20 * GIB
    off = plan_for(
        "llama-3.1-8b",
        "h100",
        max_model_len=8192,
        vllm_version="0.34.0",
        disable_extensible_kv_cache=True,
    )
    assert off.vllm.measured_margin_bytes is None and off.vllm.gpu_memory_utilization == 0.92
    assert off.vllm.available_kv_bytes == off.vllm.requested_bytes - terms(off.vllm)
    # the command says so, in vLLM 0.34's spelling; before 0.34 the flag does not exist
    words = vllm_parallel_flags(
        ServeSettings(disable_extensible_kv_cache=True, vllm_version="0.34.0")
    )
    assert "--disable-extensible-kv-cache" in words
    assert "--disable-extensible-kv-cache" not in shlex.join(
        vllm_parallel_flags(ServeSettings(disable_extensible_kv_cache=True, vllm_version="0.33.0"))
    )


def test_the_default_release_is_still_033() -> None:
    # no public 0.34 start-up log has been held out yet: without --vllm-version kvplan plans
    # 0.33, and a newer release gets 0.34's rules
    assert NEWEST_VERSION == "0.33.0"
    p = plan_for("llama-3.1-8b", "h100", max_model_len=8192)
    assert p.vllm.measured_margin_bytes is None and p.vllm.gpu_memory_utilization == 0.92
    assert rules_for("0.35.0").extensible_kv_cache and not rules_for(None).extensible_kv_cache


# A 0.34 start-up in vLLM's formats (gpu_worker.py 0.34.0:796 for the reservation,
# extensible_kv_cache.py 0.34.0:536-540 for the pool); the figures are made up for the test:
# 62.37 GiB reserved, then 31,000 blocks of 2 MiB = 60.55 GiB committed.
LOG_034 = """\
(APIServer pid=1) INFO 11-20 10:00:00 [api_server.py:1900] vLLM API server version 0.34.0
(EngineCore pid=9) INFO 11-20 10:00:01 [core.py:90] Initializing a V1 LLM engine (v0.34.0) with \
config: model='meta-llama/Llama-3.1-8B', dtype=torch.bfloat16, max_seq_len=8192, \
tensor_parallel_size=1
(EngineCore pid=9) INFO 11-20 10:00:30 [gpu_worker.py:796] Available KV cache memory: 62.37 GiB
(EngineCore pid=9) INFO 11-20 10:00:31 [kv_cache_utils.py:1300] GPU KV cache size: 510,928 \
tokens, Maximum concurrency for 8,192 tokens per request: 62.37x
(EngineCore pid=9) INFO 11-20 10:01:10 [extensible_kv_cache.py:536] Extended KV cache to 31000 \
blocks (60.55 GiB).
(EngineCore pid=9) INFO 11-20 10:01:10 [kv_cache_utils.py:1300] GPU KV cache size: 496,000 \
tokens, Maximum concurrency for 8,192 tokens per request: 60.55x
"""


def test_diagnose_reads_the_measured_pool_not_the_reservation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from planner.diagnose import diagnose_file, parse_log
    from planner.gpus import get_gpu

    log = parse_log(LOG_034)
    assert log.measured_pool and log.num_gpu_blocks == 31_000
    assert log.available_kv_bytes == round(60.55 * GIB)
    assert log.reserved_kv_bytes == round(62.37 * GIB)
    assert log.kv_cache_tokens == 496_000  # the last capacity line: 31,000 x 16 tokens
    path = tmp_path / "v034.log"
    path.write_text(LOG_034, encoding="utf-8")
    dg = diagnose_file(path, model="llama-3.1-8b", gpu=get_gpu("h100"))
    term = {t.name: t for t in dg.terms}["available KV"]
    assert term.log == round(60.55 * GIB) and term.note == "measured after warm-up"
    planned = plan_for("llama-3.1-8b", "h100", max_model_len=8192, vllm_version="0.34.0")
    assert term.plan == planned.vllm.available_kv_bytes  # the 0.34 plan: measured too
    # the graph estimate sized only the reservation: its gap with the capture costs no pool
    # (the pool line's format: gpu_worker.py 0.34.0:1113)
    pool = (
        "(EngineCore pid=9) INFO 11-20 10:01:09 [gpu_worker.py:1113] CUDA graph pool memory: "
        "0.23 GiB (actual), 0.90 GiB (estimated), difference: 0.67 GiB (291.3%).\n"
    )
    path.write_text(
        LOG_034.replace(
            "(EngineCore pid=9) INFO 11-20 10:01:10 [extensible",
            pool + "(EngineCore pid=9) INFO 11-20 10:01:10 [extensible",
            1,
        ),
        encoding="utf-8",
    )
    kinds = {
        f.kind for f in diagnose_file(path, model="llama-3.1-8b", gpu=get_gpu("h100")).findings
    }
    assert "graph-estimate" not in kinds


def test_the_feature_says_how_the_pool_was_sized_and_refuses_nothing_silently() -> None:
    new = plan_for("llama-3.1-8b", "h100", max_model_len=8192, vllm_version="0.34.0")
    (record,) = [f for f in new.features if f.name == "measured_pool"]
    assert "sizes the KV pool after warm-up" in record.notes[0]
    assert f"a margin of {new.vllm.measured_margin_bytes / GIB:.2f} GiB" in record.notes[0]
    # the flag on a release without the extensible cache changes nothing, and says so
    old = plan_for(
        "llama-3.1-8b",
        "h100",
        max_model_len=8192,
        vllm_version="0.33.0",
        disable_extensible_kv_cache=True,
    )
    assert any("has no extensible KV cache (0.34 on)" in w for w in old.warnings)
    plain = plan_for("llama-3.1-8b", "h100", max_model_len=8192, vllm_version="0.33.0")
    assert old.vllm.available_kv_bytes == plain.vllm.available_kv_bytes
    assert "--disable-extensible-kv-cache" not in old.commands["vllm"]
    assert not [f for f in plain.features if f.name == "measured_pool"]
