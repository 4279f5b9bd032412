"""`kvplan estimate --emit`: every manifest parses, validates against its upstream schema, and
runs the plan's own vllm serve command.

Schemas (tests/data/schemas/, sources in its SOURCES.md): KServe's InferenceService CRD, the
LeaderWorkerSet CRD and the llm-d-modelservice chart's values.schema.json, vendored whole from
their repositories (upstream/); the CRDs' openAPIV3Schema is made strict about unknown fields as
the API server's strict field validation is (:func:`strict`). Kubernetes v1.33 strict
(Deployment, Service, PodTemplateSpec, Container and what they reach) is cut from the PyPI
package kubernetes-validate 1.37.0 by tools/vendor_k8s_schemas.py.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from typer.testing import CliRunner

from planner.cli import app

SCHEMAS = Path(__file__).parent / "data" / "schemas"
K8S = "kubernetes-v1.33-strict.json"
SINGLE = ["estimate", "qwen2.5-7b", "--gpu", "l40s", "--max-model-len", "16384"]
MULTI = [
    "estimate",
    "deepseek-v3",
    "--gpu",
    "h200",
    "--dp",
    "16",
    "--enable-expert-parallel",
    "--nodes",
    "2",
    "--gpus-per-node",
    "8",
]
ENV = {"HF_HUB_OFFLINE": "1", "COLUMNS": "80", "NO_COLOR": "1"}


KSERVE = "serving.kserve.io_inferenceservices.yaml"
LWS = "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
LLM_D = "values.schema.json"


def _registry() -> Registry:
    resources = []
    for path in SCHEMAS.glob("*.json"):
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


REGISTRY = _registry()


def validate(instance: Any, schema_file: str, definition: str | None = None) -> None:
    schema = json.loads((SCHEMAS / schema_file).read_text())
    if definition is not None:
        schema = {"$ref": f"{schema['$id']}#/$defs/{definition}"}
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(instance)


def strict(node: Any) -> Any:
    """A CRD schema that refuses unknown fields, as the API server does under strict field
    validation: every object schema with ``properties`` and no
    ``x-kubernetes-preserve-unknown-fields`` gets ``additionalProperties: false``."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    open_ = out.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in out
    if out.get("type") == "object" and "properties" in out and not open_:
        out["additionalProperties"] = False
    return out


@functools.cache
def upstream(name: str) -> dict[str, Any]:
    """The upstream schema ``name`` (tests/data/schemas/upstream/): a CRD's openAPIV3Schema
    (its only served version), made :func:`strict`; a values.schema.json as it is."""
    path = SCHEMAS / "upstream" / name
    if name.endswith(".json"):
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    [version] = [v for v in crd["spec"]["versions"] if v["served"]]
    return strict(version["schema"]["openAPIV3Schema"])  # type: ignore[no-any-return]


def validate_upstream(instance: Any, name: str) -> None:
    jsonschema.Draft7Validator(upstream(name)).validate(instance)


def run(args: list[str]) -> Any:
    return CliRunner().invoke(app, args, env=ENV)


