"""The LoRA sub-config: what a user names (vLLM's ``LoRAConfig`` ranks, a PEFT adapter's file),
without the memory it costs (that is :mod:`planner.lora`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from planner.errors import UsageError

# vLLM 0.33 vllm/config/lora.py: MaxLoRARanks; max_lora_rank defaults to 16.
ALLOWED_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_RANK = 16


@dataclass(frozen=True, kw_only=True)
class LoraAdapter:
    """A PEFT adapter's ``adapter_config.json``: its rank and the modules it trains.

    ``target_modules`` is the tuple of module names, ``("all-linear",)`` for PEFT's shortcut,
    or None when the file names none (then every module is assumed)."""

    path: str
    rank: int
    target_modules: tuple[str, ...] | None
    base_model: str | None = None

    @property
    def name(self) -> str:
        """The name ``vllm serve --lora-modules NAME=PATH`` serves it under: its folder's."""
        return Path(self.path).name or "adapter"


MAX_ADAPTER_BYTES = 1 << 20  # an adapter_config.json is a few hundred bytes


def read_adapter(path: str) -> LoraAdapter:
    """The adapter in ``path`` (a folder holding ``adapter_config.json``, or the file).

    AswaniSahoo/llama-task-agent's file (r 16, q/k/v/o_proj) -> ``LoraAdapter(rank=16,
    target_modules=("o_proj", "v_proj", "q_proj", "k_proj"), base_model=
    "meta-llama/Llama-3.1-8B-Instruct")``.
    """
    where = Path(path)
    file = where / "adapter_config.json" if where.is_dir() else where
    from planner import files

    def error(message: str) -> UsageError:
        return UsageError(f"--lora-adapter {message}")

    if not file.exists() and not file.is_symlink():
        raise UsageError(f"--lora-adapter {path}: no adapter_config.json there")
    text = files.read_text_file(
        file, limit=MAX_ADAPTER_BYTES, what="adapter_config.json", error=error
    )
    try:
        data = files.loads_json(text, where=str(file), error=error)
    except json.JSONDecodeError:
        raise UsageError(f"--lora-adapter {file}: not valid JSON") from None
    if not isinstance(data, dict):
        raise UsageError(f"--lora-adapter {file}: not a JSON object")
    peft = data.get("peft_type")
    if peft is not None and str(peft).upper() != "LORA":
        raise UsageError(
            f"--lora-adapter {file}: peft_type {peft!r}; vLLM serves LoRA adapters only"
        )
    rank = data.get("r")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= 1 << 20:
        raise UsageError(f"--lora-adapter {file}: r must be a whole number >= 1, got {rank!r}")
    targets = data.get("target_modules")
    modules: tuple[str, ...] | None
    if isinstance(targets, str):
        modules = (targets,)
    elif isinstance(targets, list) and all(isinstance(t, str) for t in targets):
        modules = tuple(targets) or None
    elif targets is None:
        modules = None
    else:
        raise UsageError(f"--lora-adapter {file}: target_modules must be a list of names")
    base = data.get("base_model_name_or_path")
    return LoraAdapter(
        path=str(path),
        rank=rank,
        target_modules=modules,
        base_model=base if isinstance(base, str) else None,
    )


def rank_for(adapter_rank: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM takes that holds an adapter of ``adapter_rank``:
    8 -> 8, 12 -> 16, 600 -> refused (above 512)."""
    for allowed in ALLOWED_RANKS:
        if allowed >= adapter_rank:
            return allowed
    raise UsageError(
        f"LoRA rank {adapter_rank} is above vLLM's largest --max-lora-rank "
        f"{ALLOWED_RANKS[-1]}; vLLM cannot serve this adapter"
    )
