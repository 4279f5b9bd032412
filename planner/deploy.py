"""Kubernetes manifests for a plan: where users deploy what ``kvplan estimate`` planned.

One :class:`Target` (what a manifest needs from a plan: the ``vllm serve`` command and, for a
multi-node plan, every node's command, the GPUs a pod takes, the checkpoint's size) makes each
kind of file (:data:`KINDS`):

``k8s``
    A ``Deployment`` (apps/v1) and its ``Service``: one pod per replica, the plan's exact
    ``vllm serve`` arguments, ``nvidia.com/gpu`` (``amd.com/gpu`` on an AMD GPU) requests and
    limits, ``/dev/shm`` as a memory ``emptyDir``, and startup / readiness / liveness probes on
    vLLM's ``/health``.
``kserve``
    A KServe ``InferenceService`` (serving.kserve.io/v1beta1) with the same container as its
    custom predictor (``spec.predictor.containers``), so the arguments stay vLLM's own.
``llm-d``
    Helm values for llm-d's ``llm-d-modelservice`` chart (keys of its ``values.yaml``, chart
    v0.4.12: ``modelArtifacts``, ``multinode``, ``routing``, ``decode.parallelism``,
    ``decode.containers[]`` with ``modelCommand: custom`` so the chart adds no argument of its
    own, ``prefill.create: false``).
``lws``
    A ``LeaderWorkerSet`` (leaderworkerset.x-k8s.io/v1) for a plan over several nodes: the
    leader runs node 0's command, each worker the ``--headless`` one with its
    ``--data-parallel-start-rank`` taken from ``LWS_WORKER_INDEX`` and the leader's address
    from ``LWS_LEADER_ADDRESS`` (both set by LWS in every pod).

Choices that are kvplan's, not the plan's: the image ``vllm/vllm-openai:v<release>`` of the
vLLM release whose budget the plan followed; ``/dev/shm`` of 2 GiB per GPU of the pod (vLLM's
Kubernetes guide mounts 2 GiB for one GPU: docs/deployment/k8s.md); a startup probe that allows
10 minutes plus 10 s per GiB of checkpoint before the first ``/health``; the Hugging Face token
from an optional Secret ``hf-token`` (key ``token``). Each is stated in the file it shapes.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.check import ModelCache
from planner.check.plans import load_yaml, parse_plans
from planner.containers import CUDA_IMAGE, RESOURCES, ROCM_IMAGE, gpu_resource
from planner.deployment import Deployment
from planner.errors import KvplanError, UsageError
from planner.files import check_output_name, write_all_atomic
from planner.model.load import load_draft
from planner.model.specs import Engine
from planner.plan_types import WONT_START, PlanOptions
from planner.recommend import plan

if TYPE_CHECKING:
    from planner.plan_types import Plan

KINDS = ("k8s", "kserve", "llm-d", "lws")
PORT = 8000  # vllm serve's default --port
SHM_PER_GPU_GIB = 2  # vLLM's Kubernetes guide: a 2Gi memory emptyDir at /dev/shm per server
HF_SECRET = "hf-token"
CACHE_PATH = "/root/.cache/huggingface"  # where the vllm-openai image's HF cache lives
_LEADER = "$(LWS_LEADER_ADDRESS)"  # expanded by the kubelet from the pod's env (LWS sets it)


@dataclass(frozen=True)
class Target:
    """What a manifest needs from a plan.

    Attributes:
        name: the resources' name, a DNS-1035 label (``vllm-qwen-qwen2-5-7b-instruct``).
        model: the model as ``vllm serve`` takes it.
        command: the plan's ``vllm serve`` command (one node).
        node_commands: one ``vllm serve`` per node for a plan over several nodes (the head's
            first, then the ``--headless`` ones); empty for one node.
        gpus_per_pod: the GPUs one pod requests (TP x PP x local DP ranks).
        gpu_resource: the device plugin's resource name.
        checkpoint_bytes: the whole checkpoint (the model cache's size).
        host_ram_bytes: host memory the plan pins beyond the processes (KV offload, pinned
            weights, LoRA CPU cache): requested as memory when above 0.
        vllm_version: the vLLM release whose image runs the command.
    """

    name: str
    model: str
    command: str
    node_commands: tuple[str, ...] = ()
    gpus_per_pod: int = 1
    gpu_resource: str = "nvidia.com/gpu"
    checkpoint_bytes: int = 0
    host_ram_bytes: int = 0
    vllm_version: str = ""

    @property
    def image(self) -> str:
        """vLLM's image for the release: its ROCm build where the GPUs are AMD's
        (:mod:`planner.containers`)."""
        name = ROCM_IMAGE if self.gpu_resource == RESOURCES["amd"] else CUDA_IMAGE
        return f"{name}:v{self.vllm_version}" if self.vllm_version else name

    @property
    def nodes(self) -> int:
        return max(len(self.node_commands), 1)


def resource_name(text: str, prefix: str = "vllm") -> str:
    """``text`` as a DNS-1035 label (lower case, ``a-z0-9-``, starting with a letter, at most
    63 characters), prefixed: ``Qwen/Qwen2.5-7B-Instruct`` -> ``vllm-qwen-qwen2-5-7b-instruct``."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    name = f"{prefix}-{slug}" if slug else prefix
    return name[:63].rstrip("-")


def target_of(plan: Plan, *, name: str | None = None, gpus_per_node: int | None = None) -> Target:
    """The :class:`Target` of a vLLM plan (``kvplan estimate --gpu``).

    Raises:
        UsageError: the plan has no vLLM command (it won't start).
    """
    command = plan.commands.get("vllm")
    if not command:
        raise UsageError("the plan has no vllm serve command to deploy")
    words = shlex.split(command)
    model = words[2] if len(words) > 2 else plan.estimate.model
    tp = _flag(words, "--tensor-parallel-size", 1)
    pp = _flag(words, "--pipeline-parallel-size", 1)
    dp = _flag(words, "--data-parallel-size", 1)
    nodes = tuple(plan.node_commands) if len(plan.node_commands) > 1 else ()
    if nodes:
        local = _flag(shlex.split(nodes[0]), "--data-parallel-size-local", dp)
        per_pod = tp * pp * local
    else:
        per_pod = tp * pp * dp
    return Target(
        name=name or resource_name(model),
        model=model,
        command=command,
        node_commands=nodes,
        gpus_per_pod=per_pod,
        gpu_resource=gpu_resource(plan.gpu),
        checkpoint_bytes=plan.weights.total_bytes,
        host_ram_bytes=plan.host_ram.total,
        vllm_version=plan.vllm_version,
    )


def _flag(words: list[str], flag: str, default: int) -> int:
    if flag in words:
        i = words.index(flag)
        if i + 1 < len(words) and words[i + 1].isdigit():
            return int(words[i + 1])
    return default


# --------------------------------------------------------------------------- pieces


def _gi(n_bytes: int, *, at_least: int = 1) -> str:
    """Bytes as a whole number of Gi (rounded up): Kubernetes quantities."""
    return f"{max(math.ceil(n_bytes / 2**30), at_least)}Gi"


def _serve_args(command: str) -> list[str]:
    """The arguments after ``vllm serve`` (the model first), exactly as the plan has them."""
    words = shlex.split(command)
    if words[:2] != ["vllm", "serve"]:
        raise UsageError(f"not a vllm serve command: {command}")
    return words[2:]


def _resources(t: Target) -> dict[str, Any]:
    gpus = {t.gpu_resource: t.gpus_per_pod}
    requests: dict[str, Any] = dict(gpus)
    if t.host_ram_bytes > 0:  # what the plan pins in host RAM, on top of the processes
        requests["memory"] = _gi(t.host_ram_bytes)
    return {"limits": dict(gpus), "requests": requests}


def _probes(t: Target) -> dict[str, Any]:
    health = {"path": "/health", "port": PORT}
    # 10 minutes, plus 10 s per GiB of checkpoint to download and load, before the first /health
    startup_failures = 60 + math.ceil(t.checkpoint_bytes / 2**30)
    return {
        "startupProbe": {
            "httpGet": health,
            "periodSeconds": 10,
            "failureThreshold": startup_failures,
        },
        "readinessProbe": {"httpGet": health, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": health, "periodSeconds": 10, "failureThreshold": 3},
    }


def _env() -> list[dict[str, Any]]:
    secret = {"name": HF_SECRET, "key": "token", "optional": True}
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": secret}}]


def _volumes(t: Target) -> list[dict[str, Any]]:
    shm = {"medium": "Memory", "sizeLimit": f"{SHM_PER_GPU_GIB * max(t.gpus_per_pod, 1)}Gi"}
    cache = {"sizeLimit": _gi(int(t.checkpoint_bytes * 1.1), at_least=10)}
    return [{"name": "dshm", "emptyDir": shm}, {"name": "hf-cache", "emptyDir": cache}]


def _mounts() -> list[dict[str, Any]]:
    return [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "hf-cache", "mountPath": CACHE_PATH},
    ]


def _container(
    t: Target, *, name: str = "vllm", command: list[str] | None = None, args: list[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "image": t.image,
        "command": command or ["vllm", "serve"],
        "args": args,
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": _env(),
        "resources": _resources(t),
        "volumeMounts": _mounts(),
        **_probes(t),
    }


def _labels(t: Target) -> dict[str, str]:
    return {"app.kubernetes.io/name": t.name, "app.kubernetes.io/managed-by": "kvplan"}


# --------------------------------------------------------------------------- kinds


def deployment(t: Target) -> list[dict[str, Any]]:
    """A Deployment and its Service (one node)."""
    if t.node_commands:
        raise UsageError(
            f"the plan spans {t.nodes} nodes: a Deployment runs one pod per replica; "
            "emit lws (a LeaderWorkerSet) instead"
        )
    labels = _labels(t)
    pod = {
        "metadata": {"labels": labels},
        "spec": {
            "containers": [_container(t, args=_serve_args(t.command))],
            "volumes": _volumes(t),
        },
    }
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": t.name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": t.name}},
            "strategy": {"type": "Recreate"},  # a rolling update would need twice the GPUs
            "template": pod,
        },
    }
    return [dep, _service(t, {"app.kubernetes.io/name": t.name})]


