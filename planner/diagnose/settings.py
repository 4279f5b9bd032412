"""The settings ``kvplan diagnose`` plans with: three layers, each value with where it came from.

1. vLLM's defaults: :class:`~planner.deployment.ServeSettings`' own, with
   ``gpu_memory_utilization`` as the log's engine defaults it (V0 0.9, V1 0.92);
2. what the boot log states (:attr:`BootLog.settings <planner.diagnose.log_figures.BootLog>`),
   read by :meth:`ServeSettings.from_mapping` in the log's spelling; a value it refuses is one
   vLLM could not have run with, and is left out with a note;
3. the command line's flags (:func:`~planner.diagnose.diagnose_file`'s keyword arguments),
   whose mistakes are errors.

Worked example: ``kvplan diagnose vllm-v0-qwen7b-a100.log``. The V0 config line (line 3) states
tp 1, pp 1, max_model_len 8192, kv_cache_dtype auto, enforce_eager False and
enable_prefix_caching False; the budget line (line 8) gpu_memory_utilization 0.90. No setting is
on the command line, so each source is "log line 3" or "log line 8", and the plan runs with
``ServeSettings(max_model_len=8192, gpu_memory_utilization=0.9, enable_prefix_caching=False)``.
Without the budget line the source of gpu_memory_utilization would be "vLLM V0 default" (0.9).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from planner.deployment import SPELLINGS, VLLM_DEFAULT_GMU, ServeSettings
from planner.diagnose.boot_log import SETTING_KEYS
from planner.diagnose.log_figures import BootLog
from planner.errors import UsageError
from planner.vllm_rules import parse_version

COMMAND_LINE = "command line"

# The settings a log or diagnose's flags may state, in the order the JSON lists them (after
# "model"): diagnose_file's keyword arguments, then what only a log states.
ORDER = SETTING_KEYS

# The log's settings that shape the plan, in the order a note names them: when the plan refuses
# the log's combination they fall back to vLLM's defaults (gpu_memory_utilization, checked as it
# is read, is kept).
PLAN_KEYS = tuple(key for key in ORDER if key != "gpu_memory_utilization")


def log_version(log: BootLog) -> str | None:
    """The vLLM release the log names, when kvplan can read it (None: the newest's rules)."""
    if not log.version:
        return None
    try:
        parse_version(log.version)
    except UsageError:
        return None
    return log.version


def vllm_default_gmu(engine: str | None, version: str | None = None) -> float:
    """``gpu_memory_utilization`` when nobody states it, for the release that wrote the log
    (:mod:`planner.vllm_rules`: 0.9 through 0.19, 0.92 from 0.20, 1.0 from 0.34 where the
    pool is measured after warm-up); a V0 log without a version 0.9; else the newest's 0.92."""
    if version is not None:
        return ServeSettings(vllm_version=version).gmu
    return 0.9 if engine == "V0" else VLLM_DEFAULT_GMU


# How the boot log spells each setting (what from_mapping reads with spelling="log").
_LOG_NAMES = {key: name for key in ORDER if (name := SPELLINGS[key].log)}


@dataclass(frozen=True)
class PlanSettings:
    """The settings a diagnosis plans with, and where each came from.

    Attributes:
        serve: the three layers as one :class:`ServeSettings`.
        model: the model to plan: the command line's, else the one the log names.
        stated: each setting as it was stated (``Diagnosis.settings``): the flag's value, or the
            log's own literal (``"auto"``, ``False``, ``0.9``); "model" first, then in
            :data:`ORDER`. A setting nobody states is absent, except gpu_memory_utilization,
            whose vLLM default comes last.
        sources: where each of ``stated`` came from (``Diagnosis.sources``): "command line",
            "log line 8" or "vLLM V1 default".
    """

    serve: ServeSettings
    model: str | None
    stated: dict[str, Any]
    sources: dict[str, str]

    def from_log(self) -> list[str]:
        """The settings in :data:`PLAN_KEYS` that the log, not the command line, states."""
        return [key for key in PLAN_KEYS if self.sources.get(key, "").startswith("log")]


def layer_settings(
    log: BootLog,
    given: Mapping[str, Any],
    notes: list[str] | None = None,
    *,
    defaults_for: Collection[str] = (),
) -> PlanSettings:
    """The command line's settings over the log's over vLLM's defaults.

    Args:
        log: the parsed log.
        given: ``diagnose_file``'s keyword arguments, ``model`` and the settings (None: not
            given); ``kv_cache_dtype`` a :class:`~planner.model.specs.KVDtype`.
        notes: where to say which of the log's values were left out (None: say nothing).
        defaults_for: settings the log states that take vLLM's defaults instead.

    Returns:
        The :class:`PlanSettings`.

    Raises:
        UsageError: a flag vLLM would refuse (``--tp 0``, ``--gpu-memory-utilization 1.5``).
    """
    flags = {key: value for key, value in given.items() if value is not None and key != "model"}
    stated: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if given.get("model") is not None:
        stated["model"], sources["model"] = given["model"], COMMAND_LINE
    elif log.model:
        stated["model"], sources["model"] = log.model, f"log line {log.lines['model']}"
    version = log_version(log)
    # the log's release picks vLLM's rules: default utilisation, CUDA graphs, batch defaults
    serve = ServeSettings(
        gpu_memory_utilization=vllm_default_gmu(log.engine, version), vllm_version=version
    )
    for key in ORDER:
        if key in flags:
            value = flags[key]
            stated[key] = value.value if key == "kv_cache_dtype" else value
            sources[key] = COMMAND_LINE
        elif key in log.settings and key not in defaults_for:
            value, where = log.settings[key], f"log line {log.lines[key]}"
            # One key at a time, so that a refusal names the key that caused it.
            serve, problems = ServeSettings.from_mapping(
                {_LOG_NAMES[key]: value}, spelling="log", base=serve
            )
            if problems or value is None:  # a log's None (kv_cache_dtype=None) is no value
                if notes is not None:
                    notes.append(f"ignored {key} {value!r} ({where}): not a valid value")
                continue
            stated[key], sources[key] = value, where
    if log.sampler is not None and "sampler" not in flags:
        # the sampler the log says vLLM chose (boot_log._sampler) over the release's default
        serve = serve.but(sampler=log.sampler)
        stated["sampler"], sources["sampler"] = log.sampler, f"log line {log.lines['sampler']}"
    if log.mxfp4_backend is not None and "mxfp4_backend" not in flags:
        # the MoE kernel the log says the install runs (boot_log._mxfp4): Marlin pads the experts
        serve = serve.but(mxfp4_backend=log.mxfp4_backend)
        stated["mxfp4_backend"] = log.mxfp4_backend
        sources["mxfp4_backend"] = f"log line {log.lines['mxfp4_backend']}"
    if "gpu_memory_utilization" not in stated:
        stated["gpu_memory_utilization"] = serve.gmu
        sources["gpu_memory_utilization"] = (
            f"vLLM {version} default" if version else f"vLLM {log.engine or 'V1'} default"
        )
    serve = serve.but(**_flag_changes(flags))
    return PlanSettings(serve, stated.get("model"), stated, sources)


def _flag_changes(flags: Mapping[str, Any]) -> dict[str, Any]:
    """diagnose_file's keyword arguments as :class:`ServeSettings` fields
    (``enforce_eager=True`` is no CUDA-graph memory; ``max_model_len=-1`` is vLLM's auto-fit,
    as a log's -1 is)."""
    changes = {key: value for key, value in flags.items() if key != "enforce_eager"}
    if flags.get("enforce_eager"):
        changes["cuda_graph_bytes"] = 0
    if flags.get("max_model_len") == -1:
        changes.update(max_model_len=None, auto_fit_max_model_len=True)
    elif "max_model_len" in changes:
        changes["auto_fit_max_model_len"] = False  # the flag's length over a log's -1
    return changes
