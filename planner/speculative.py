"""Speculative decoding as vLLM 0.33 runs it: ``--speculative-config '{...}'``.

What a drafter costs on a GPU (``../shared/ENGINES-SCALE.md`` §4.2, confirmed in vLLM 0.33's
``vllm/config/speculative.py``, ``vllm/config/vllm.py`` and ``vllm/v1/worker/gpu_model_runner.py``):

- **Weights**: the drafter loads inside the same memory profiler as the target, so its weights
  are part of "Model loading took" and come out of the KV budget. ``mtp`` loads the target
  checkpoint's ``num_nextn_predict_layers`` extra decoder layers (``model.layers.{L + i}``,
  experts sharded like the target's); ``eagle``/``eagle3``/``draft_model`` load the draft
  checkpoint (``model``), sharded by ``draft_tensor_parallel_size`` (1 or the target's TP).
  The drafter exists only on the last pipeline stage (``gpu_model_runner.py``: ``if
  self.speculative_config and get_pp_group().is_last_rank``).
- **KV**: every draft attention layer gets its own KV spec in the target's block pool
  (``get_kv_cache_spec`` walks the drafter's layers too): a draft layer with the target's spec
  joins its group, one of another shape makes the group a uniform-type page.
- **Lookahead**: the scheduler reserves ``num_lookahead_tokens`` slots past each running
  request (``VllmConfig.num_lookahead_tokens``): k for eagle, eagle3, mtp and draft models,
  k + 1 for dflash, 0 for n-gram and suffix decoding.
- **CUDA graphs**: decode graphs capture ``1 + k`` tokens per sequence.

Worked example: DeepSeek-V3 with ``{"method": "mtp", "num_speculative_tokens": 1}`` adds one
MLA layer of (512 + 64) x 2 B = 1,152 B per token, 61 -> 62 layers: 70,272 -> 71,424 B/token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.errors import UsageError
from planner.files import loads_json

if TYPE_CHECKING:
    from planner.model.specs import ModelSpec

# vLLM 0.33 SpeculativeConfig.method values kvplan sizes (dspark, suffix and the rest of the
# long tail size like their family: suffix like ngram, dspark like dflash).
METHODS = ("eagle", "eagle3", "mtp", "draft_model", "ngram", "suffix", "dflash")
# Methods that load a draft checkpoint named by "model".
NEEDS_MODEL = frozenset({"eagle", "eagle3", "draft_model", "dflash"})
# Methods with no draft network at all (prompt lookup).
NO_DRAFTER = frozenset({"ngram", "suffix"})
_KEYS = {
    "method",
    "model",
    "num_speculative_tokens",
    "draft_tensor_parallel_size",
    "prompt_lookup_max",
    "prompt_lookup_min",
}


@dataclass(frozen=True, kw_only=True)
class SpeculativeConfig:
    """One ``--speculative-config``: the method, k draft tokens per step, the draft model
    (a Hub id, catalog name or local dir; None for mtp and n-gram) and its TP size (None:
    the target's, as vLLM defaults it)."""

    method: str
    num_speculative_tokens: int
    model: str | None = None
    draft_tensor_parallel_size: int | None = None
    # the loaded draft checkpoint's spec (its KV layers), set once the draft is fetched
    # (planner.model.load.load_draft); not part of the config's identity
    draft_spec: ModelSpec | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise UsageError(
                f"--speculative-config: method {self.method!r} is not one kvplan sizes; "
                f"use one of: {', '.join(METHODS)}"
            )
        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
            raise UsageError(
                f"--speculative-config: num_speculative_tokens must be a whole number from 1 "
                f"to 64, got {k!r}"
            )
        if self.method in NEEDS_MODEL and not self.model:
            raise UsageError(
                f'--speculative-config: method {self.method} needs "model" (the draft '
                "checkpoint: a Hub id, catalog name or local dir)"
            )
        dtp = self.draft_tensor_parallel_size
        if dtp is not None and (isinstance(dtp, bool) or not isinstance(dtp, int) or dtp < 1):
            raise UsageError(
                "--speculative-config: draft_tensor_parallel_size must be a positive integer, "
                f"got {dtp!r}"
            )

    @property
    def num_lookahead_tokens(self) -> int:
        """KV slots the scheduler reserves past each running request
        (``VllmConfig.num_lookahead_tokens``)."""
        if self.method == "dflash":
            return self.num_speculative_tokens + 1
        if self.method in NO_DRAFTER:
            return 0
        return self.num_speculative_tokens

    @property
    def has_drafter(self) -> bool:
        return self.method not in NO_DRAFTER

    def draft_tp(self, tp: int) -> int:
        """The drafter's TP size: vLLM's ``_verify_and_get_draft_tp`` takes 1 or the
        target's TP and defaults to the target's."""
        if self.draft_tensor_parallel_size is None:
            return tp
        if self.draft_tensor_parallel_size not in (1, tp):
            raise UsageError(
                f"--speculative-config: draft_tensor_parallel_size "
                f"{self.draft_tensor_parallel_size} must be 1 or the target's --tp {tp} "
                "(vLLM refuses any other)"
            )
        return self.draft_tensor_parallel_size

    def as_json(self) -> str:
        """The config as ``vllm serve --speculative-config`` takes it (compact JSON)."""
        data: dict[str, Any] = {"method": self.method}
        if self.model:
            data["model"] = self.model
        data["num_speculative_tokens"] = self.num_speculative_tokens
        if self.draft_tensor_parallel_size is not None:
            data["draft_tensor_parallel_size"] = self.draft_tensor_parallel_size
        return json.dumps(data, separators=(",", ":"))


def parse_speculative(value: Any) -> SpeculativeConfig:
    """A :class:`SpeculativeConfig` from the JSON vLLM takes (a string, or a mapping from a
    plans file / boot log). ``{"method": "mtp", "num_speculative_tokens": 1}``."""
    if isinstance(value, SpeculativeConfig):
        return value
    if isinstance(value, str):
        try:
            value = loads_json(value, where="--speculative-config", error=UsageError, line=None)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--speculative-config must be JSON, e.g. "
                f'\'{{"method":"mtp","num_speculative_tokens":1}}\' ({exc.msg})'
            ) from None
    if not isinstance(value, Mapping):
        raise UsageError(
            "--speculative-config must be a JSON object with method and num_speculative_tokens"
        )
    unknown = sorted(set(map(str, value)) - _KEYS)
    if unknown:
        raise UsageError(
            f"--speculative-config: kvplan does not size {', '.join(unknown)}; it takes "
            f"{', '.join(sorted(_KEYS))}"
        )
    method = value.get("method")
    model = value.get("model")
    if method is None:
        if model is None:
            raise UsageError(
                '--speculative-config needs "method" (eagle, eagle3, mtp, '
                "draft_model, ngram, suffix, dflash)"
            )
        method = "draft_model"  # vLLM infers the method from the model; a plain draft model
    if not isinstance(method, str) or (model is not None and not isinstance(model, str)):
        raise UsageError("--speculative-config: method and model must be strings")
    k = value.get("num_speculative_tokens")
    if k is None:
        raise UsageError('--speculative-config needs "num_speculative_tokens"')
    dtp = value.get("draft_tensor_parallel_size")
    return SpeculativeConfig(
        method=method.strip().lower(),
        num_speculative_tokens=k,
        model=model.strip() if isinstance(model, str) and model.strip() else None,
        draft_tensor_parallel_size=dtp,
    )


def mtp_layers(config: Mapping[str, Any], model_type: str) -> int:
    """The MTP layers a target checkpoint carries (``num_nextn_predict_layers``; Qwen3-Next
    checkpoints carry one without the key, as vLLM assumes); 0 when none."""
    value = config.get("num_nextn_predict_layers")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if model_type == "qwen3_next":
        return 1
    return 0
