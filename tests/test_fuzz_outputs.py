"""Fuzzed output paths: whatever mix of kinds the paths of ``-o``, ``--save-trace``
and ``--plot`` name, :func:`planner.files.check_outputs` and
:func:`planner.files.write_all_atomic` either refuse them all, leaving every file as it was,
or write each target whole: never a FIFO, a directory, an input of the run or one output over
another, never a temporary file left behind, symbolic links kept as links.

No character device is among the kinds: a regression would replace it (as root, /dev/null);
tests/test_files.py checks devices without writing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner import files
from planner.errors import UsageError
from tests.fuzz_helpers import DEFAULT, SLOW, scratch

# kind -> refused?
KINDS = {
    "new": False,  # no file there yet
    "regular": False,  # an old report: replaced
    "link-to-regular": False,  # replaced through the link, which stays
    "dangling-link": False,  # the link's target is created
    "dot-path": False,  # ./sub/../name
    "dash": False,  # stdout
    "directory": True,
    "fifo": True,
    "link-to-fifo": True,
    "link-to-directory": True,
    "missing-folder": True,
    "input": True,  # the input of the run
    "link-to-input": True,
    "empty": True,
}
FLAGS = ("-o", "--save-trace", "--plot")


def make(folder: Path, index: int, kind: str) -> str:
    """A path of ``kind`` in ``folder`` (the input is ``input.jsonl``)."""
    name = folder / f"out{index}"
    if kind == "regular":
        name.write_text("old")
    elif kind == "link-to-regular":
        (folder / f"real{index}").write_text("old")
        os.symlink(folder / f"real{index}", name)
    elif kind == "dangling-link":
        os.symlink(folder / f"later{index}", name)
    elif kind == "dot-path":
        (folder / "sub").mkdir(exist_ok=True)
        return f"./sub/../out{index}"
    elif kind == "dash":
        return "-"
    elif kind == "directory":
        name.mkdir()
    elif kind == "fifo":
        os.mkfifo(name)
    elif kind == "link-to-fifo":
        os.mkfifo(folder / f"fifo{index}")
        os.symlink(folder / f"fifo{index}", name)
    elif kind == "link-to-directory":
        (folder / f"dir{index}").mkdir()
        os.symlink(folder / f"dir{index}", name)
    elif kind == "missing-folder":
        return str(folder / "no" / f"out{index}")
    elif kind == "input":
        return str(folder / "input.jsonl")
    elif kind == "link-to-input":
        os.symlink(folder / "input.jsonl", name)
    elif kind == "empty":
        return ""
    return str(name)


def snapshot(folder: Path) -> dict[str, Any]:
    """Every entry under ``folder``: its kind, and a regular file's content."""
    out: dict[str, Any] = {}
    for path in sorted(folder.rglob("*")):
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            out[str(path)] = ("link", os.readlink(path))
        elif stat.S_ISREG(mode):
            out[str(path)] = ("file", path.read_bytes())
        else:
            out[str(path)] = (stat.S_IFMT(mode), None)
    return out


CASES = st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=3)


def check(kinds: list[str]) -> None:
    with scratch() as folder:
        (folder / "input.jsonl").write_text('{"prompt_tokens": 5, "output_tokens": 5}\n')
        paths = [make(folder, i, kind) for i, kind in enumerate(kinds)]
        outputs = [
            (flag, path, f"report {i}\n")
            for i, (flag, path) in enumerate(zip(FLAGS, paths, strict=False))
        ]
        before = snapshot(folder)
        # one output over another: the same kind twice that names one place
        same = len({os.path.realpath(p) for p in paths if p not in ("", "-")}) < len(
            [p for p in paths if p not in ("", "-")]
        )
        refused = any(KINDS[k] for k in kinds) or same or paths.count("-") > 1
        try:
            files.check_outputs(
                [(f, p) for f, p, _ in outputs], inputs=[("the input", folder / "input.jsonl")]
            )
            files.write_all_atomic(outputs)
        except UsageError as exc:
            assert refused, (kinds, str(exc))
            assert snapshot(folder) == before, kinds  # nothing written, nothing replaced
            return
        assert not refused, kinds
        after = snapshot(folder)
        assert not [p for p in after if p.endswith(".tmp")], after
        assert after[str(folder / "input.jsonl")] == before[str(folder / "input.jsonl")]
        for (_, path, data), kind in zip(outputs, kinds, strict=True):
            if path == "-":
                continue
            assert Path(path).read_text() == data, (kinds, path)  # through the link, if one
            if kind.endswith("link") or kind.startswith("link-"):
                assert Path(path).is_symlink(), (kinds, path)  # the link itself stays


@DEFAULT
@given(CASES)
def test_fuzzed_output_paths_never_destroy(kinds: list[str]) -> None:
    check(kinds)


@pytest.mark.slow
@SLOW
@given(CASES)
def test_fuzzed_output_paths_never_destroy_long(kinds: list[str]) -> None:
    check(kinds)
