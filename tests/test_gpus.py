"""The GPU catalog: totals as vLLM and PyTorch log them, each against the log line it cites
(``planner/gpus.py`` names the sources)."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import UsageError
from planner.gpus import (
    AMBIGUOUS,
    DEVICE_NAMES,
    GPUS,
    detect_gpu,
    get_gpu,
    lookup_gpu,
    resolve_gpu,
)
from planner.notes import notes_to

GIB = 1 << 30
runner = CliRunner()


def _logged(total_bytes: int) -> float:
    """A total as vLLM's and PyTorch's messages print it: GiB to two decimals."""
    return round(total_bytes / GIB, 2)


@pytest.mark.parametrize(
    ("name", "gmu", "total_gib", "requested_gib"),
    [
        # vLLM 0.29 on an L4: "Free memory on device (21.84/22.03 GiB) on startup. Desired GPU
        # memory utilization is (0.92, 20.27 GiB)"
        ("l4", 0.92, 22.03, 20.27),
        # vLLM on an RTX 5090: "Free memory on device (30.27/31.4 GiB) on startup. Desired GPU
        # memory utilization is (0.92, 28.88 GiB)" (noonghunna/club-3090#1087)
        ("rtx-5090", 0.92, 31.4, 28.88),
    ],
)
def test_totals_match_the_vllm_line_they_come_from(
    name: str, gmu: float, total_gib: float, requested_gib: float
) -> None:
    total = get_gpu(name).memory_bytes
    assert _logged(total) == total_gib
    # vLLM asks for ceil(total * gpu_memory_utilization) bytes and logs it the same way
    assert _logged(math.ceil(total * gmu)) == requested_gib


@pytest.mark.parametrize(
    ("name", "total_gib"),
    [
        ("l40s", 44.53),  # PyTorch "total capacity of 44.53 GiB" (Wan-Video/Wan2.1#205)
        ("rtx-4090", 23.64),  # PyTorch on Linux (ali-vilab/VGen#104); WSL reports 23.99
        ("b200", 178.35),  # vLLM "Free memory on device cuda:0 (41.24/178.35 GiB)"
        ("h200", 139.8),  # vLLM "Free memory on device (137.64/139.8 GiB)"
    ],
)
def test_totals_match_logged_capacity(name: str, total_gib: float) -> None:
    assert _logged(get_gpu(name).memory_bytes) == total_gib


def test_the_4090_keeps_the_linux_total_and_names_the_wsl_one() -> None:
    assert "23.99 GiB" in get_gpu("rtx-4090").source


# ------------------------------------------------------------------ names


@pytest.mark.parametrize(
    ("text", "name"),
    [
        # as nvidia-smi / NVML / torch.cuda.get_device_name print them
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 5090", "rtx-5090"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("NVIDIA RTX A6000", "a6000"),
        ("Tesla T4", "t4"),
        ("Tesla V100-SXM2-16GB", "v100-16gb"),
        ("Tesla V100-PCIE-32GB", "v100-32gb"),
        ("Tesla V100S-PCIE-32GB", "v100-32gb"),
        ("AMD Instinct MI300X", "mi300x"),
        # catalog names and aliases, in any case, with spaces, dashes or underscores
        ("h100", "h100"),
        ("H100_SXM", "h100"),
        ("nvidia-h100", "h100"),
        ("rtx4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
        ("4090", "rtx-4090"),
        ("a100 80gb", "a100-80gb"),
        ("A100-40G", "a100-40gb"),
        ("  l40s  ", "l40s"),
    ],
)
def test_driver_and_catalog_names_resolve(text: str, name: str) -> None:
    match = lookup_gpu(text)
    assert (match.gpu.name, match.note) == (name, "")


@pytest.mark.parametrize(
    ("text", "note"),
    [
        ("a100", "a100 is ambiguous; using a100-80gb (79.15 GiB); a100-40gb also matches"),
        ("A100", "A100 is ambiguous; using a100-80gb (79.15 GiB); a100-40gb also matches"),
        (
            "NVIDIA A100-SXM4",
            "NVIDIA A100-SXM4 is ambiguous; using a100-80gb (79.15 GiB); a100-40gb also matches",
        ),
        ("v100", "v100 is ambiguous; using v100-16gb (15.78 GiB); v100-32gb also matches"),
        (
            "rtx 6000",
            "rtx 6000 is ambiguous; using rtx-6000-ada (47.48 GiB); a6000 also matches",
        ),
    ],
)
def test_a_short_name_that_fits_several_says_which_it_used(text: str, note: str) -> None:
    match = lookup_gpu(text)
    assert match.note == note
    assert match.gpu.name == note.split("using ")[1].split(" ")[0]


def test_a_total_picks_the_nearest_of_an_ambiguous_name() -> None:
    match = lookup_gpu("a100", memory_bytes=40 * GIB)
    assert match.gpu.name == "a100-40gb"
    assert match.note == (
        "a100 is ambiguous; using a100-40gb (nearest the given total); a100-80gb also matches"
    )
    gpu = resolve_gpu("a100", 40 * GIB)
    assert gpu is not None and gpu.name == "a100-40gb" and gpu.memory_bytes == 40 * GIB


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("h1000", "unknown GPU 'h1000'; did you mean h100"),
        ("NVIDIA A40", "unknown GPU 'NVIDIA A40'; did you mean a10"),
        # a different card with a similar name is not guessed
        ("Quadro RTX 6000", "unknown GPU 'Quadro RTX 6000'; did you mean"),
        ("NVIDIA GH200 480GB", "unknown GPU 'NVIDIA GH200 480GB'"),
        ("NVIDIA L40", "unknown GPU 'NVIDIA L40'; did you mean l40s"),
    ],
)
def test_unknown_names_are_refused_with_suggestions(text: str, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        lookup_gpu(text)
    message = str(info.value)
    assert message.startswith(fragment)
    assert message.endswith(
        "(`kvplan gpus` lists them; --gpu-memory 24GiB plans for any other GPU)"
    )


def test_every_spelling_names_one_entry() -> None:
    names = {g.name for g in GPUS}
    assert set(DEVICE_NAMES) <= names
    assert all(set(fits) <= names and len(fits) > 1 for fits in AMBIGUOUS.values())
    seen: dict[str, str] = {}
    for g in GPUS:
        for spelling in (g.name, *g.aliases, *DEVICE_NAMES.get(g.name, ())):
            key = spelling.replace("-", "")
            assert seen.setdefault(key, g.name) == g.name, spelling
            assert lookup_gpu(spelling).gpu is g
    assert not {short.replace("-", "") for short in AMBIGUOUS} & set(seen)


def test_get_gpu_sends_the_note_to_whoever_listens() -> None:
    heard: list[str] = []
    assert get_gpu("a100").name == "a100-80gb"  # nobody listening: silent
    with notes_to(heard.append):
        get_gpu("a100")
        get_gpu("h100")
    assert heard == ["a100 is ambiguous; using a100-80gb (79.15 GiB); a100-40gb also matches"]


def test_detection_reads_the_driver_name_with_the_same_resolver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def nvml(name: str | bytes, total: int) -> types.SimpleNamespace:
        info = types.SimpleNamespace(total=total, reserved=0)
        return types.SimpleNamespace(
            nvmlInit=lambda: None,
            nvmlDeviceGetHandleByIndex=lambda i: "h",
            nvmlDeviceGetName=lambda h: name,
            nvmlDeviceGetMemoryInfo=lambda h: info,
        )

    monkeypatch.setitem(sys.modules, "pynvml", nvml("NVIDIA A100-SXM4-40GB", 42_505_273_344))
    gpu = detect_gpu()
    assert gpu is not None and (gpu.name, gpu.memory_bytes) == ("a100-40gb", 42_505_273_344)
    # an old nvidia-ml-py returns bytes
    monkeypatch.setitem(sys.modules, "pynvml", nvml(b"NVIDIA L4", 23_034 << 20))
    gpu = detect_gpu()
    assert gpu is not None and gpu.name == "l4"
    # a GPU the catalog lacks keeps the driver's name
    monkeypatch.setitem(sys.modules, "pynvml", nvml("NVIDIA A40", 47_700 << 20))
    gpu = detect_gpu()
    assert gpu is not None and (gpu.name, gpu.bandwidth_bytes_per_s) == ("NVIDIA A40", None)


# ------------------------------------------------------------------ CLI and plans files


def test_cli_notes_an_ambiguous_name_once_on_stderr_and_json_keeps_the_entry() -> None:
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--gpu", "A100", "--json"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == (
        "note: A100 is ambiguous; using a100-80gb (79.15 GiB); a100-40gb also matches\n"
    )
    assert json.loads(result.stdout)["gpu"]["name"] == "a100-80gb"


def test_cli_takes_an_nvidia_smi_name_silently() -> None:
    result = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu", "NVIDIA H100 80GB HBM3", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    assert json.loads(result.stdout)["gpu"]["name"] == "h100"


def test_cli_refuses_an_unknown_gpu_in_one_line() -> None:
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--gpu", "NVIDIA A40"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("Error: unknown GPU 'NVIDIA A40'; did you mean a10")
    assert "Traceback" not in result.stderr


def test_plans_file_names_the_line_of_an_ambiguous_gpu(tmp_path: Path) -> None:
    plans = tmp_path / "plans.yaml"
    plans.write_text(
        "deployments:\n"
        "  - {name: a, model: llama-3.1-8b, gpu: A100, max_model_len: 4096}\n"
        "  - {name: b, model: llama-3.1-8b, gpu: Tesla T4, max_model_len: 2048}\n"
    )
    result = runner.invoke(app, ["check", str(plans), "--format", "json"])
    assert f"note: {plans}:2: deployments[0] (a).gpu: A100 is ambiguous; using a100-80gb" in (
        result.stderr
    )
    gpus = [d["gpu"] for d in json.loads(result.stdout)["deployments"]]
    assert gpus == ["a100-80gb", "t4"]


def test_plans_file_refuses_an_unknown_gpu_with_its_own_key(tmp_path: Path) -> None:
    plans = tmp_path / "plans.yaml"
    plans.write_text("deployments:\n  - {name: a, model: llama-3.1-8b, gpu: NVIDIA A40}\n")
    result = runner.invoke(app, ["check", str(plans)])
    assert result.exit_code == 2
    assert "gpu: unknown GPU 'NVIDIA A40'" in result.stderr
    assert "gpu_memory: 24GiB plans for any other GPU" in result.stderr
