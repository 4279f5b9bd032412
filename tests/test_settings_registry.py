"""Every declared setting (planner.config.fields) is taken by the command line, a plans file and a
boot log alike, and every engine command carries it where that engine has a flag for it.

The expected value of each setting is what the same example parses to in the other spellings:
the test holds the four readers to one another and to a value that differs from the default,
so a setting one reader ignores or reads differently fails here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.check.plans import load_yaml, parse_plans
from planner.cli._options import settings_from
from planner.cli.app import app
from planner.commands import engine_commands
from planner.config.fields import SETTINGS, for_command
from planner.config.setting import ENGINES, Setting
from planner.deployment import ServeSettings
from planner.diagnose.boot_log import parse_log
from planner.diagnose.settings import layer_settings
from planner.plan_types import Recommended
from tests.helpers import check_command, option_table

# What a setting needs beside it to be valid (vLLM's own rules: LoRA flags need --enable-lora,
# EPLB needs expert parallelism, DCP divides TP, a KV tier backend needs a size).
NEEDS: dict[str, dict[str, Any]] = {
    "max_loras": {"enable_lora": True},
    "max_lora_rank": {"enable_lora": True},
    "lora_target_modules": {"enable_lora": True},
    "fully_sharded_loras": {"enable_lora": True},
    "max_cpu_loras": {"enable_lora": True},
    "num_redundant_experts": {"enable_expert_parallel": True},
    "dcp": {"tp": 2},
    "kv_offloading_backend": {"kv_offloading_size": 8.0},
    # the flag exists from vLLM 0.34 (config/cache.py 0.34.0:395)
    "disable_extensible_kv_cache": {"vllm_version": "0.34.0"},
}
WITH_EXAMPLE = [s for s in SETTINGS if s.example is not None]
IDS = [s.name for s in WITH_EXAMPLE]
DEFAULT = ServeSettings()


def _value(settings: ServeSettings, s: Setting) -> Any:
    field = "cuda_graph_bytes" if s.kind == "eager" else s.name
    value = getattr(settings, field)
    return value.as_json() if hasattr(value, "as_json") else value


def _cli_word(value: Any) -> Any:
    """The example as a user types it after the flag."""
    import json

    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, list):
        return ",".join(value)
    return value


def _yaml_settings(s: Setting, tmp_path: Path) -> ServeSettings:
    doc = {
        "deployments": [
            {"name": "x", "model": "llama-3.1-8b", "gpu": "h100", s.yaml: s.example}
            | {
                next(t.yaml for t in SETTINGS if t.name == k): v
                for k, v in NEEDS.get(s.name, {}).items()
            }
        ]
    }
    path = tmp_path / "plans.yaml"
    path.write_text(yaml.safe_dump(doc))
    entries, problems = parse_plans(load_yaml(path), file="plans.yaml", base_dir=tmp_path)
    assert not problems, problems
    return entries[0].settings


def test_every_setting_has_its_spellings_and_a_reason_for_each_missing_flag() -> None:
    for s in SETTINGS:
        assert s.cli.startswith("--") and s.yaml and s.help, s.name
        for engine in ENGINES:
            if s.engines[engine] is None:
                assert s.no_flag.get(engine), f"{s.name}: {engine} has no flag and no reason"
        assert s.kind in ("choice",) or not s.choices, s.name
    assert len({s.cli for s in SETTINGS}) == len(SETTINGS)
    assert len({s.yaml for s in SETTINGS}) == len(SETTINGS)


@pytest.mark.parametrize("s", WITH_EXAMPLE, ids=IDS)
def test_the_cli_a_plans_file_and_a_boot_log_read_a_setting_alike(
    s: Setting, tmp_path: Path
) -> None:
    needs = NEEDS.get(s.name, {})
    from_cli = settings_from({s.name: _cli_word(s.example), **needs})
    assert _value(from_cli, s) != _value(DEFAULT, s), f"{s.cli} {s.example!r} changed nothing"
    from_yaml = _yaml_settings(s, tmp_path)
    assert _value(from_yaml, s) == _value(from_cli, s)
    if s.log is None:
        return
    args = {s.log: s.example} | {
        next(t.log for t in SETTINGS if t.name == k) or k: v for k, v in needs.items()
    }
    log = parse_log(f"INFO 01-01 00:00:00 [utils.py:1] non-default args: {args!r}\n")
    notes: list[str] = []
    planned = layer_settings(log, {}, notes)
    assert not notes, notes
    assert _value(planned.serve, s) == _value(from_cli, s), f"the log's {s.log} was not read"


@pytest.mark.parametrize("command", ["estimate", "simulate", "diagnose", "verify"])
def test_a_command_takes_every_setting_declared_for_it(command: str) -> None:
    import typer.main

    click = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    flags = {opt for p in click.params for opt in (*p.opts, *p.secondary_opts)}
    for s in for_command(command):  # type: ignore[arg-type]
        assert set(s.flags) <= flags, f"{command} lacks {s.flags}"
    # and takes it as the registry declares it, not as a second hand-written option whose
    # help and default text must be kept in step (kvplan simulate's --enable-prefix-caching was)
    helps = {p.name: p.help or "" for p in click.params}
    for s in for_command(command):  # type: ignore[arg-type]
        assert helps[s.name].startswith(s.help), f"{command} declares {s.cli} itself"
        if s.default:
            assert f"[default: {s.default}]" in helps[s.name], f"{command} {s.cli}"


def _commands(settings: ServeSettings) -> dict[str, dict[str, object]]:
    rec = Recommended(
        max_model_len=settings.max_model_len or 8192,
        max_num_seqs=settings.max_num_seqs or 256,
        gpu_memory_utilization=settings.gmu,
        block_size=settings.block_size or 16,
        kv_cache_dtype=settings.kv_cache_dtype.value,
        kv_usage=0.5,
        reason="",
    )
    out = engine_commands(
        "org/model",
        rec,
        tp=settings.tp,
        pp=settings.pp,
        kv_cache_dtype=settings.kv_cache_dtype.value,
        settings=settings,
        token_budget=settings.max_num_batched_tokens or 8192,
    )
    return {e: check_command(out.commands[e], option_table(e)) for e in ENGINES}


# settings whose vLLM example is another engine's or a file
NOT_ON_VLLM = {"engine"}


@pytest.mark.parametrize("s", WITH_EXAMPLE, ids=IDS)
def test_every_emitted_command_carries_a_setting_where_its_engine_has_it(s: Setting) -> None:
    if s.name in NOT_ON_VLLM:
        return
    base = settings_from(NEEDS.get(s.name, {}))
    settings = settings_from({s.name: _cli_word(s.example)}, defaults=NEEDS.get(s.name, {}))
    # an engine carries a flag the plan sets even when it is the default, so compare the two
    before, after = _commands(base), _commands(settings)
    for engine in ENGINES:
        flag = s.engines[engine]
        if flag is None:
            continue
        assert flag in after[engine], f"{engine} command lacks {flag} for {s.name}"
        if flag in before[engine]:
            assert after[engine][flag] != before[engine][flag], (engine, flag)


def test_replace_keeps_the_registry_the_whole_story() -> None:
    # every ServeSettings field a user sets is declared (auto-fit is max_model_len -1)
    from dataclasses import fields

    declared = {s.name for s in SETTINGS}
    assert {f.name for f in fields(ServeSettings)} - declared == {"auto_fit_max_model_len"}
    assert replace(DEFAULT, tp=2).tp == 2


def test_simulate_takes_every_declared_compare_axis_as_a_comma_list() -> None:
    """The --compare axes are generated from the declarations: each non-boolean axis is a
    simulate option taking a comma list, and the list is replayed once per value."""
    import typer
    from typer.testing import CliRunner

    from planner.cli import app
    from planner.config.fields import COMPARE_AXES

    command = typer.main.get_command(app).commands["simulate"]  # type: ignore[attr-defined]
    helps = {opt: p.help for p in command.params for opt in getattr(p, "opts", [])}
    for axis, s in COMPARE_AXES.items():
        if s.kind in ("bool", "eager"):
            continue
        assert f"A comma list compares them (as --compare {axis}=V1,V2)" in helps[s.cli]
    args = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--max-num-seqs", "8,16", "--json"]
    args += ["--avg-prompt-tokens", "100", "--avg-output-tokens", "10", "--num-requests", "5"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.stderr
    assert [r["max_num_seqs"] for r in json.loads(out.stdout)["runs"]] == [8, 16]