def _service(t: Target, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": t.name, "labels": _labels(t)},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def inference_service(t: Target) -> list[dict[str, Any]]:
    """A KServe InferenceService whose predictor is the vLLM container (one node)."""
    if t.node_commands:
        raise UsageError(
            f"the plan spans {t.nodes} nodes: emit lws (a LeaderWorkerSet) for it; "
            "kserve here is for one node"
        )
    container = _container(t, name="kserve-container", args=_serve_args(t.command))
    return [
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": t.name, "labels": _labels(t)},
            "spec": {
                "predictor": {
                    "minReplicas": 1,
                    "maxReplicas": 1,
                    "containers": [container],
                    "volumes": _volumes(t),
                }
            },
        }
    ]


def _worker_script(t: Target) -> tuple[str, str]:
    """The leader's and the workers' shell lines: every worker runs the same template, so its
    start rank is computed from ``LWS_WORKER_INDEX``."""
    head, *workers = t.node_commands
    local = {_flag(shlex.split(w), "--data-parallel-size-local", 0) for w in workers}
    head_local = _flag(shlex.split(head), "--data-parallel-size-local", 0)
    if local != {head_local}:
        raise UsageError(
            "a LeaderWorkerSet runs identical workers, but the nodes hold "
            f"{head_local} and {', '.join(str(n) for n in sorted(local))} data-parallel ranks: "
            "give --data-parallel-size a multiple of the ranks one node holds"
        )

    def line(command: str, *, worker: bool) -> str:
        out: list[str] = []
        words = shlex.split(command)
        for i, word in enumerate(words):
            if word == "HEAD_NODE_IP":
                out.append('"$LWS_LEADER_ADDRESS"')
            elif worker and i and words[i - 1] == "--data-parallel-start-rank":
                out.append(f'"$((LWS_WORKER_INDEX * {head_local}))"')
            else:
                out.append(shlex.quote(word))
        return "exec " + _wrapped(out)

    return line(head, worker=False), line(workers[0], worker=True)


