"""Suggestions only for what the GPU can run. vLLM 0.33.0 has no fp8 KV
cache below compute capability 8.0: Triton refuses fp8 KV below 8.9
(``vllm/v1/attention/backends/triton_attn.py:510-523``), FlashInfer runs from 8.0
(``flashinfer.py:696-702``), FlashAttention stores fp8 KV only on 9.x/10.x
(``fa_utils.py:306-312``). TensorRT-LLM is NVIDIA-only. The facts per GPU are the catalog's
(``planner/data/gpus.json``: vendor, compute capability)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from planner.check import check_file
from planner.cli import app
from planner.diagnose import diagnose_file
from planner.gpu_support import engine_refusal, fp8_kv_refusal, runs_fp8_weights
from planner.gpus import custom_gpu, get_gpu
from planner.model.specs import Engine

runner = CliRunner()
ENV = {"NO_COLOR": "1", "COLUMNS": "80", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
LOGS = Path(__file__).parent / "fixtures" / "logs"
FP8_FLAG = "--kv-cache-dtype fp8"

# (GPU, its compute capability in the catalog, vLLM has an fp8 KV cache there)
FP8_KV = [
    ("t4", "7.5", False),  # below FlashInfer's 8.0
    ("v100-32gb", "7.0", False),
    ("a100-80gb", "8.0", True),  # FlashInfer
    ("a10", "8.6", True),
    ("l4", "8.9", True),  # Triton too
    ("h100", "9.0", True),
]


@pytest.mark.parametrize(("gpu", "cc", "has"), FP8_KV)
def test_fp8_kv_by_compute_capability(gpu: str, cc: str, has: bool) -> None:
    g = get_gpu(gpu)
    assert g.compute_capability == cc
    assert (fp8_kv_refusal(g) is None) is has
    assert runs_fp8_weights(g) is has  # fp8 checkpoints: Marlin from 8.0, native from 8.9


def test_amd_and_memory_only_gpus_keep_fp8() -> None:
    assert fp8_kv_refusal(get_gpu("mi300x")) is None  # ROCm's backends store fp8 KV
    assert fp8_kv_refusal(custom_gpu(24 << 30)) is None  # nothing known: no refusal
    assert engine_refusal(Engine.TRTLLM, get_gpu("mi300x")) is not None
    assert engine_refusal(Engine.TRTLLM, get_gpu("h100")) is None
    assert engine_refusal(Engine.SGLANG, get_gpu("mi300x")) is None


def estimate(*args: str, code: int = 0) -> tuple[str, dict[str, Any]]:
    argv = ["estimate", "qwen2.5-3b", "--max-model-len", "8192", *args]
    text = runner.invoke(app, argv, env=ENV)
    data = runner.invoke(app, [*argv, "--json"], env=ENV)
    assert (text.exit_code, data.exit_code) == (code, code), (text.stderr, data.stderr)
    out = json.loads(data.stdout)
    assert isinstance(out, dict)
    return text.stdout, out


def test_no_fp8_kv_suggestion_where_vllm_has_none() -> None:
    t4_text, t4 = estimate("--gpu", "t4")
    assert {"kv_cache_dtype": "fp8"} not in [a["changes"] for a in t4["alternatives"]]
    assert FP8_FLAG not in t4_text and "fp8 KV can cost accuracy" not in t4_text
    a10_text, a10 = estimate("--gpu", "a10")  # 8.6: FlashInfer stores it
    assert {"kv_cache_dtype": "fp8"} in [a["changes"] for a in a10["alternatives"]]
    assert f"{FP8_FLAG}:" in a10_text


def test_fp8_kv_asked_for_where_vllm_has_none_wont_start() -> None:
    _, data = estimate("--gpu", "t4", "--kv-cache-dtype", "fp8", code=1)
    assert data["outcome"] == "wont_start" and data["wont_start_check"] == "kv_cache_dtype"
    assert "compute capability 7.5" in data["outcome_reason"]
    # vLLM's own message there says: "Re-run with --kv-cache-dtype float16" below 8.0
    assert data["changes"] == [{"kv_cache_dtype": "fp16"}]


def test_no_trtllm_on_amd() -> None:
    text, data = estimate("--gpu", "mi300x")
    assert [e["engine"] for e in data["engines"]] == ["sglang", "hf"]
    assert set(data["commands"]) == {"vllm", "sglang", "docker"}  # docker: the ROCm image
    assert "trtllm" not in text  # not among "Other engines on this GPU"
    _, nvidia = estimate("--gpu", "h100")
    assert "trtllm" in nvidia["commands"] and "trtllm" in [e["engine"] for e in nvidia["engines"]]


def test_trtllm_asked_for_on_amd_wont_start(tmp_path: Path) -> None:
    _, data = estimate("--gpu", "mi300x", "--engine", "trtllm", code=1)
    assert data["wont_start_check"] == "engine"
    assert data["outcome_reason"] == "TensorRT-LLM runs on NVIDIA GPUs only, not on mi300x (AMD)"
    assert data["changes"] == [{"engine": "vllm"}, {"engine": "sglang"}]
    plans = tmp_path / "plans.yaml"
    plans.write_text(
        "deployments:\n  - {name: a, model: qwen2.5-3b, gpu: mi300x, engine: trtllm}\n"
    )
    (r,) = check_file(plans).results
    assert (r.outcome, r.limiting, r.fix) == (
        "wont_start",
        "engine",
        "engine: vllm, or engine: sglang",
    )


def test_diagnose_offers_no_fp8_kv_where_vllm_has_none() -> None:
    # the H100 log's KV usage is pinned: its fixes include fp8 KV on a GPU that stores it
    def pinned(gpu: str) -> tuple[list[str], list[str]]:
        log = LOGS / "vllm-v1-llama8b-h100.log"
        dg = diagnose_file(log, model="llama-3.1-8b", gpu=get_gpu(gpu))
        (f,) = [f for f in dg.findings if f.kind == "kv-pinned"]
        return f.fix, f.caveats

    fix, caveats = pinned("a100-80gb")
    assert any(FP8_FLAG in x for x in fix) and any(c.startswith("fp8 KV") for c in caveats)
    fix, caveats = pinned("v100-32gb")
    assert not any(FP8_FLAG in x for x in fix) and not any(c.startswith("fp8 KV") for c in caveats)
