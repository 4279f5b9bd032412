"""Every command's help at 80 columns: no line wider, and every example pastes whole (its
continuation lines joined, it parses as that command's flags: no flag cut mid-word, none
unknown)."""

from __future__ import annotations

import shlex

import pytest
import typer
from typer.testing import CliRunner

from planner.cli import app

COMMANDS = ["estimate", "gpus", "models", "check", "diagnose", "simulate", "verify"]


def _help(name: str) -> str:
    result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.stdout


def examples(text: str) -> list[str]:
    """The ``kvplan ...`` lines of a help text, continuation lines (`` \\``) joined."""
    out: list[str] = []
    lines = iter(text.splitlines())
    in_block = False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("Example: "):
            stripped = stripped[len("Example: ") :]
        elif stripped == "Examples:":
            in_block = True
            continue
        elif not in_block:
            continue
        if not stripped.startswith("kvplan "):
            in_block = in_block and bool(stripped)
            continue
        while stripped.endswith("\\"):
            stripped = stripped[:-1] + " " + next(lines).strip()
        out.append(stripped)
    return out


@pytest.mark.parametrize("name", COMMANDS)
def test_help_fits_80_columns(name: str) -> None:
    text = _help(name)
    assert max(len(line) for line in text.splitlines()) <= 80, text


@pytest.mark.parametrize("name", COMMANDS)
def test_every_example_parses_as_the_commands_flags(name: str) -> None:
    group = typer.main.get_command(app)
    commands = group.commands  # type: ignore[attr-defined]
    found = examples(_help(name))
    for example in found:
        words = shlex.split(example.split(" | ")[0].split(" >> ")[0], comments=True)
        assert words[:2] == ["kvplan", name], example
        command = commands[name]
        try:
            command.make_context(name, words[2:])
        except Exception as exc:  # typer's click: UsageError for an unknown or cut flag
            if type(exc).__name__ != "Exit":
                pytest.fail(f"{example}: {exc}")
    if name in ("estimate", "check", "diagnose", "simulate", "verify"):
        assert found, f"kvplan {name} --help has no example"
