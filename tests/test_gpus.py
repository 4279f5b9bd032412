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
from planner.deployment import fp8_kv_caveat
from planner.errors import UsageError
from planner.gpus import (
    AMBIGUOUS,
    DEVICE_NAMES,
    GPUS,
    Gpu,
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
        " ".join(result.stderr.split())  # the note wraps at the terminal's width
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


# ------------------------------------------------------------------ issue 28: facts as data


@pytest.mark.parametrize(
    ("name", "gmu", "total_gib", "requested_gib"),
    [
        # vLLM on MI300X: "Free memory on device cuda:0 (8.08/191.98 GiB) on startup is less
        # than desired GPU memory utilization (0.95, 182.39 GiB)"
        ("mi300x", 0.95, 191.98, 182.39),
        # vLLM on MI355X: "(84.11/287.98 GiB) ... (0.95, 273.59 GiB)", "(262.47/287.98 GiB)
        # ... (0.92, 264.95 GiB)", "(126.77/287.98 GiB) ... (0.85, 244.79 GiB)"
        ("mi355x", 0.95, 287.98, 273.59),
        ("mi355x", 0.92, 287.98, 264.95),
        ("mi355x", 0.85, 287.98, 244.79),
        # vLLM on a 96 GB Blackwell workstation card: "(91.64/94.97 GiB) ... (0.91, 86.42
        # GiB)", "(94.41/94.97 GiB) ... (0.97, 92.12 GiB)", "(8.15/94.97 GiB) ... (0.9, 85.47
        # GiB)"
        ("rtx-pro-6000", 0.91, 94.97, 86.42),
        ("rtx-pro-6000", 0.97, 94.97, 92.12),
        ("rtx-pro-6000", 0.9, 94.97, 85.47),
        # vLLM 0.26 on GB200: "(181.84/184.31 GiB) ... (0.92, 169.56 GiB)"
        ("gb200", 0.92, 184.31, 169.56),
        # vLLM on a 24 GB ROCm GPU: "(1.33/23.98 GiB) ... (0.95, 22.79 GiB)" (vllm#36720)
        ("rx-7900-xtx", 0.95, 23.98, 22.79),
    ],
)
def test_new_totals_match_the_vllm_lines_they_come_from(
    name: str, gmu: float, total_gib: float, requested_gib: float
) -> None:
    total = get_gpu(name).memory_bytes
    assert _logged(total) == total_gib
    assert _logged(math.ceil(total * gmu)) == requested_gib


@pytest.mark.parametrize(
    ("name", "total_gib"),
    [
        ("mi325x", 255.98),  # PyTorch "HIP out of memory ... total capacity of 255.98 GiB"
        ("a800", 79.33),  # PyTorch on 8x A800 "total capacity of 79.33 GiB" (Kimi-VL#51)
        ("rtx-3060", 11.76),  # PyTorch "11.76 GiB total capacity" (PhotoMaker#47)
        ("rtx-4080", 15.99),  # PyTorch "15.99 GiB total capacity" (sd-webui-EasyPhoto#281)
        ("rx-7900-xtx", 23.98),  # PyTorch ROCm "total capacity of 23.98 GiB" (Z-Image#103)
        ("radeon-pro-w7900", 47.98),
    ],
)
def test_new_totals_match_logged_capacity(name: str, total_gib: float) -> None:
    assert _logged(get_gpu(name).memory_bytes) == total_gib


@pytest.mark.parametrize(
    ("name", "gib"),
    [("mi300x", 192), ("mi325x", 256), ("rx-7900-xtx", 24), ("radeon-pro-w7900", 48)],
)
def test_rocm_keeps_back_16_mib(name: str, gib: int) -> None:
    # MI300X: ROCm total_memory 196,592 MiB of 192 GiB; the others' logged totals fit the same
    assert get_gpu(name).memory_bytes == (gib * 1024 - 16) << 20


def test_the_b300_estimate_sits_below_what_nvidia_smi_shows() -> None:
    # nvidia-smi "NVIDIA B300 SXM6 AC, 275040 MiB"; CUDA keeps back 728 MiB on the B200
    # (nvidia-smi 183,359 MiB, cudaDeviceProp 182,631 MiB)
    assert get_gpu("b300").memory_bytes == (275040 - (183359 - 182631)) * (1 << 20)
    assert "estimate" in get_gpu("b300").source


@pytest.mark.parametrize(
    ("text", "name"),
    [
        # nvidia-smi / NVML / torch.cuda.get_device_name
        ("NVIDIA H800", "h800"),
        ("NVIDIA A800-SXM4-80GB", "a800"),
        ("NVIDIA A800 80GB PCIe", "a800"),
        ("NVIDIA L20", "l20"),
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "rtx-pro-6000"),
        ("NVIDIA GeForce RTX 3060", "rtx-3060"),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", "rtx-4070-ti-super"),
        ("NVIDIA GeForce RTX 4080", "rtx-4080"),
        ("NVIDIA GeForce RTX 4090 D", "rtx-4090d"),
        ("NVIDIA RTX A5000", "rtx-a5000"),
        # torch.cuda.get_device_name on ROCm, rocm-smi --showproductname
        ("AMD Instinct MI325X", "mi325x"),
        ("AMD Instinct MI355X", "mi355x"),
        ("AMD Instinct MI300X OAM", "mi300x"),
        ("AMD Radeon RX 7900 XTX", "rx-7900-xtx"),
        ("AMD Radeon RX 7900 GRE", "rx-7900-gre"),
        ("AMD Radeon PRO W7900", "radeon-pro-w7900"),
        ("AMD Radeon PRO W7900 Dual Slot", "radeon-pro-w7900"),
        ("AMD Radeon AI PRO R9700", "radeon-ai-pro-r9700"),
        ("AMD Instinct MI250X", "mi250x"),
        ("AMD Instinct MI250X/MI250", "mi250x"),
        ("AMD Instinct MI210", "mi210"),
        # vLLM's ROCm device names (platforms/rocm.py _ROCM_DEVICE_ID_NAME_MAP)
        ("AMD_Instinct_MI300X", "mi300x"),
        ("AMD_Instinct_MI300X_HF", "mi300x"),
        ("AMD_Instinct_MI325X", "mi325x"),
        ("AMD_Instinct_MI355X", "mi355x"),
        ("AMD_Radeon_RX7900XTX", "rx-7900-xtx"),
    ],
)
def test_new_driver_names_resolve(text: str, name: str) -> None:
    match = lookup_gpu(text)
    assert (match.gpu.name, match.note) == (name, "")


