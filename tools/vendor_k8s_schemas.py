"""Cut the Kubernetes JSON Schemas the manifest tests need out of a kubernetes-validate wheel.

    pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/kv
    python tools/vendor_k8s_schemas.py /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl

kubernetes-validate (PyPI, Apache-2.0) ships the JSON Schemas generated from each Kubernetes
release's OpenAPI document. This keeps the v1.33 "strict" set's Deployment, Service,
PodTemplateSpec and Container with every definition they reach, descriptions dropped, as one
file (``tests/data/schemas/kubernetes-v1.33-strict.json``): ``#/$defs/<name>`` is each object.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VERSION = "v1.33.0-local-strict"
OUT = ROOT / "tests" / "data" / "schemas" / "kubernetes-v1.33-strict.json"
ROOTS = {
    "Deployment": "deployment-apps-v1.json",
    "Service": "service-v1.json",
}
DEFS = ("io.k8s.api.core.v1.PodTemplateSpec", "io.k8s.api.core.v1.Container")
PREFIX = "/api/_definitions.json#/$defs/"


def _strip(node: Any, reached: set[str]) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "description":
                continue
            if k == "$ref" and isinstance(v, str) and v.startswith((PREFIX, "#/$defs/")):
                name = v.split("#/$defs/", 1)[1]
                reached.add(name)
                out[k] = f"#/$defs/{name}"
                continue
            out[k] = _strip(v, reached)
        return out
    if isinstance(node, list):
        return [_strip(v, reached) for v in node]
    return node


def main(wheel: str) -> int:
    base = f"kubernetes_validate/kubernetes-json-schema/{VERSION}/"
    with zipfile.ZipFile(wheel) as z:
        definitions = json.loads(z.read(base + "_definitions.json"))["$defs"]
        tops = {name: json.loads(z.read(base + f)) for name, f in ROOTS.items()}
    reached: set[str] = set(DEFS)
    defs: dict[str, Any] = {}
    for name, schema in tops.items():
        schema = _strip(schema, reached)
        schema.pop("$id", None)
        schema.pop("$schema", None)
        defs[name] = schema
    done: set[str] = set()
    while reached - done:
        name = sorted(reached - done)[0]
        done.add(name)
        defs[name] = _strip(definitions[name], reached)
    bundle = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://kvplan.invalid/schemas/kubernetes-v1.33-strict.json",
        "$comment": (
            "Kubernetes v1.33 JSON Schemas (strict: no unknown keys) from the PyPI package "
            "kubernetes-validate 1.37.0 (kubernetes_validate/kubernetes-json-schema/"
            f"{VERSION}), generated from Kubernetes' OpenAPI document; descriptions dropped. "
            "Rebuild: tools/vendor_k8s_schemas.py."
        ),
        "$defs": dict(sorted(defs.items())),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(bundle, indent=None, separators=(",", ":"), sort_keys=False) + "\n")
    print(f"{OUT.relative_to(ROOT)}: {len(defs)} definitions, {OUT.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
