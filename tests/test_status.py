"""The status line on stderr while slow work runs: shown on a terminal,
silent in pipes and under --json."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from planner import status as status_mod
from tests.helpers import sim_config


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    with status_mod.status("Fetching"):
        pass
    assert piped.getvalue() == ""


def test_shown_on_a_terminal_and_silenced_by_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(status_mod, "_QUIET", False)
    assert status_mod.shown()
    status_mod.quiet()
    assert not status_mod.shown()
    status_mod.quiet(False)
    assert status_mod.shown()


def test_a_hub_fetch_says_what_it_waits_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import huggingface_hub

    from planner.model import hub

    seen: list[str] = []

    class Recorder:
        def __init__(self, message: str) -> None:
            seen.append(message)

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(hub, "status", Recorder)  # where the Hub reader calls it
    config = tmp_path / "config.json"
    config.write_text("{}")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda **kw: str(config))
    assert hub.download_config("org/name", offline=False) == config
    assert seen == [
        "Fetching org/name/config.json from the Hugging Face Hub (up to ~20 s without "
        "network; HF_HUB_OFFLINE=1 skips it)"
    ]


def test_a_long_replay_reports_arrivals_every_4096(monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.simulate import engine
    from planner.simulate.run import simulate
    from planner.simulate.workload import Request, Workload

    # 10,000 one-token requests, one every 10 ms: arrivals 4,096 and 8,192 are reported
    work = Workload(
        name="w", source="t", requests=tuple(Request(16, 1, i * 0.01) for i in range(10_000))
    )
    config = sim_config(
        100,
        null_block=False,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        step_s=0.001,
        prefix_caching=True,
    )
    seen: list[int] = []
    monkeypatch.setattr(engine, "PROGRESS", seen.append)
    with_bar = simulate(work, config)
    monkeypatch.setattr(engine, "PROGRESS", None)
    assert seen == [4096, 8192]
    assert simulate(work, config) == with_bar  # watching changes nothing