FACTS = (
    "memory_bytes",
    "bandwidth_bytes_per_s",
    "bf16_flops",
    "fp8_flops",
    "vendor",
    "architecture",
    "compute_capability",
    "gfx_target",
    "interconnect",
    "node_gpus",
    "memory_type",
)


@pytest.mark.parametrize("gpu", GPUS, ids=[g.name for g in GPUS])
def test_every_entry_states_its_facts_and_their_sources(gpu: Gpu) -> None:
    sources = dict(gpu.sources)
    assert set(sources) == set(FACTS) and all(sources.values())
    assert gpu.source == sources["memory_bytes"]
    assert gpu.vendor in ("nvidia", "amd") and gpu.architecture
    # CUDA names a compute capability, ROCm a gfx target, never both
    assert (gpu.compute_capability is None) == (gpu.vendor == "amd")
    assert (gpu.gfx_target is None) == (gpu.vendor == "nvidia")
    assert gpu.bandwidth_bytes_per_s and gpu.bf16_flops and gpu.node_gpus
    # fp8 rate exactly where vLLM computes in fp8, at twice the BF16 rate or near it
    assert (gpu.fp8_flops is not None) == gpu.has_native_fp8
    if gpu.fp8_flops is not None:
        assert 1.95 <= gpu.fp8_flops / gpu.bf16_flops <= 2.05
    assert gpu.memory_type and gpu.memory_type.startswith(("HBM", "GDDR"))
    if gpu.interconnect is None:  # an entry covering SXM and PCIe boards says so
        assert "no interconnect is assumed" in sources["interconnect"]
    else:
        # NVLink is NVIDIA's, xGMI (Infinity Fabric) AMD's
        assert (
            gpu.interconnect in {"nvidia": {"nvlink", "pcie"}, "amd": {"xgmi", "pcie"}}[gpu.vendor]
        )


@pytest.mark.parametrize(
    ("name", "native", "fmt"),
    [
        # vLLM platforms/cuda.py supports_fp8: has_device_capability(89)
        ("a100-80gb", False, "float8_e4m3fn"),
        ("rtx-3090", False, "float8_e4m3fn"),
        ("t4", False, "float8_e4m3fn"),
        ("l4", True, "float8_e4m3fn"),
        ("h100", True, "float8_e4m3fn"),
        ("b300", True, "float8_e4m3fn"),
        ("rtx-pro-6000", True, "float8_e4m3fn"),
        # vLLM platforms/rocm.py supports_fp8: gfx94/gfx95/gfx12; is_fp8_fnuz: gfx94
        ("mi300x", True, "float8_e4m3fnuz"),
        ("mi325x", True, "float8_e4m3fnuz"),
        ("mi355x", True, "float8_e4m3fn"),
        ("rx-7900-xtx", False, "float8_e4m3fn"),
        ("radeon-ai-pro-r9700", True, "float8_e4m3fn"),
        ("mi250x", False, "float8_e4m3fn"),
        ("mi210", False, "float8_e4m3fn"),
    ],
)
def test_fp8_is_decided_per_vendor_and_architecture(name: str, native: bool, fmt: str) -> None:
    gpu = get_gpu(name)
    assert (gpu.has_native_fp8, gpu.fp8_format) == (native, fmt)


