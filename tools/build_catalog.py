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
# Shared configs the catalog leaves out, and why: it lists models one plans a deployment of.
EXCLUDE = {
    "Qwen--Qwen3-Embedding-0.6B": "embedding model",
    "Qwen--Qwen3-Embedding-8B": "embedding model",
    # vLLM 0.33's registry lists MllamaForConditionalGeneration among the models it no longer
    # serves (removed in 0.10.2, with the other encoder-decoder models of V0)
    "meta-llama--Llama-3.2-90B-Vision-Instruct": "vLLM removed Mllama in 0.10.2",
}
# The keys of a multimodal model's preprocessor_config.json that size an item (kept in the
# entry as "preprocessor"; planner.multimodal reads them): Qwen-VL pixel bounds and patch
# sizes, Gemma 3 pan-and-scan, Llama 4 tiles, CLIP crops.
PREPROCESSOR_KEYS = (
    "min_pixels",
    "max_pixels",
    "size",
    "patch_size",
    "merge_size",
    "temporal_patch_size",
    "do_pan_and_scan",
    "pan_and_scan_max_num_crops",
    "max_patches",
    "crop_size",
    "image_processor_type",
    "processor_class",
)
# Variants the catalog has no config of but whose KV geometry was read from a published copy of
# their config.json: they resolve to the catalog entry (with a note) only if every GEOMETRY value
# equals the entry's own; main() refuses to build otherwise.
GEOMETRY = (
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_size",
    "vocab_size",
    "max_position_embeddings",
    "torch_dtype",
)
VARIANTS: dict[str, list[tuple[str, dict[str, object], str]]] = {
    "meta-llama/Llama-3.1-8B": [
        (
            "meta-llama/Llama-3.1-8B-Instruct",
            {
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "hidden_size": 4096,
                "vocab_size": 128256,
                "max_position_embeddings": 131072,
                "torch_dtype": "bfloat16",
            },
            "github.com/sriumcp/inference-sim model_configs/llama-3.1-8b-instruct/config.json "
            "@ cabe75e76bde (head_dim = hidden_size / num_attention_heads)",
        )
    ],
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
                f"{cells[4].replace('`', '')} config.json via github.com/{repo} "
                f"{cells[6].strip('`')} @ {cells[7].strip('`')} (shared/model-configs #{cells[1]})"
            )
    return rows


def short_name(hub_id: str) -> str:
    return hub_id.split("/", 1)[1].lower().replace("meta-llama-", "llama-")


def geometry(config: dict) -> dict[str, object]:
    """The GEOMETRY values of a config (nested text_config first; head_dim derived)."""
    text = {**config, **config.get("text_config", {})}
    out = {key: text.get(key) for key in GEOMETRY}
    if out["num_key_value_heads"] is None:
        out["num_key_value_heads"] = out["num_attention_heads"]
    if out["head_dim"] is None:
        out["head_dim"] = int(text["hidden_size"]) // int(text["num_attention_heads"])
    out["torch_dtype"] = text.get("torch_dtype") or config.get("torch_dtype")
    return out


def variants(entry: dict) -> list[dict[str, str]]:
    """The entry's VARIANTS, each checked against its config's geometry."""
    out = []
    for hub_id, geo, source in VARIANTS.get(entry["hub_id"], []):
        own = geometry(entry["config"])
        if geo != own:
            diff = {k: (geo.get(k), own.get(k)) for k in GEOMETRY if geo.get(k) != own.get(k)}
            raise SystemExit(f"{hub_id} differs from {entry['hub_id']}: {diff}")
        out.append({"hub_id": hub_id, "name": short_name(hub_id), "provenance": source})
    return out


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "model-configs"
    prov = provenance((src / "SOURCES.md").read_text())
    entries = []
    folders = sorted(p for p in src.iterdir() if (p / "config.json").is_file())
    for folder in folders:
        if folder.name in EXCLUDE:
            continue
        hub_id = folder.name.replace("--", "/", 1)
        entry = {
            "name": short_name(hub_id),
            "hub_id": hub_id,
            "provenance": prov.get(folder.name, f"shared/model-configs/{folder.name}"),
            "config": trim(json.loads((folder / "config.json").read_text())),
        }
        pre = folder / "preprocessor_config.json"
        if pre.is_file():
            raw = json.loads(pre.read_text())
            entry["preprocessor"] = {k: raw[k] for k in PREPROCESSOR_KEYS if k in raw}
        entries.append(entry)
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
        entry["variants"] = variants(entry)
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
