"""The README's test command is what CI runs."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = ci.strip().splitlines()[-1]
    assert "pytest" in command
    assert command in readme


def test_the_ci_example_installs_from_the_repository_and_its_commands_run(
    tmp_path: Path,
) -> None:
    import os
    import shlex

    import yaml
    from typer.testing import CliRunner

    from planner.cli import app

    workflow = yaml.safe_load((ROOT / "examples/github-actions/kvplan-check.yml").read_text())
    steps = workflow["jobs"]["capacity"]["steps"]
    install = next(s for s in steps if s.get("name") == "Install kvplan")
    # no index has a kvplan package: the example installs from a git URL
    assert install["env"]["KVPLAN_SRC"].startswith("git+https://")
    assert install["run"] == 'pip install "$KVPLAN_SRC"'
    check = next(s for s in steps if "kvplan check" in s.get("run", ""))
    commands = [line.strip() for line in check["run"].splitlines() if "kvplan check" in line]
    assert len(commands) == 2
    plans = tmp_path / "deploy" / "plans.yaml"
    plans.parent.mkdir()
    plans.write_text((ROOT / "examples/plans.yaml").read_text())
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        for command in commands:
            words = shlex.split(command.split(">>")[0])
            assert words[0] == "kvplan"
            result = CliRunner().invoke(app, words[1:])
            # examples/plans.yaml has one passing and one failing deployment
            assert result.exit_code == 1, (command, result.stderr)
        assert (tmp_path / "kvplan.xml").read_text().startswith("<?xml")
    finally:
        os.chdir(cwd)


def test_the_readme_is_short_and_leads_with_the_answer() -> None:
    """At most 150 lines; its first example is the verdict-first estimate, within the first 60
    lines, the outcome the first line after the title (what this build prints:
    tools/refresh_readme.py --check below keeps the rest of the block true)."""
    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 150
    first = next(i for i, line in enumerate(lines) if line.startswith("$ kvplan "))
    assert first < 60
    shown = [line for line in lines[first + 1 :] if not line.startswith("note: ")][:2]
    assert shown[0].endswith(", vLLM, TP 1, KV bf16")
    assert shown[1].startswith(("✓ Starts", "✓ Fits", "✗ Won't start"))


def _paths(text: str) -> set[str]:
    import re

    return set(re.findall(r"(?<![\w/.-])((?:examples|tests/fixtures)/[\w./-]+\w)", text))


def test_every_path_the_readme_and_docs_name_exists() -> None:
    texts = [(ROOT / "README.md").read_text()]
    texts += [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    paths = set().union(*(_paths(t) for t in texts))
    assert "examples/trace.jsonl" in paths and "examples/vllm.log" in paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing


def test_the_question_table_commands_parse() -> None:
    """Each command of the README's question table is a valid command line of this build."""
    import re
    import shlex

    import typer

    from planner.cli import app

    readme = (ROOT / "README.md").read_text()
    table = readme.split("| your question | the command |")[1].split("\n\n")[0]
    commands = [c for c in re.findall(r"`(kvplan [^`]+)`", table)]
    assert len(commands) >= 8
    group = typer.main.get_command(app)
    for command in commands:
        words = shlex.split(command)
        sub = group.commands[words[1]]  # type: ignore[attr-defined]
        try:
            sub.make_context(words[1], words[2:])
        except Exception as exc:
            assert type(exc).__name__ == "Exit", (command, exc)


@pytest.mark.slow  # re-runs every example: ~20 s
def test_every_example_in_the_readme_and_docs_is_what_this_build_prints() -> None:
    """tools/refresh_readme.py --check: whole blocks match, curated ones still print their
    shown lines in order (kvplan verify examples: with --slow only)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "tools/refresh_readme.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    import importlib.util
    import subprocess
    import sys

    import pytest

    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs-material is not installed (the dev extra has it)")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