def test_a_gpu_known_by_its_memory_has_no_fp8_answer() -> None:
    gpu = resolve_gpu(None, 24 * GIB)
    assert gpu is not None and (gpu.has_native_fp8, gpu.fp8_format) == (None, None)


def test_the_fp8_note_names_the_rocm_flavour_and_the_architecture() -> None:
    mi300x = fp8_kv_caveat(get_gpu("mi300x"))
    assert "mi300x (gfx942) stores fp8 as e4m3fnuz" in mi300x
    assert "rx-7900-xtx (gfx1100) has no native fp8" in fp8_kv_caveat(get_gpu("rx-7900-xtx"))
    assert "a10 (compute capability 8.6) has no native fp8" in fp8_kv_caveat(get_gpu("a10"))
    assert "e4m3fnuz" not in fp8_kv_caveat(get_gpu("mi355x"))


def test_gpus_json_gives_each_fact_its_source() -> None:
    result = runner.invoke(app, ["gpus", "--json"])
    assert result.exit_code == 0
    rows = {g["name"]: g for g in json.loads(result.stdout)}
    mi300x = rows["mi300x"]
    assert (mi300x["vendor"], mi300x["gfx_target"], mi300x["compute_capability"]) == (
        "amd",
        "gfx942",
        None,
    )
    assert (mi300x["fp8_format"], mi300x["has_native_fp8"]) == ("float8_e4m3fnuz", True)
    assert (mi300x["interconnect"], mi300x["node_gpus"]) == ("xgmi", 8)
    assert set(mi300x["sources"]) == set(FACTS)


def test_an_amd_plan_says_what_rocm_changes_and_an_nvidia_one_does_not() -> None:
    argv = ["estimate", "qwen2.5-7b-instruct", "--max-model-len", "8192", "--json"]
    notes = {}
    for gpu in ("mi300x", "h100"):
        result = runner.invoke(app, [*argv, "--gpu", gpu])
        assert result.exit_code == 0, result.stderr
        notes[gpu] = json.loads(result.stdout)["plan_notes"]
    # vLLM platforms/rocm.py: ROCM_ATTN first, AITER only with VLLM_ROCM_USE_AITER=1 (envs.py)
    assert any(
        n.startswith("mi300x (gfx942) runs vLLM's ROCm build") and "VLLM_ROCM_USE_AITER=1" in n
        for n in notes["mi300x"]
    )
    assert (
        "TensorRT-LLM runs on NVIDIA GPUs only: no trtllm command or figures for mi300x"
        in (notes["mi300x"])
    )
    assert not any("ROCm" in n or "TensorRT-LLM runs" in n for n in notes["h100"])


@pytest.mark.parametrize(
    ("version", "graphs"),
    [
        # gpu_worker.py 0.25.0:475-483 "Skip on ROCm/HIP" (is_cuda()); 0.26.0:495-502 "ROCm is
        # included: #44825" (is_cuda_alike()); before 0.20 no release subtracts graphs at all
        ("0.19.0", "captured after the KV pool is sized"),
        ("0.25.0", "not profiled before the KV pool is sized on ROCm in 0.20-0.25"),
        ("0.26.0", "profiled and subtracted before the KV pool is sized"),
        (None, "profiled and subtracted before the KV pool is sized"),
    ],
)
def test_the_rocm_note_follows_the_releases_graph_rule(version: str | None, graphs: str) -> None:
    argv = ["estimate", "qwen2.5-7b-instruct", "--gpu", "mi300x", "--max-model-len", "8192"]
    if version:
        argv += ["--vllm-version", version]
    result = runner.invoke(app, [*argv, "--json"])
    assert result.exit_code == 0, result.stderr
    (note,) = [n for n in json.loads(result.stdout)["plan_notes"] if "ROCm build" in n]
    assert graphs in note
    # topk_topp_sampler.py 0.33.0:242: FlashInfer's sampler only under is_cuda()
    assert "the sampler is vLLM's native one" in note


@pytest.mark.parametrize(
    ("name", "share"),
    [
        # clock.py: 0.90 of datasheet bandwidth on HBM parts, 0.85 on GDDR ones
        ("h100", 0.90),
        ("mi250x", 0.90),
        ("l40s", 0.85),
        ("rtx-5090", 0.85),
        # the Radeons are GDDR6 parts, which the name rule (l4, rtx, ...) did not catch
        ("rx-7900-xtx", 0.85),
        ("radeon-ai-pro-r9700", 0.85),
    ],
)
def test_the_clock_reads_the_memory_type_from_the_catalog(name: str, share: float) -> None:
    from planner.simulate.clock import memory_efficiency_of

    assert memory_efficiency_of(get_gpu(name)) == share
