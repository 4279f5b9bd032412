"""Build planner/data/catalog.json from the shared real configs.

    python tools/build_catalog.py [../shared/model-configs]

Each entry keeps the config minus fields no planner computation reads (token ids, dropout and
initialisation settings, remote-code pointers), plus a provenance line from SOURCES.md.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DROP_SUFFIXES = ("_token_id", "_token_index", "dropout", "_pdrop")
DROP_KEYS = {
    "_name_or_path",
    "transformers_version",
    "auto_map",
    "use_cache",
    "initializer_range",
    "init_std",
    "output_router_logits",
    "_attn_implementation_autoset",
    "attn_implementation",
    "for_llm_compressor",
    "router_jitter_noise",
    "layerdrop",
    "slow_but_exact",
    "bias_dropout_fusion",
    "masked_softmax_fusion",
    "attention_softmax_in_fp32",
}
NAME_SUFFIXES = ("-instruct", "-it", "-hf", "-chat", "-base-8k", "-bf16", "-thinking")


def trim(config: dict) -> dict:
    out = {}
    for key, value in config.items():
        if key in DROP_KEYS or key.endswith(DROP_SUFFIXES):
            continue
        nested = isinstance(value, dict) and key != "quantization_config"
        out[key] = trim(value) if nested else value
    return out


def provenance(sources: str) -> dict[str, str]:
    rows = {}
    for line in sources.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 8 and cells[1].isdigit():
            folder = cells[3].strip("`").split("/")[0]
            repo = re.sub(r"^\[([^\]]+)\].*$", r"\1", cells[5])
            rows[folder] = (
                f"{cells[4].strip('`')} config.json via github.com/{repo} "
                f"{cells[6].strip('`')} @ {cells[7].strip('`')} (shared/model-configs #{cells[1]})"
            )
    return rows


def short_name(hub_id: str) -> str:
    return hub_id.split("/", 1)[1].lower().replace("meta-llama-", "llama-")


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "model-configs"
    prov = provenance((src / "SOURCES.md").read_text())
    entries = []
    for folder in sorted(p for p in src.iterdir() if (p / "config.json").is_file()):
        hub_id = folder.name.replace("--", "/", 1)
        entries.append(
            {
                "name": short_name(hub_id),
                "hub_id": hub_id,
                "provenance": prov.get(folder.name, f"shared/model-configs/{folder.name}"),
                "config": trim(json.loads((folder / "config.json").read_text())),
            }
        )
    names = {e["name"] for e in entries}
    for entry in entries:
        aliases = []
        stem = entry["name"]
        for suffix in NAME_SUFFIXES:
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
                aliases.append(stem)
        if "-instruct-" in entry["name"]:  # mistral-7b-instruct-v0.3 -> mistral-7b-v0.3
            aliases.append(entry["name"].replace("-instruct-", "-"))
        entry["aliases"] = [a for a in dict.fromkeys(aliases) if a not in names]
    seen: dict[str, str] = {}
    for entry in entries:
        for alias in list(entry["aliases"]):
            if alias in seen:  # two models shorten to the same alias: neither gets it
                entry["aliases"].remove(alias)
                other = next(e for e in entries if e["name"] == seen[alias])
                if alias in other["aliases"]:
                    other["aliases"].remove(alias)
            else:
                seen[alias] = entry["name"]
    out = ROOT / "planner" / "data" / "catalog.json"
    out.write_text(json.dumps({"models": entries}, indent=1, sort_keys=False) + "\n")
    print(f"wrote {len(entries)} models to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
