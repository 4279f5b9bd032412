"""Each finding kind is a type that carries its own text (planner/diagnose/kinds.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.diagnose.findings import Finding
from planner.diagnose.kinds import KINDS, Kind, finding_text

ROOT = Path(__file__).resolve().parents[1]


def test_every_kind_made_in_the_library_has_its_class() -> None:
    made = set()
    for path in (ROOT / "planner").rglob("*.py"):
        made |= set(re.findall(r'\bFinding\(\s*kind="([a-z0-9-]+)"', path.read_text()))
    assert made, "no finding is made with kind=..."
    assert made <= set(KINDS), sorted(made - set(KINDS))


def test_no_view_branches_on_a_kind_string() -> None:
    for path in (ROOT / "planner" / "render").rglob("*.py"):
        assert not re.search(r"\.kind\s*(==|in)\s", path.read_text()), path


def test_a_finding_of_an_unknown_kind_is_refused_when_made() -> None:
    with pytest.raises(AssertionError, match="no class"):
        Finding(kind="no-such-kind", severity="info", data={})


def test_a_kind_words_the_scrape_its_own_way_or_as_the_log_with_the_log_s_words_changed() -> None:
    budget = Finding(
        kind="budget",
        severity="info",
        data={
            "available_implied_by_blocks": False,
            "log_available_bytes": 2 << 30,
            "plan_available_bytes": 3 << 30,
            "difference_bytes": -(1 << 30),
            "term": "non-torch memory",
            "term_log_bytes": None,
            "term_plan_bytes": None,
            "share_bytes": -(1 << 30),
        },
    )
    log = budget.text()
    # 2 GiB against 3 GiB: -1.00 GiB
    assert log.startswith("Available KV cache: log 2.00 GiB, plan 3.00 GiB (-1.00 GiB)")
    assert "The log does not state non-torch memory" in log
    scrape = finding_text(budget, "scrape")
    assert "The scrape does not state non-torch memory" in scrape
    assert "(the boot log states them)" in scrape
    off = Finding(kind="prefix-off", severity="info", data={})
    assert "cache_config_info" in off.text("scrape") and "cache_config_info" not in off.text()


def test_one_class_per_name_and_subclasses_keep_their_own_names() -> None:
    assert all(isinstance(k, Kind) for k in KINDS.values())
    assert (
        type(KINDS["matches"]).__name__ == "Matches" and type(KINDS["budget"]).__name__ == "Budget"
    )
