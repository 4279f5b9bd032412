"""kvplan's budget against public vLLM start-up logs (``tests/data/vllm_startups.json``, each
record citing its source): the logged "Available KV cache memory" must fall inside the range
kvplan states for its estimate (the measured spread of the activation, non-torch and
CUDA-graph terms, ``planner.budget.estimate_ranges``), and so must each term the log states.
The point figures and their error are reported by ``benchmarks/budget_accuracy.py``; only
issue 23's goal on the held-out CUDA start-ups is asserted here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from planner.budget import logged_kv_tokens

ROOT = Path(__file__).resolve().parents[1]
RECORDS = json.loads((ROOT / "tests" / "data" / "vllm_startups.json").read_text())


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "budget_accuracy", ROOT / "benchmarks" / "budget_accuracy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


def marked(records: list[dict[str, Any]], misses: dict[str, str]) -> list[Any]:
    """``records`` as test parameters, each a strict xfail with its cause where ``misses``
    names it (so that fixing one shows)."""
    return [
        pytest.param(
            r,
            id=r["id"],
            marks=[pytest.mark.xfail(strict=True, reason=misses[r["id"]])]
            if r["id"] in misses
            else [],
        )
        for r in records
    ]


def test_every_record_cites_its_source() -> None:
    assert len(RECORDS) >= 20
    for rec in RECORDS:
        assert rec["source"].startswith("https://"), rec["id"]
        assert rec["set"] in ("calibration", "held_out")


# A start-up whose profile saw another process's memory change: 1.12 + 8.03 GiB logged is more
# than 0.75 x 11.63 (the same page's first start-up found 2.6 GiB held by another process)
AM_DEV_3060 = "another process's memory changed during the profile: not from the settings"
BUCCANEER_3090 = (
    "the same command on the same host started in April (5.68 GiB); in July the GPU held "
    "about 1.5 GiB beyond this process and the two it names (23.54 - 21.72 - 0.22 - 0.14 "
    "free): the free memory at start-up decides, and the log does not state it"
)

# Held-out logs the stated range misses, xfail(strict) with what is known of the cause, so that
# fixing one shows.
RANGE_MISSES: dict[str, str] = {
    # fixed: DaisukeTakai/eval_dataset's three H100 start-ups of vLLM 0.10.0 at TP 4 and 8
    # (held out) were three while the range knew no NVLS: they leave 1.5-1.8 GiB less than
    # kvplan's activation + non-torch (0.9 x 79.18 - 7.69 - 55.62 = 7.95 GiB against 5.64 +
    # 0.55), above the old top of 1.6 GiB of non-torch a rank; 4 x A800 at TP 4 over NVLink
    # (0.13.0, no NVLS on Ampere) leaves what kvplan says. planner.budget.NVLS_BYTES (NCCL's
    # NVLS buffers at more than 2 Hopper GPUs on NVSwitch, vllm#9699's log) is the upper end
    # that now covers them; the estimate itself is unchanged (no source line sizes it)
    # fixed: vllm#27508 (gpt-oss-120b, one H100, 0.11.0, gmu 0.95, 1,024 batched tokens:
    # 1.71 GiB logged) was one while kvplan planned the Triton MXFP4 layout on every Hopper
    # (64.48 GiB of weights, 3.28 available, range 2.75-9.64). Its install is a pip wheel of
    # 0.11.0 in a conda env (the traceback's site-packages), which neither ships nor requires
    # triton_kernels, so vLLM runs the experts on Marlin (quantization/mxfp4.py 0.11.0:94-99),
    # padding the hidden size 2,880 -> 3,072 and the intermediate to 2,944 (:189-200): 36 x
    # 128 x 3 x (2,944 x 3,072 - 3,072 x 2,880) x 0.53125 B = 1.34 GiB more (vllm#23278's
    # Marlin H100 run logs "Model loading took 65.97 GiB"). The record states
    # mxfp4_backend marlin (``--mxfp4-backend``): 1.94 GiB, range 1.41-8.30.
    #
    # fixed: sipeed's 4 x RTX 3090 Qwen3-VL-30B-A3B (0.11.0) and Joshi004's 8 x H100
    # Qwen3-VL-235B (0.11.2) start-ups (held out) were two while kvplan counted no encoder
    # without a preprocessor_config.json and, given the logged 153,600-token item, ran the tower
    # over 614,400 positions (12.6 GiB). In 0.11-0.12 Qwen3-VL's video item counts 12.5 tokens
    # of timestamp text for each of its 12,288 encoder tokens, and 0.11's profile pads the
    # cached outputs to the encoder budget (planner.vllm_rules, ``qwen3_vl_video_text`` and
    # ``encoder_output_padding``): 153,600 x 8,192 x 2 B = 2.34 GiB cached where the log leaves
    # 0.9 x 23.58 - 14.77 - 2.31 - 1.82 = 2.32 unexplained. The records carry the logged item
    # (``mm_tokens_per_item``): +109.9 % -> +8.5 % (-1.1 % with the logged weights; the
    # trimmed stand-in config lacks the MRoPE rope_scaling, 0.19 GiB of rotary cache), and
    # +17.7 % -> +3.2 %; both inside their ranges.
    #
    # The start-ups added on 2026-12-03 (held out, recorded before any replay) that fall
    # outside their stated range:
    "joshi-h100x4-minimax-m2-fp8-tp4-len128k-seqs16-v016dev": "a nightly (0.16.0rc2.dev305) "
    "with FlashInfer's all-reduce fusion on (pass_config fuse_allreduce_rms, its SymmDevice "
    "and lamport workspaces logged), which no rule of kvplan's has; the 0.11.2 start-up of the "
    "same command is +2.8 %",
    "llmso-4090-wsl-qwen3-8b-len4096-gmu090": "WSL2: 0.9 x 23.99 - 15.27 - 5.87 = 0.45 GiB "
    "beside weights and pool, kvplan 0.26 + 0.25 + 0.60 (0.27's graph estimate); the same "
    "page's Qwen2.5-0.5B start-ups are inside. Not established",
    "llmso-4090-wsl-qwen3-8b-len4096-gmu085": "the same machine and model at gmu 0.85: -0.65 "
    "GiB, as at 0.90",
    "sirzzang-a10g-qwen25-14b-awq-len4k": "AWQ Qwen2.5-14B on an A10G in 0.19.1: 0.9 x 22.06 "
    "- 9.38 - 9.10 = 1.37 GiB beside weights and pool, kvplan 0.59 + 0.25; the author's "
    "breakdown puts 0.79 GiB on CUDA graphs, which 0.19 does not subtract. Not established",
    "sirzzang-a10g-qwen25-14b-awq-gmu05-len16k-kv-refused": "the same pod at gmu 0.5: +0.72 "
    "GiB, as at 0.9",
    "am-dev-75-3060-qwen3-06b-gmu075-eager-sampler-oom": AM_DEV_3060,
    # added on 2026-12-04 (held out, recorded before any replay):
    "kubesimplify-2xrtxpro6000-qwen3-32b-tp2-gmu0426-len32k": "Qwen3-32B at TP 2 over PCIe on "
    "two RTX PRO 6000 (0.27.1, gmu 0.426): 0.426 x 95.01 - 30.59 - 8.22 = 1.66 GiB beside "
    "weights and pool, kvplan 0.99 + 0.39 + 1.27 of CUDA graphs (its per-layer capture model; "
    "0.21+ subtracts vLLM's own sampled estimate, gpu_model_runner.py 0.31.0:6667-6750), and "
    "its lowest activation + graphs, 1.87, is above the whole 1.66. The PP 2 start-up of the "
    "same model and cards is inside (+9.2 %). Not established",
}


@pytest.mark.parametrize("rec", marked(RECORDS, RANGE_MISSES))
def test_the_logged_kv_memory_is_inside_the_stated_range(rec: dict[str, Any]) -> None:
    row = BENCH.predict(rec)
    if row["skipped"] and not rec["weights_from_config"]:
        # a quantized checkpoint without its config: its other terms' ranges still hold with
        # the weights vLLM logged ("Model loading took"), as on every ROCm record (both modes
        # of kyuz0's R9700 runs, planner.budget.ROCM_NON_TORCH_RANGE)
        row = BENCH.predict(rec, use_logged_weights=True)
    if row["skipped"]:
        pytest.skip(row["skipped"])  # no total, or no weights: neither config nor log
    if not row["release_known"]:
        pytest.skip("release not in the log: not a regression target (reported only)")
    assert row["in_range"], (
        f"{rec['source']}: logged {row['logged_gib']} GiB outside kvplan's "
        f"{row['low_gib']}-{row['high_gib']} GiB (point {row['predicted_gib']})"
    )


# The log's own terms where it states them: "peak activation" (with the CUDA-graph estimate
# where the release logs them together, ``activation_includes_graph_estimate``) and non-torch.
# A logged term outside its range, xfail(strict) with what is known of the cause.
TERM_MISSES: dict[str, str] = {
    "akiyax-4080-qwen25-7b-awq-activation_peak_gib": "0.26 logs the bare torch peak (gpu_worker.py "
    "0.26.0:526) and subtracts the graph estimate apart (:541-545), yet the transcribed 1.04 "
    "GiB leaves no room for one (0.9 x 15.99 - 5.29 - 0.06 - 1.04 = 8.00): against kvplan's "
    "activation alone it is outside; the record's figures and release do not agree",
}
TERMS = [
    pytest.param(
        rec,
        term,
        id=f"{rec['id']}-{term}",
        marks=[pytest.mark.xfail(strict=True, reason=TERM_MISSES[f"{rec['id']}-{term}"])]
        if f"{rec['id']}-{term}" in TERM_MISSES
        else [],
    )
    for rec in RECORDS
    for term in ("activation_peak_gib", "non_torch_gib")
    if rec["logged"].get(term) is not None
]


@pytest.mark.parametrize(("rec", "term"), TERMS)
def test_each_logged_term_is_inside_its_stated_range(rec: dict[str, Any], term: str) -> None:
    row = BENCH.predict(rec)
    if row["skipped"]:
        pytest.skip(row["skipped"])
    if not row["release_known"]:
        pytest.skip("release not in the log: not a regression target (reported only)")
    low, high = row["term_ranges_gib"][term]
    logged = rec["logged"][term]
    # the log states 2 decimals
    assert low - 0.005 <= logged <= high + 0.005, (
        f"{rec['source']}: logged {term} {logged} outside kvplan's {low}-{high}"
    )


# Logs of releases that subtract the CUDA graphs before sizing (0.20 on) that state vLLM's own
# estimate ("Estimated CUDA graph memory: X GiB total", gpu_model_runner.py 0.24.0:6589): it is
# the budget's graph term, so it must fall inside kvplan's range for that term.
GRAPH_ESTIMATES = [
    pytest.param(rec, id=rec["id"])
    for rec in RECORDS
    if rec["logged"].get("cuda_graph_estimate_gib") is not None
    and BENCH._version(rec.get("vllm_version")) is not None
    and BENCH._version(rec["vllm_version"]) >= (0, 20)
    and not rec["enforce_eager"]
]


@pytest.mark.parametrize("rec", GRAPH_ESTIMATES)
def test_each_logged_graph_estimate_is_inside_its_stated_range(rec: dict[str, Any]) -> None:
    row = BENCH.predict(rec)
    if row["skipped"] and not rec["weights_from_config"]:
        row = BENCH.predict(rec, use_logged_weights=True)  # the graphs do not need the weights
    assert not row["skipped"], row["skipped"]
    low, high = row["term_ranges_gib"]["cuda_graph_estimate_gib"]
    logged = rec["logged"]["cuda_graph_estimate_gib"]
    assert low - 0.005 <= logged <= high + 0.005, (
        f"{rec['source']}: logged graph estimate {logged} outside kvplan's {low}-{high}"
    )


def logged_params(key: str, misses: dict[str, str]) -> list[Any]:
    """The records that log both the available KV and ``key``, each a strict xfail with its
    cause where ``misses`` names it."""
    both = [
        r for r in RECORDS if None not in (r["logged"].get(key), r["logged"]["available_kv_gib"])
    ]
    return marked(both, misses)


def logged_blocks(rec: dict[str, Any]) -> tuple[Any, int, int]:
    """kvplan's vLLM layout for the record's settings, and the blocks its logged available KV
    holds, give or take the log's 2-decimal rounding."""
    gpu = BENCH._gpu(rec)
    if gpu is None:
        pytest.skip("no GPU total")
    settings = BENCH._settings(rec, gpu, False)
    model = BENCH.load_model(BENCH._config_path(rec), offline=True)
    dep = BENCH.Deployment(model=model, gpu=gpu, settings=settings)
    layout = BENCH.estimate(dep.spec, settings, gpu, batch_sizes=()).vllm
    gib = rec["logged"]["available_kv_gib"]
    low, high = (int((gib + d) * (1 << 30)) // layout.bytes_per_block for d in (-0.005, 0.005))
    return layout, low, high


# Logs whose "GPU KV cache size" kvplan's layout does not reproduce from their "Available KV
# cache memory", with what is known of the cause.
TOKEN_MISSES: dict[str, str] = {
    # TP 2: each rank logs its own available KV and vLLM sizes the pool by the smallest rank
    # (unify_kv_cache_configs); the logged tokens need 0.2 % less than the logged memory
    # (gpt-oss-20b: 864,576 tokens = 108,072 blocks of 196,608 B = 19.79 GiB, not 19.83)
    "kyuz0-amd-r9700-gptoss20b-tp2": "the pool is the other rank's, 0.2 % smaller",
    "kyuz0-amd-r9700-gemma3-27b-fp8-tp2": "the pool is the other rank's, 0.2 % smaller",
    "kyuz0-amd-r9700-rocm-atten-gemma3-27b-fp8-tp2": "the pool is the other rank's, 0.2 % smaller",
    # release unknown, LMCache's connector loaded: 1.1 % fewer tokens than the memory holds
    "vllm21348-h100-qwen3-235b-fp8-tp4": "not established (LMCache connector, release unknown)",
}
TOKEN_RECORDS = logged_params("kv_cache_tokens", TOKEN_MISSES)


@pytest.mark.parametrize("rec", TOKEN_RECORDS)
def test_the_logged_tokens_follow_from_the_logged_kv_memory(rec: dict[str, Any]) -> None:
    """vLLM's "GPU KV cache size" is its pool's blocks shared out over the KV-cache groups at
    the smallest block size (kv_cache_utils.py 0.10.0:991-997, 0.11.0:1076-1087, 0.19.0:
    1297-1311): kvplan's layout (bytes per block, groups) must turn each log's available KV,
    give or take its 2-decimal rounding, into the tokens that log reports. A hybrid's figure
    is one group's share: gpt-oss-20b's 2 groups, gemma-3's 7, Qwen3.5's 4."""
    layout, low, high = logged_blocks(rec)
    logged = rec["logged"]["kv_cache_tokens"]
    tokens = (logged_kv_tokens(low, layout), logged_kv_tokens(high, layout))
    assert tokens[0] <= logged <= tokens[1], f"{rec['source']}: {logged} not in {tokens}"


CONCURRENCY_MISSES: dict[str, str] = {
    # fixed: leadawon/LAMBO's three Qwen3.5-27B runs in 0.19.0 log the concurrency of 45
    # blocks a request (3 Gated DeltaNet groups x 1 state block + 42) where kvplan planned 48
    # (x 2): before 0.26 vLLM turns prefix caching off by default for hybrids (config/
    # model.py 0.19.0:1785-1790, 0.25.0:1883-1887), so their Mamba cache mode is "none", one
    # state block a request (kv_cache_interface.py 0.19.0:293-300); kvplan's default was on
    # for every release (planner.vllm_rules, hybrid_prefix_caching)
}
CONCURRENCY_RECORDS = logged_params("max_concurrency", CONCURRENCY_MISSES)


@pytest.mark.parametrize("rec", CONCURRENCY_RECORDS)
def test_the_logged_concurrency_follows_from_the_logged_kv_memory(rec: dict[str, Any]) -> None:
    """vLLM's "Maximum concurrency" is its blocks over the blocks one max_model_len request
    may hold (get_max_concurrency_for_kv_cache_config): kvplan's blocks per request, for the
    log's release, must turn the log's available KV into the logged figure. Sliding windows
    reserve one batch's tokens before 0.26 and every concurrent batch's from it
    (planner.vllm_rules, window_in_flight): dennislee22's gpt-oss-120b in 0.10.1.1 logs
    284.25, parallelworks' in 0.15.1 32.56."""
    layout, blocks_low, blocks_high = logged_blocks(rec)
    low, high = (b / layout.blocks_per_request for b in (blocks_low, blocks_high))
    logged = rec["logged"]["max_concurrency"]  # 2 decimals
    assert low - 0.005 <= logged <= high + 0.005, f"{rec['source']}: {logged} not in {low}-{high}"


def test_the_held_out_cuda_logs_meet_the_median_goal() -> None:
    """Issue 23's goal on start-ups kvplan was not fitted on (known release only), its median
    half: |error| <= 2 % of the logged available KV. It holds on CUDA; on ROCm it does not (the
    same vLLM build logs pools 2.6 GiB apart on one R9700), so ROCm is reported apart
    (benchmarks/budget_accuracy.py) and held to its stated ranges only."""
    rows = [BENCH.predict(rec) for rec in RECORDS]
    held = BENCH.summary(rows)["held_out_cuda"]
    assert held["scored"] >= 15
    assert held["median_abs_error_pct"] <= 2.0, held


@pytest.mark.xfail(
    strict=True,
    reason="not met on the public start-ups kvplan was not fitted on: 50 of 67 CUDA pools "
    "within 5 % (75 %). The 17 misses: vllm#27508 (+12.5 %, 0.21 GiB of a 1.71 GiB pool), the "
    "4 x RTX 3090 TP 4 eager box in 0.18.1 (-6.5 %) and 2 x T4 TP 2 eager in 0.22.0 (-9.0 %), "
    "both over PCIe, Qwen3-235B-A22B-FP8 at TP 8 over NVLink in 0.10.0 (+5.1 %), Qwen3-VL-30B "
    "on a stand-in config without its MRoPE rope_scaling (+8.5 %), two WSL2 RTX 4090 runs "
    "(-11.3 %, -14.2 %) and a WSL2 RTX 4070 Laptop in 0.30.0 (+31.8 %; eager, +0.1 %), a 4090 "
    "in 0.24.0 (+9.8 %), AWQ Qwen2.5-14B on an A10G (+6.7 %, and +0.71 GiB on a 0.18 GiB "
    "pool), a 3060 whose profile saw another process (-15.5 %), Qwen3-32B over two PCIe RTX PRO "
    "6000 in 0.27.1 at TP 2 (-11.3 %) and PP 2 (+9.2 %), and three pools under 1 GiB missed by "
    "0.08-0.09 GiB, among them the spread two identical commands on one host logged four "
    "minutes apart (0.49 and 0.41 GiB)",
)
def test_the_held_out_cuda_logs_meet_the_within_goal() -> None:
    """Issue 23's goal, its other half: >= 90 % of the held-out CUDA pools within +-5 %."""
    rows = [BENCH.predict(rec) for rec in RECORDS]
    held = BENCH.summary(rows)["held_out_cuda"]
    assert held["within_5pct"] >= 0.9, held


# Public start-ups that failed for memory (``logged.outcome`` "wont_start", each record citing
# the log): kvplan must say won't start for each. A known miss is xfail(strict) with its cause,
# so that fixing it shows.
KNOWN_MISSES: dict[str, str] = {
    # none now. vllm#27782 (4 x RTX 4090, TP 4, 0.11.0) was one while kvplan counted only the
    # PIECEWISE graphs at one cost per layer: 0.77 GiB against the 1.88 the log's capture took
    # (67 PIECEWISE + 35 FULL decode graphs), so the 150 MiB sampler warm-up still fitted.
    # Counted by mechanism (planner.activation): 48 layers x (67 + 35) graphs x (0.20 + 0.19
    # MiB for NCCL's all-reduces) = 1.86 GiB; with the warm-up (256 x 151,936 x 4 B x 1.5 +
    # 27 MB = 0.24) that is 2.11 GiB against 23.52 - 0.5 - 0.9 x 23.52 + 0.25 activation
    # = 2.10 free: it dies warming up the sampler, as logged. The margin is thin (3 MiB):
    # kvplan's warm-up holds 1.5 fp32 logits copies (the model's and the sampler's fp32 one,
    # v1/sample/sampler.py 0.11.0:86); the log's failing 150 MiB, inside FlashInfer's
    # top_k_top_p_sampling_from_logits, is a third tensor kvplan does not count.
    "am-dev-75-3060-qwen3-06b-gmu075-eager-sampler-oom": AM_DEV_3060,
    "buccaneer-3090-llama31-8b-len8k-sampler-oom": BUCCANEER_3090,
}
FAILURES = marked([r for r in RECORDS if r["logged"].get("outcome") == "wont_start"], KNOWN_MISSES)


@pytest.mark.parametrize("rec", FAILURES)
def test_every_memory_failure_at_start_up_is_wont_start(rec: dict[str, Any]) -> None:
    from planner.deployment import Deployment
    from planner.errors import DoesNotFitError
    from planner.model.load import load_model
    from planner.recommend import plan

    gpu = BENCH._gpu(rec)
    model = load_model(BENCH._config_path(rec), offline=True)
    settings = BENCH._settings(rec, gpu, False)
    try:
        outcome = plan(Deployment(model=model, gpu=gpu, settings=settings)).outcome
    except DoesNotFitError:  # the weights alone do not fit: won't start too
        outcome = "wont_start"
    assert outcome == "wont_start", f"{rec['source']}: {rec['logged']['error']}"


def test_start_ups_of_unknown_release_are_no_regression_target() -> None:
    """Issue 23 item 4: a record whose log names no release is scored in ``unknown_release``
    only, never in the calibration, held-out or all sets (its rules are a guess)."""
    rows = [BENCH.predict(rec) for rec in RECORDS]
    unknown = [r for r in rows if not r["release_known"] and r["error_pct"] is not None]
    assert unknown, "the data has start-ups of unknown release"
    assert all(
        not rec.get("vllm_version") for rec in RECORDS if rec["id"] in {r["id"] for r in unknown}
    )
    known = [r for r in rows if r["release_known"] and r["error_pct"] is not None]
    got = BENCH.summary(rows)
    assert got["unknown_release"]["scored"] == len(unknown)
    assert got["all"]["scored"] == len(known)
    assert got["held_out"]["scored"] == sum(r["set"] == "held_out" for r in known)


REFUSALS = [
    pytest.param(rec, id=rec["id"])
    for rec in RECORDS
    if rec["logged"].get("wont_start_term") == "gpu_free_memory"
]


@pytest.mark.parametrize("rec", REFUSALS)
def test_a_start_up_refused_for_free_memory_is_refused_for_that(rec: dict[str, Any]) -> None:
    """Issue 23 item 3: vLLM's 'Free memory on device (X/Y GiB) on startup is less than desired
    GPU memory utilization' (``gpu_worker.py`` ``init_device``, before any weight is loaded)
    is kvplan's ``gpu_free_memory`` refusal given the free memory the log states; and without
    that figure the same start-up, with the weights the same command logged when it started
    (AWQ: the config's fp16 weights would refuse it for another cause), starts."""
    import dataclasses

    from planner.budget import vllm_budget
    from planner.deployment import Deployment
    from planner.kv_layout import estimate
    from planner.model.load import load_model
    from planner.weights import for_deployment

    gpu = BENCH._gpu(rec)
    model = load_model(BENCH._config_path(rec), offline=True)

    def budget(r: dict[str, Any]) -> Any:
        settings = BENCH._settings(r, gpu, False)
        dep = Deployment(model=model, gpu=gpu, settings=settings)
        weights = for_deployment(dep)  # a bf16 checkpoint refused before loading: kvplan's
        if rec["logged"]["weights_gib"] is not None:
            logged = int(rec["logged"]["weights_gib"] * BENCH.GIB)
            weights = dataclasses.replace(weights, bytes_per_rank=logged)
        return vllm_budget(dep, estimate(dep.spec, settings, gpu, batch_sizes=()), weights)

    refused = budget(rec)
    assert not refused.fits and refused.wont_start_term == "gpu_free_memory", rec["source"]
    if rec["logged"]["weights_gib"] is not None:  # the same command started elsewhere
        free_gpu = {k: v for k, v in rec.items() if k != "gpu_free_memory_gib"}
        assert budget(free_gpu).fits, rec["source"]


def test_the_held_out_table_in_the_docs_is_current() -> None:
    """docs/budget-held-out.md is ``benchmarks/budget_accuracy.py --terms``'s output (issue 23
    item 7's term-by-term table): regenerate it when a record or the budget changes."""
    rows = [BENCH.predict(rec) for rec in RECORDS]
    table = BENCH.TERMS_HEADER + BENCH.render_terms(rows, RECORDS) + "\n"
    assert (ROOT / "docs" / "budget-held-out.md").read_text(encoding="utf-8") == table
    scored = [r for r in rows if r["set"] == "held_out" and r["release_known"]]
    assert table.count("\n| [") == sum(r["error_pct"] is not None for r in scored)
