"""The LoRA sub-config: what a user names (vLLM's ``LoRAConfig`` ranks, a PEFT adapter's file),
without the memory it costs (that is :mod:`planner.lora`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from planner import files
from planner.errors import UsageError
from planner.model.specs import Engine

if TYPE_CHECKING:
    from planner.deployment import ServeSettings

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


def check_lora_rank(rank: int) -> None:
    """Refuse a ``--max-lora-rank`` vLLM 0.33 refuses (``MaxLoRARanks``)."""
    if rank not in ALLOWED_RANKS:
        raise UsageError(
            f"--max-lora-rank must be one of {', '.join(map(str, ALLOWED_RANKS))} (vLLM's "
            f"MaxLoRARanks), got {rank!r}"
        )


def check_lora(s: ServeSettings) -> None:
    """vLLM's LoRAConfig rules (``vllm/config/lora.py``); the model's own rules are
    :func:`planner.lora.check_supported`'s."""
    given = [
        flag
        for flag, on in (
            ("--max-loras", s.max_loras != 1),
            ("--max-lora-rank", s.max_lora_rank is not None),
            ("--lora-target-modules", s.lora_target_modules is not None),
            ("--fully-sharded-loras", s.fully_sharded_loras),
            ("--max-cpu-loras", s.max_cpu_loras is not None),
            ("--lora-adapter", s.lora_adapter is not None),
        )
        if on
    ]
    if given and not s.enable_lora:
        raise UsageError(f"{given[0]} needs --enable-lora (vLLM ignores the LoRA flags without it)")
    rank = s.max_lora_rank
    if rank is not None:
        check_lora_rank(rank)
    if s.max_cpu_loras is not None and s.max_cpu_loras < s.max_loras:
        raise UsageError(
            f"--max-cpu-loras {s.max_cpu_loras} must be at least --max-loras "
            f"{s.max_loras} (vLLM's LoRAConfig)"
        )
    if s.lora_target_modules is not None and not s.lora_target_modules:
        raise UsageError("--lora-target-modules needs at least one module name")
    adapter = s.lora_adapter
    if adapter is not None and rank is not None and adapter.rank > rank:
        raise UsageError(
            f"--lora-adapter {adapter.path} has rank {adapter.rank}, above --max-lora-rank "
            f"{rank}: vLLM refuses to load it; use --max-lora-rank "
            f"{next((r for r in ALLOWED_RANKS if r >= adapter.rank), ALLOWED_RANKS[-1])}"
        )
    if s.enable_lora and s.engine is not Engine.VLLM:
        raise UsageError("--enable-lora is sized for vLLM only; drop it or use --engine vllm")
