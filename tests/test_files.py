"""planner.files: bounded readers and all-or-nothing writers for the files users name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner import files
from planner.cli import app
from planner.errors import InputFileError, UsageError

ROOT = Path(__file__).resolve().parents[1]
CHAT = str(ROOT / "examples" / "workloads" / "chat.yaml")


def test_iter_lines_reads_one_line_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbfa\r\nb\n\nc")
    assert list(files.iter_lines(path, max_line_bytes=10, what="trace")) == [
        "a\r\n",
        "b\n",
        "\n",
        "c",
    ]


def test_iter_lines_cuts_a_long_line_and_skips_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"short\n" + b"z" * 200_000 + b"\nafter\n")
    lines = list(files.iter_lines(path, max_line_bytes=100, what="trace"))
    assert lines == ["short\n", "z" * 101, "after\n"]


@pytest.mark.parametrize("chunk", [1, 4, 8, 64, 1 << 15])
def test_iter_lines_reads_chunks_then_line_by_line_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # whole chunks of short text lines first; from the chunk with a \r, a long line or an
    # unfinished last line on, one line at a time: the same lines either way
    monkeypatch.setattr(files, "CHUNK_BYTES", chunk)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbfab\n\ncd\n\xc3\xa9\nef\r\ngh\n" + b"z" * 30 + b"\nij\nk")
    assert list(files.iter_lines(path, max_line_bytes=10, what="trace")) == [
        "ab\n",
        "\n",
        "cd\n",
        "\xe9\n",
        "ef\r\n",
        "gh\n",
        "z" * 11,
        "ij\n",
        "k",
    ]
    path.write_bytes(b"ok\nok\nok\n\xff\n")
    with pytest.raises(InputFileError, match="line 4 is not UTF-8"):
        list(files.iter_lines(path, max_line_bytes=10, what="trace"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"ok\n\x00\x00\n", "binary file (NUL bytes on line 2), not a trace"),
        (b"ok\n\xff\xfe\n", "line 2 is not UTF-8 text (byte 1); a trace must be text"),
        (b"x" * 500 + b"\x00", "binary file (NUL bytes on line 1)"),  # in the skipped part
    ],
)
def test_iter_lines_stops_at_binary_content(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(content)
    with pytest.raises(InputFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        list(files.iter_lines(path, max_line_bytes=100, what="trace"))


@pytest.mark.parametrize(
    ("name", "message"),
    [("missing.txt", "no such file"), ("", "is a directory"), ("a\x00b", "not a usable file name")],
)
def test_readers_name_what_is_wrong(tmp_path: Path, name: str, message: str) -> None:
    path = tmp_path / name
    with pytest.raises(InputFileError, match=message):
        files.read_text_file(path, limit=10, what="log")
    with pytest.raises(InputFileError, match=message):
        list(files.iter_lines(path, max_line_bytes=10, what="log"))


def test_read_text_file_reads_at_most_the_limit_of_an_endless_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a device kvplan finds by itself is refused; one the user named is read up to the limit
    monkeypatch.setattr(files, "_NAMED", set())
    with pytest.raises(InputFileError, match="a character device, not a regular file"):
        files.read_text_file(Path("/dev/zero"), limit=1000, what="log")
    files.name_on_command_line(["/dev/zero"])
    with pytest.raises(InputFileError, match="larger than the 1,000-byte limit for a log"):
        files.read_text_file(Path("/dev/zero"), limit=1000, what="log")


def test_write_atomic_replaces_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.xml"
    target.write_text("old report")
    files.write_atomic(target, "new report", flag="-o")
    assert target.read_text() == "new report"

    def full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(UsageError, match="cannot write: No space left on device"):
        files.write_atomic(target, "newer report", flag="-o")
    assert target.read_text() == "new report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.xml"]  # no temporary file left


def test_write_all_atomic_writes_none_when_one_fails(tmp_path: Path) -> None:
    outputs = [("-o", tmp_path / "a.json", "{}"), ("--plot", tmp_path / "no" / "b.png", b"png")]
    with pytest.raises(UsageError, match=r"--plot .*b.png: cannot write there"):
        files.write_all_atomic(outputs)
    assert list(tmp_path.iterdir()) == []


def test_simulate_writes_no_file_when_a_later_output_fails(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    report, trace = tmp_path / "report.json", tmp_path / "trace.jsonl"
    args = ["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", CHAT, "--num-requests", "5"]
    args += ["-o", str(report), "--save-trace", str(trace), "--plot", str(tmp_path / "no/x.png")]
    result = CliRunner().invoke(app, args)
    assert (
        result.exit_code == 2
        and "--plot" in result.stderr
        and "cannot write there" in result.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_check_leaves_an_existing_report_alone_when_the_file_is_invalid(tmp_path: Path) -> None:
    report = tmp_path / "kvplan.xml"
    report.write_text("<last good report/>")
    (tmp_path / "plans.yaml").write_text("deployments: [\n")
    result = CliRunner().invoke(
        app, ["check", str(tmp_path / "plans.yaml"), "-f", "junit", "-o", str(report)]
    )
    assert result.exit_code == 2
    assert report.read_text() == "<last good report/>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kvplan.xml", "plans.yaml"]


def test_yaml_control_characters_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("a: 1\nb: \x07\n")
    with pytest.raises(InputFileError) as info:
        files.load_yaml(path, limit_bytes=1000, what="plans file")
    assert str(info.value) == (
        f"{path}:2: invalid YAML: control character U+0007 in column 4; "
        "YAML allows printable text only"
    )
