"""On an AMD GPU the commands carry what ROCm needs: a `docker run` of vLLM's
ROCm image with the devices and groups vLLM's ROCm docs give, and `amd.com/gpu` (AMD's device
plugin) in every Kubernetes manifest. Sources: tests/data/rocm_launch.md."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli import app
from planner.gpus import GPUS

runner = CliRunner()
ENV = {"HF_HUB_OFFLINE": "1", "COLUMNS": "80", "NO_COLOR": "1"}
AMD = sorted(g.name for g in GPUS if g.vendor == "amd")
# vLLM's ROCm docs' docker command (gpu.rocm.inc.md, pre-built-images): these devices, groups
# and options, each before the image
ROCM_WORDS = [
    "--device=/dev/kfd",
    "--device=/dev/dri",
    "--group-add=video",
    "--cap-add=SYS_PTRACE",
    "--ipc=host",
]


def plan(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["estimate", *args, "--json"], env=ENV)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_the_catalog_has_amd_gpus() -> None:
    assert {"mi300x", "mi355x", "rx-7900-xtx"} <= set(AMD)


@pytest.mark.parametrize("gpu", AMD)
def test_every_amd_gpu_gets_the_rocm_docker_line(gpu: str) -> None:
    data = plan("qwen2.5-0.5b", "--gpu", gpu, "--max-model-len", "4096")
    docker = shlex.split(data["commands"]["docker"])
    vllm = shlex.split(data["commands"]["vllm"])
    assert docker[:3] == ["docker", "run", "--rm"]
    image = f"vllm/vllm-openai-rocm:v{data['vllm_version']}"
    at = docker.index(image)
    before = docker[:at]
    for word in ROCM_WORDS:
        assert word in before, word
    assert before[before.index("--security-opt") + 1] == "seccomp=unconfined"
    assert before[before.index("-p") + 1] == "8000:8000"
    # the token goes by name from the caller's environment, never by value
    assert before[before.index("--env") + 1] == "HF_TOKEN"
    # the image's entrypoint is `vllm serve`: the rest is the vllm command's arguments, whole
    assert vllm[:2] == ["vllm", "serve"] and docker[at + 1 :] == vllm[2:]


@pytest.mark.parametrize("gpu", ["h100", "l4", "rtx-4090"])
def test_nvidia_gpus_get_no_rocm_line(gpu: str) -> None:
    data = plan("qwen2.5-0.5b", "--gpu", gpu, "--max-model-len", "4096")
    assert "docker" not in data["commands"]
    assert "rocm" not in json.dumps(data["commands"])


def test_the_image_follows_the_release_planned_for() -> None:
    data = plan("qwen2.5-0.5b", "--gpu", "mi300x", "--vllm-version", "0.19.0")
    assert data["vllm_version"] == "0.19.0"
    assert "vllm/vllm-openai-rocm:v0.19.0" in shlex.split(data["commands"]["docker"])


def test_the_text_shows_the_docker_line_whole_at_80_columns() -> None:
    args = ["estimate", "llama-3.1-8b", "--gpu", "mi300x", "--max-model-len", "8192"]
    out = runner.invoke(app, args, env=ENV).stdout
    docker = plan(*args[1:])["commands"]["docker"]
    at = out.index("docker run")
    block = out[at:].split("\n\n")[0]
    assert all(len(line) <= 80 for line in block.splitlines())
    # pasted into a shell (continuations joined) it is the JSON's command, word for word
    assert shlex.split(block.replace("\\\n", " ")) == shlex.split(docker)


def manifests(*args: str) -> list[dict[str, Any]]:
    result = runner.invoke(app, ["estimate", *args], env=ENV)
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def containers_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container spec in a manifest (Deployment, InferenceService, LWS, llm-d values)."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "image" in node and "resources" in node:
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    return found


@pytest.mark.parametrize("gpu", ["mi300x", "rx-7900-xtx"])
@pytest.mark.parametrize("kind", ["k8s", "kserve", "llm-d"])
def test_manifests_request_amd_gpus_and_run_the_rocm_image(gpu: str, kind: str) -> None:
    # rx-7900-xtx: a Radeon, not an "mi" name; before, only names starting "mi" were AMD here
    args = ("qwen2.5-0.5b", "--gpu", gpu, "--max-model-len", "4096", "--tp", "1")
    version = plan(*args)["vllm_version"]
    docs = manifests(*args, "--emit", kind)
    found = [c for d in docs for c in containers_of(d)]
    assert found
    for container in found:
        assert container["image"] == f"vllm/vllm-openai-rocm:v{version}"
        assert container["resources"]["limits"] == {"amd.com/gpu": 1}
        assert container["resources"]["requests"]["amd.com/gpu"] == 1
        assert "nvidia.com/gpu" not in json.dumps(container)
    if kind == "llm-d":
        # the chart's accelerator.type whose resource is amd.com/gpu (values.yaml)
        assert docs[0]["accelerator"] == {"type": "amd"}


def test_a_multi_node_amd_plan_requests_amd_gpus_on_every_pod() -> None:
    args = ("deepseek-v3", "--gpu", "mi300x", "--dp", "16", "--enable-expert-parallel")
    docs = manifests(*args, "--nodes", "2", "--gpus-per-node", "8", "--emit", "lws")
    found = containers_of(docs[0])
    assert len(found) == 2  # the leader's and the workers' templates
    for container in found:
        assert container["resources"]["limits"] == {"amd.com/gpu": 8}
        assert container["image"].startswith("vllm/vllm-openai-rocm:v")


def test_a_multi_node_amd_plan_runs_every_node_in_the_rocm_image() -> None:
    # vLLM's multi-node container script runs each node with "--network host: Allows Ray nodes
    # to communicate directly via host networking" (examples/online_serving/run_cluster.sh,
    # tests/data/rocm_launch.md): the head's data-parallel RPC port and RCCL's connections are
    # reached at the node's own address, so no single port is published
    data = plan(
        "qwen2.5-0.5b", "--gpu", "mi300x", "--dp", "2", "--nodes", "2", "--gpus-per-node", "1"
    )
    nodes, dockers = data["node_commands"], data["node_docker_commands"]
    assert len(nodes) == len(dockers) == 2
    image = f"vllm/vllm-openai-rocm:v{data['vllm_version']}"
    for node, docker_line in zip(nodes, dockers, strict=True):
        docker = shlex.split(docker_line)
        at = docker.index(image)
        before = docker[:at]
        for word in [*ROCM_WORDS, "--network=host"]:
            assert word in before, word
        assert "-p" not in before
        # the node's own vllm serve words follow the image, whole (--headless on node 1)
        assert docker[at + 1 :] == shlex.split(node)[2:]
    assert "--headless" in shlex.split(dockers[1])


def test_an_nvidia_multi_node_plan_has_no_rocm_lines() -> None:
    data = plan(
        "qwen2.5-0.5b", "--gpu", "h100", "--dp", "2", "--nodes", "2", "--gpus-per-node", "1"
    )
    assert len(data["node_commands"]) == 2 and "node_docker_commands" not in data


def test_the_rocm_command_sets_no_removed_rocm_variable() -> None:
    # VLLM_USE_TRITON_FLASH_ATTN is gone from vLLM's envs.py (0.11.0:484 had it, 0.19.0 and
    # 0.33.0 do not; a 0.19.1 ROCm log warns "Unknown vLLM environment variable detected:
    # VLLM_USE_TRITON_FLASH_ATTN"); VLLM_ROCM_USE_AITER is opt-in (envs.py 0.33.0:1267-1268,
    # default "False"): kvplan's budget assumes it off, so the commands do not set it
    data = plan("qwen2.5-0.5b", "--gpu", "mi300x", "--max-model-len", "4096")
    for line in (data["commands"]["vllm"], data["commands"]["docker"]):
        assert "VLLM_USE_TRITON_FLASH_ATTN" not in line and "VLLM_ROCM_USE_AITER" not in line