def _wrapped(words: list[str], width: int = 64) -> str:
    """Shell words as lines of at most ``width`` characters joined by ``\\`` continuations, the
    way kvplan prints a command (a flag stays on the line of its value)."""
    lines: list[str] = []
    current = ""
    i = 0
    while i < len(words):
        piece = words[i]
        if piece.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("--"):
            piece = f"{piece} {words[i + 1]}"
            i += 1
        i += 1
        if current and len(current) + 1 + len(piece) > width:
            lines.append(current)
            current = "  " + piece
        else:
            current = f"{current} {piece}" if current else piece
    lines.append(current)
    return " \\\n".join(lines)


class _Script(str):
    """A shell script: written as a YAML literal block (``|``), line by line."""


def leader_worker_set(t: Target) -> list[dict[str, Any]]:
    """A LeaderWorkerSet of ``nodes`` pods: the head's command on the leader, the headless
    one on each worker."""
    if not t.node_commands:
        raise UsageError("lws is for a plan over several nodes: give --nodes N --gpus-per-node G")
    leader, worker = _worker_script(t)
    labels = _labels(t)

    def pod(script: str, role: str) -> dict[str, Any]:
        c = _container(t, command=["/bin/sh", "-c"], args=[_Script(script + "\n")])
        if role == "worker":  # a headless engine serves no HTTP
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                c.pop(probe)
            c.pop("ports")
        return {
            "metadata": {"labels": {**labels, "kvplan.io/role": role}},
            "spec": {"containers": [c], "volumes": _volumes(t)},
        }

    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": t.name, "labels": labels},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": t.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod(leader, "leader"),
                "workerTemplate": pod(worker, "worker"),
            },
        },
    }
    # LWS labels every pod with its set's name and the leader with worker-index 0
    selector = {
        "leaderworkerset.sigs.k8s.io/name": t.name,
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    return [lws, _service(t, selector)]


def llm_d_values(t: Target) -> list[dict[str, Any]]:
    """Values for the llm-d-modelservice chart: decode pods only (no prefill/decode split),
    the routing sidecar off so vLLM listens on the chart's ``routing.servicePort``, and the
    plan's command as a ``custom`` model command."""
    if t.node_commands:
        leader, worker = _worker_script(t)
        # the chart runs one template on every pod of its LeaderWorkerSet: the leader is index 0
        script = f'if [ "${{LWS_WORKER_INDEX:-0}}" = 0 ]; then\n{leader}\nelse\n{worker}\nfi\n'
        args: list[str] = [_Script(script)]
        command = ["/bin/sh", "-c"]
        dp_local = _flag(shlex.split(t.node_commands[0]), "--data-parallel-size-local", 1)
    else:
        command, args = ["vllm", "serve"], _serve_args(t.command)
        dp_local = _flag(shlex.split(t.command), "--data-parallel-size", 1)
    words = shlex.split(t.node_commands[0] if t.node_commands else t.command)
    container = {
        "name": "vllm",
        "image": t.image,
        "modelCommand": "custom",
        "command": command,
        "args": args,
        "env": _env(),
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "resources": _resources(t),
        "mountModelVolume": True,
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        **_probes(t),
    }
    shm = {"medium": "Memory", "sizeLimit": f"{SHM_PER_GPU_GIB * max(t.gpus_per_pod, 1)}Gi"}
    return [
        {
            "modelArtifacts": {
                "name": t.model,
                "uri": f"hf://{t.model}",
                "size": _gi(int(t.checkpoint_bytes * 1.1), at_least=10),
                "authSecretName": HF_SECRET,
            },
            "multinode": bool(t.node_commands),
            "accelerator": {"type": "amd" if t.gpu_resource.startswith("amd") else "nvidia"},
            "routing": {"servicePort": PORT, "proxy": {"enabled": False}},
            "decode": {
                "create": True,
                "replicas": 1,
                "parallelism": {
                    "tensor": _flag(words, "--tensor-parallel-size", 1),
                    "data": _flag(words, "--data-parallel-size", 1),
                    "dataLocal": dp_local,
                    "workers": t.nodes,
                },
                "containers": [container],
                "volumes": [{"name": "dshm", "emptyDir": shm}],
            },
            "prefill": {"create": False},
        }
    ]


_MAKERS = {
    "k8s": deployment,
    "kserve": inference_service,
    "llm-d": llm_d_values,
    "lws": leader_worker_set,
}


def parse_kinds(text: str) -> list[str]:
    """``--emit k8s,lws`` as a list; ``all``: the kinds that suit the plan (decided later)."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in (*KINDS, "all")]
    if bad or not kinds:
        raise UsageError(f"--emit {text!r}: use one or more of {', '.join(KINDS)} (or all)")
    return kinds


def documents(t: Target, kind: str) -> list[dict[str, Any]]:
    """The objects of one kind of file."""
    return _MAKERS[kind](t)


def manifests(t: Target, kinds: Sequence[str]) -> dict[str, str]:
    """File name -> YAML text for each kind (``all``: k8s, kserve and llm-d for one node; lws
    and llm-d for several). Names are ``<target name>-<kind>.yaml``."""
    if "all" in kinds:
        kinds = ["lws", "llm-d"] if t.node_commands else ["k8s", "kserve", "llm-d"]
    out = {}
    for kind in dict.fromkeys(kinds):
        out[f"{t.name}-{kind}.yaml"] = to_yaml(documents(t, kind), header=_header(t, kind))
    return out


def _header(t: Target, kind: str) -> str:
    what = {
        "k8s": "Deployment + Service",
        "kserve": "KServe InferenceService",
        "llm-d": "values for the llm-d-modelservice Helm chart",
        "lws": "LeaderWorkerSet + Service",
    }[kind]
    lines = [
        f"# kvplan: {what}",
        f"# model: {t.model}",
        f"# {t.nodes} node(s); vllm serve arguments exactly as kvplan's plan prints them",
        f"# {t.gpus_per_pod} GPU(s) a pod; /dev/shm {SHM_PER_GPU_GIB} GiB a GPU; "
        f"HF_TOKEN: Secret {HF_SECRET}",
    ]
    return "\n".join(lines) + "\n"


def to_yaml(docs: list[dict[str, Any]], *, header: str = "") -> str:
    """Objects as one YAML stream (``---`` between documents), keys in the order built."""
    import yaml

    class _Plain(yaml.SafeDumper):  # no &anchors / *aliases for objects used twice
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def script(dumper: yaml.SafeDumper, data: _Script) -> yaml.Node:
        return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style="|")

    _Plain.add_representer(_Script, script)

    body = "---\n".join(
        yaml.dump(d, Dumper=_Plain, sort_keys=False, default_flow_style=False, width=50)
        for d in docs
    )
    return header + body


def write_manifests(files: dict[str, str], folder: str, *, stream: Any = None) -> list[str]:
    """Write every file into ``folder`` (made if missing), all or none; print each path (to
    ``stream``: stdout by default)."""
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--emit-dir {folder}: not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--emit-dir {folder}: cannot make it: {exc.strerror or exc}") from None
    paths = [out / name for name in files]
    for path in paths:
        check_output_name("--emit-dir", path)
    write_all_atomic(
        [("--emit-dir", path, text) for path, text in zip(paths, files.values(), strict=True)]
    )
    for path in paths:
        print(f"wrote {path}", file=stream)
    return [str(p) for p in paths]


def plans_manifests(
    path: str, kinds: Sequence[str], *, offline: bool | None = None
) -> tuple[dict[str, str], list[str]]:
    """The manifests of every deployment of a plans file (``kvplan check --emit``), named
    ``vllm-<name>-<kind>.yaml``, and one line for each deployment left out (not vLLM, won't
    start, cannot be planned). Each deployment is planned as ``kvplan estimate`` plans it."""
    file = Path(path)
    entries, problems = parse_plans(load_yaml(file), file=str(path), base_dir=file.parent)
    if problems:
        return {}, []  # the check reports them (exit 2)
    cache = ModelCache(offline)
    files: dict[str, str] = {}
    skipped: list[str] = []
    for entry in entries:
        if entry.settings.engine is not Engine.VLLM:
            skipped.append(f"{entry.name}: engine {entry.settings.engine.value}: no manifest")
            continue
        try:
            s, draft = load_draft(entry.settings, offline=cache.offline)
            dep = Deployment(model=cache.model(entry.model), gpu=entry.gpu, settings=s, draft=draft)
            p = plan(dep, PlanOptions(grid_lens=(), batch_sizes=()))
        except KvplanError as exc:
            skipped.append(f"{entry.name}: not planned: {exc}")
            continue
        if p.outcome == WONT_START:
            skipped.append(f"{entry.name}: won't start: no manifest")
            continue
        files.update(manifests(target_of(p, name=resource_name(entry.name)), kinds))
    return files, skipped
