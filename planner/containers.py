"""The container a plan's vLLM runs in, by GPU vendor: the image, the Kubernetes resource the
GPUs are requested by, and on AMD the ``docker run`` line ROCm needs.

Sources (each also in tests/data/rocm_launch.md):

- Images: vLLM publishes ``vllm/vllm-openai`` (CUDA) and, for AMD GPUs, ``vllm/vllm-openai-rocm``
  on Docker Hub, both with ``vllm serve`` as the entrypoint and tagged by release (vLLM's
  ``docs/getting_started/installation/gpu.rocm.inc.md``, section ``pre-built-images``: "vLLM
  offers an official Docker image ... available on Docker Hub as vllm/vllm-openai-rocm"; the
  official ROCm images exist since 2026-01-20, the same page says, AMD's ``rocm/vllm`` before).
- The docker flags ROCm needs, as that page's command gives them: the compute interface
  ``--device /dev/kfd`` and the render nodes ``--device /dev/dri``, ``--group-add=video`` (the
  group that owns them), ``--cap-add=SYS_PTRACE --security-opt seccomp=unconfined``, and
  ``--ipc=host`` for the shared memory PyTorch's workers exchange tensors through (vLLM's
  Docker page: "either use the ipc=host flag or --shm-size"; with the host's IPC namespace
  ``--shm-size`` has nothing to size, so it is not given).
- Kubernetes: AMD's device plugin (ROCm/k8s-device-plugin) registers its GPUs under the
  namespace ``amd.com`` (``GetResourceNamespace``, ``internal/pkg/plugin/plugin.go``
  @3b4cd6be) as ``gpu`` on a node of one GPU kind (``getResourceList``,
  ``cmd/k8s-device-plugin/main.go`` @0ad42c9f): ``amd.com/gpu``; its ``Allocate`` mounts
  ``/dev/kfd`` and the GPU's ``/dev/dri`` nodes into the container itself, so a pod needs no
  device flags. NVIDIA's device plugin registers ``nvidia.com/gpu``. llm-d-modelservice's chart
  maps ``accelerator.type: amd`` to the same ``amd.com/gpu`` (``values.yaml``
  ``accelerator.resources``, v0.4.12).
"""

from __future__ import annotations

import shlex

from planner.gpus import Gpu

CUDA_IMAGE = "vllm/vllm-openai"
ROCM_IMAGE = "vllm/vllm-openai-rocm"
RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
ROCM_DOCKER_FLAGS = (
    "--device=/dev/kfd",
    "--device=/dev/dri",
    "--group-add=video",
    "--cap-add=SYS_PTRACE",
    "--security-opt",
    "seccomp=unconfined",
    "--ipc=host",
)
PORT = 8000


def is_amd(gpu: Gpu | None) -> bool:
    """The GPU is AMD's (its catalog ``vendor``): vLLM runs it with its ROCm build."""
    return gpu is not None and gpu.vendor == "amd"


def image(gpu: Gpu | None, vllm_version: str) -> str:
    """vLLM's image for ``gpu`` at ``vllm_version`` (untagged without one)."""
    name = ROCM_IMAGE if is_amd(gpu) else CUDA_IMAGE
    return f"{name}:v{vllm_version}" if vllm_version else name


def gpu_resource(gpu: Gpu | None) -> str:
    """The extended resource a pod requests the GPUs by (``nvidia.com/gpu`` unless AMD)."""
    return RESOURCES["amd"] if is_amd(gpu) else RESOURCES["nvidia"]


def rocm_docker_command(vllm_command: str, gpu: Gpu | None, vllm_version: str) -> str | None:
    """``vllm_command`` (``vllm serve MODEL ...``) run in vLLM's ROCm image with the devices
    and settings ROCm needs, or None on a GPU that is not AMD's or a command that is not
    ``vllm serve``. The image's entrypoint is ``vllm serve``: the words after it follow the
    image. The Hugging Face token is passed by name (``--env HF_TOKEN``), never by value."""
    return _in_rocm_image(vllm_command, gpu, vllm_version, ["-p", f"{PORT}:{PORT}"])


def rocm_node_docker_command(vllm_command: str, gpu: Gpu | None, vllm_version: str) -> str | None:
    """One node's ``vllm serve`` of a multi-node plan in vLLM's ROCm image: the devices and
    settings of :func:`rocm_docker_command`, with the host's network instead of one published
    port (``--network=host``), as vLLM's own multi-node container script runs its nodes
    ("--network host: Allows Ray nodes to communicate directly via host networking",
    ``examples/online_serving/run_cluster.sh`` @0c37e239): the head's data-parallel RPC port
    and RCCL's connections between the nodes are reached at the node's own address. None
    where :func:`rocm_docker_command` is."""
    return _in_rocm_image(vllm_command, gpu, vllm_version, ["--network=host"])


def _in_rocm_image(
    vllm_command: str, gpu: Gpu | None, vllm_version: str, network: list[str]
) -> str | None:
    """``docker run`` of ``vllm_command``'s words after ``vllm serve`` in vLLM's ROCm image,
    with ROCm's devices and settings and ``network``'s flags; None as the callers say."""
    words = shlex.split(vllm_command)
    if not is_amd(gpu) or words[:2] != ["vllm", "serve"]:
        return None
    docker = ["docker", "run", "--rm", *ROCM_DOCKER_FLAGS, *network]
    docker += ["--env", "HF_TOKEN", image(gpu, vllm_version)]
    return shlex.join([*docker, *words[2:]])
