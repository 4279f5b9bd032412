"""The README's test command is what CI runs."""

from __future__ import annotations

from pathlib import Path

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


def test_the_readme_leads_with_the_answer() -> None:
    """The top section (before the first command's reference) is at most 60 lines and its
    verdict-first example is what this build prints."""
    from typer.testing import CliRunner

    from planner.cli import app

    readme = (ROOT / "README.md").read_text()
    top = readme.split("## `kvplan estimate MODEL`")[0]
    assert len(top.splitlines()) <= 60
    block = top.split("```\n$ kvplan estimate ")[1].split("```")[0]
    command, *shown = block.splitlines()
    assert shown[-1] == "..."
    result = CliRunner().invoke(
        app, ["estimate", *command.split()], env={"COLUMNS": "100", "NO_COLOR": "1"}
    )
    assert result.stdout.splitlines()[: len(shown) - 1] == shown[:-1]