def emitted(args: list[str], kind: str) -> list[dict[str, Any]]:
    result = run([*args, "--emit", kind])
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def plan_json(args: list[str]) -> dict[str, Any]:
    result = run([*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_k8s_deployment_and_service_validate_and_carry_the_plans_arguments() -> None:
    deployment, service = emitted(SINGLE, "k8s")
    validate(deployment, K8S, "Deployment")
    validate(service, K8S, "Service")
    command = plan_json(SINGLE)["commands"]["vllm"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] + container["args"] == shlex.split(command)
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert container["startupProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/dev/shm" in mounts
    # the Service selects the Deployment's pods
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_a_typo_or_a_wrong_type_fails_the_schema() -> None:
    """The schemas are strict: the tests above can fail."""
    deployment, _ = emitted(SINGLE, "k8s")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["volumeMount"] = container.pop("volumeMounts")
    with pytest.raises(jsonschema.ValidationError):
        validate(deployment, K8S, "Deployment")
    (isvc,) = emitted(SINGLE, "kserve")
    isvc["spec"]["predictor"]["minReplica"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate_upstream(isvc, KSERVE)
    (values,) = emitted(SINGLE, "llm-d")
    values["decode"]["parallelism"]["tensors"] = 2
    with pytest.raises(jsonschema.ValidationError):
        validate_upstream(values, LLM_D)
    lws, _ = emitted(MULTI, "lws")
    lws["spec"]["leaderWorkerTemplate"]["size"] = "2"  # a string where the CRD has an integer
    with pytest.raises(jsonschema.ValidationError):
        validate_upstream(lws, LWS)
    lws, _ = emitted(MULTI, "lws")
    lws["spec"]["leaderWorkerTemplate"]["sizes"] = 2
    with pytest.raises(jsonschema.ValidationError):
        validate_upstream(lws, LWS)


# tests/data/schemas/SOURCES.md: each vendored file's git blob id upstream
BLOBS = {
    KSERVE: "1e37d05b7a741eb40b9eb01c378dc9dc80eab3d9",
    LWS: "2b376d69063e46bec99d0d815d36948cdc87d128",
    LLM_D: "6a92e543744e3f206e7093de490c613c0c9c30a3",
}


@pytest.mark.parametrize("name", sorted(BLOBS))
def test_the_vendored_schemas_are_the_upstream_files(name: str) -> None:
    data = (SCHEMAS / "upstream" / name).read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git hash-object
    assert blob == BLOBS[name]
    assert name in (SCHEMAS / "SOURCES.md").read_text()


def test_kserve_inference_service_validates() -> None:
    (isvc,) = emitted(SINGLE, "kserve")
    validate_upstream(isvc, KSERVE)
    container = isvc["spec"]["predictor"]["containers"][0]
    assert container["command"] + container["args"] == shlex.split(
        plan_json(SINGLE)["commands"]["vllm"]
    )


def test_llm_d_values_validate_and_their_container_is_a_kubernetes_container() -> None:
    (values,) = emitted(SINGLE, "llm-d")
    validate_upstream(values, LLM_D)
    (container,) = values["decode"]["containers"]
    assert container["modelCommand"] == "custom"  # the chart adds no argument of its own
    assert container["command"] + container["args"] == shlex.split(
        plan_json(SINGLE)["commands"]["vllm"]
    )
    # the chart passes the rest of the container through to the pod
    plain = {k: v for k, v in container.items() if k not in ("modelCommand", "mountModelVolume")}
    validate(plain, K8S, "io.k8s.api.core.v1.Container")
    assert values["decode"]["parallelism"] == {"tensor": 1, "data": 1, "dataLocal": 1, "workers": 1}
    assert values["routing"]["proxy"]["enabled"] is False  # vLLM listens on servicePort
    assert values["routing"]["servicePort"] == 8000


def _fake_vllm(tmp_path: Path) -> Path:
    """A `vllm` on PATH that prints its arguments, one a line."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fake = bin_ / "vllm"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return bin_


def _run_script(script: str, bin_: Path, **env: str) -> list[str]:
    path = f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}"
    out = subprocess.run(
        ["/bin/sh", "-c", script],
        env={"PATH": path, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return ["vllm", *out.stdout.splitlines()]


def test_leader_worker_set_runs_every_nodes_command(tmp_path: Path) -> None:
    lws, service = emitted(MULTI, "lws")
    validate_upstream(lws, LWS)
    validate(service, K8S, "Service")
    nodes = plan_json(MULTI)["node_commands"]
    assert len(nodes) == 2
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    bin_ = _fake_vllm(tmp_path)
    address = {"LWS_LEADER_ADDRESS": "10.0.0.7"}
    for role, index in (("leaderTemplate", "0"), ("workerTemplate", "1")):
        (container,) = template[role]["spec"]["containers"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
        assert container["command"] == ["/bin/sh", "-c"]
        words = _run_script(container["args"][0], bin_, LWS_WORKER_INDEX=index, **address)
        expected = shlex.split(nodes[int(index)].replace("HEAD_NODE_IP", "10.0.0.7"))
        assert words == expected


def test_llm_d_multinode_values_run_the_leader_and_worker_commands(tmp_path: Path) -> None:
    (values,) = emitted(MULTI, "llm-d")
    validate_upstream(values, LLM_D)
    assert values["multinode"] is True
    assert values["decode"]["parallelism"] == {
        "tensor": 1,
        "data": 16,
        "dataLocal": 8,
        "workers": 2,
    }
    nodes = plan_json(MULTI)["node_commands"]
    bin_ = _fake_vllm(tmp_path)
    (container,) = values["decode"]["containers"]
    for index in (0, 1):
        words = _run_script(
            container["args"][0], bin_, LWS_WORKER_INDEX=str(index), LWS_LEADER_ADDRESS="h"
        )
        assert words == shlex.split(nodes[index].replace("HEAD_NODE_IP", "h"))


def test_the_wrong_kind_for_the_plan_is_a_usage_error() -> None:
    result = run([*SINGLE, "--emit", "lws"])
    assert result.exit_code == 2
    assert "--nodes" in result.stderr
    result = run([*MULTI, "--emit", "k8s"])
    assert result.exit_code == 2
    assert "lws" in result.stderr
    result = run([*SINGLE, "--emit", "helm"])
    assert result.exit_code == 2
    assert "k8s, kserve, llm-d, lws" in result.stderr
    result = run([*SINGLE, "--emit-dir", "x"])
    assert result.exit_code == 2


def test_emit_dir_writes_every_kind_and_prints_the_report(tmp_path: Path) -> None:
    out = tmp_path / "deploy"
    result = run([*SINGLE, "--emit", "all", "--emit-dir", str(out)])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "vllm-qwen-qwen2-5-7b-instruct-k8s.yaml",
        "vllm-qwen-qwen2-5-7b-instruct-kserve.yaml",
        "vllm-qwen-qwen2-5-7b-instruct-llm-d.yaml",
    ]
    assert "Starts" in result.stdout or "Fits" in result.stdout  # the report, then the paths
    assert f"wrote {out / names[0]}" in result.stdout
    for name in names:
        assert list(yaml.safe_load_all((out / name).read_text()))


def test_emitted_yaml_fits_80_columns() -> None:
    for args, kind in ((SINGLE, "all"), (MULTI, "all")):
        result = run([*args, "--emit", kind])
        assert result.exit_code == 0, result.output
        assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_a_plan_that_wont_start_emits_nothing() -> None:
    result = run(["estimate", "llama-3.1-70b", "--gpu", "l4", "--emit", "k8s"])
    assert result.exit_code == 1
    assert result.stdout == ""


def test_check_emits_one_manifest_per_deployment(tmp_path: Path) -> None:
    plans = Path(__file__).parents[1] / "examples" / "plans.yaml"
    out = tmp_path / "k8s"
    result = run(["check", str(plans), "--emit", "k8s", "--emit-dir", str(out)])
    assert result.exit_code == 1  # examples/plans.yaml: one deployment fails, as without --emit
    names = sorted(p.name for p in out.iterdir())
    entries = yaml.safe_load(plans.read_text())["deployments"]
    assert names == sorted(f"vllm-{e['name']}-k8s.yaml" for e in entries)
    for name in names:
        deployment, service = yaml.safe_load_all((out / name).read_text())
        validate(deployment, K8S, "Deployment")
        validate(service, K8S, "Service")
    chat = yaml.safe_load_all((out / "vllm-chat-8b-h100-k8s.yaml").read_text())
    container = next(chat)["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    # the entry's own settings reach vllm serve
    assert args[args.index("--max-model-len") + 1] == "16384"
    assert args[args.index("--max-num-seqs") + 1] == "16"
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.9"


def test_check_emits_every_kind_and_each_validates(tmp_path: Path) -> None:
    plans = Path(__file__).parents[1] / "examples" / "plans.yaml"
    out = tmp_path / "all"
    result = run(["check", str(plans), "--emit", "all", "--emit-dir", str(out)])
    assert result.exit_code == 1, result.output  # one deployment fails, as without --emit
    kinds = {"k8s": 0, "kserve": 0, "llm-d": 0, "lws": 0}
    for path in sorted(out.iterdir()):
        kind = next(k for k in kinds if path.name.endswith(f"-{k}.yaml"))
        kinds[kind] += 1
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        if kind == "k8s":
            validate(docs[0], K8S, "Deployment")
            validate(docs[1], K8S, "Service")
        elif kind == "lws":
            validate_upstream(docs[0], LWS)
            validate(docs[1], K8S, "Service")
        else:
            (doc,) = docs
            validate_upstream(doc, KSERVE if kind == "kserve" else LLM_D)
    assert kinds["k8s"] and kinds["kserve"] and kinds["llm-d"]


def test_check_emit_needs_both_flags() -> None:
    plans = str(Path(__file__).parents[1] / "examples" / "plans.yaml")
    assert run(["check", plans, "--emit", "k8s"]).exit_code == 2


def test_amd_plans_validate_too() -> None:
    """An AMD GPU's manifests (amd.com/gpu, the ROCm image: tests/test_rocm_launch.py) against
    the same schemas."""
    single = ["estimate", "qwen2.5-7b", "--gpu", "mi300x", "--max-model-len", "16384"]
    deployment, service = emitted(single, "k8s")
    validate(deployment, K8S, "Deployment")
    validate(service, K8S, "Service")
    (isvc,) = emitted(single, "kserve")
    validate_upstream(isvc, KSERVE)
    (values,) = emitted(single, "llm-d")
    validate_upstream(values, LLM_D)
    multi = [*MULTI[:3], "mi300x", *MULTI[4:]]
    lws, service = emitted(multi, "lws")
    validate_upstream(lws, LWS)
    validate(service, K8S, "Service")
    (values,) = emitted(multi, "llm-d")
    validate_upstream(values, LLM_D)
