"""planner.files: bounded readers and all-or-nothing writers for the files users name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner import files
from planner.cli import app
from planner.errors import InputFileError, UsageError
from tests.helpers import notes_of

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


# ------------------------------------------------------------------ issue 26: output paths


@pytest.fixture
def plans(tmp_path: Path) -> Path:
    path = tmp_path / "plans.yaml"
    path.write_text(
        "deployments:\n  - {name: a, model: qwen3-0.6b, gpu: h100, max_model_len: 4096}\n"
    )
    return path


def no_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if `check` gets as far as planning: an output is refused before."""

    def planned(*args: object, **kwargs: object) -> None:
        raise AssertionError("planned before the output path was checked")

    monkeypatch.setattr("planner.check.check_file", planned)


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_a_device_is_never_an_output(tmp_path: Path, device: str) -> None:
    # checked without writing: a regression here must not replace /dev/null on the machine
    import stat

    if not stat.S_ISCHR(os.stat(device).st_mode):  # a tool run as root already replaced it
        pytest.skip(f"{device} on this machine is no longer a device")
    with pytest.raises(UsageError, match="cannot write there: a character device"):
        files.check_output("-o", device)
    link = tmp_path / "out.xml"
    os.symlink(device, link)
    with pytest.raises(UsageError, match="cannot write there: a character device"):
        files.check_output("-o", link)


@pytest.mark.parametrize("path", ["/proc/self/fd/1", "/dev/stdout", "/dev/fd/2"])
def test_a_file_descriptor_is_never_an_output(path: str) -> None:
    with pytest.raises(UsageError, match="a process's file descriptor, not a file"):
        files.check_output("-o", path)


def test_check_refuses_a_fifo_and_its_plans_file_before_planning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, plans: Path
) -> None:
    no_planning(monkeypatch)
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    for out, words in ((fifo, "a FIFO (named pipe)"), (plans, "is the plans file")):
        result = CliRunner().invoke(app, ["check", str(plans), "-o", str(out)])
        assert result.exit_code == 2 and words in result.stderr, result.stderr
    assert fifo.is_fifo() and plans.read_text().startswith("deployments:")


def test_a_symlink_to_a_file_replaces_the_target_and_says_so(tmp_path: Path, plans: Path) -> None:
    target = tmp_path / "reports" / "kvplan.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "kvplan.json"
    os.symlink(target, link)
    result = CliRunner().invoke(app, ["check", str(plans), "-f", "json", "-o", str(link)])
    assert result.exit_code == 0, result.stderr
    # the note wraps at the terminal's width: its words, joined
    said = " ".join(notes_of(result.stderr))
    assert f"is a symbolic link: kvplan replaces its target, {target}" in said
    assert link.is_symlink() and json.loads(target.read_text())["deployments"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["kvplan.json"]  # no temp file


def test_dash_is_stdout(plans: Path) -> None:
    result = CliRunner().invoke(app, ["check", str(plans), "-f", "json", "-o", "-"])
    assert result.exit_code == 0 and json.loads(result.stdout)["deployments"]


def test_two_outputs_on_one_file_or_on_stdout_are_refused(tmp_path: Path) -> None:
    for a, b, words in (
        (tmp_path / "x", tmp_path / "x", "both write the same file"),
        ("-", "-", "both write stdout"),
    ):
        with pytest.raises(UsageError, match=words):
            files.check_outputs([("-o", a), ("--save-trace", b)])


def test_an_input_found_during_the_run_is_not_replaced(tmp_path: Path) -> None:
    # the plans file's own workload is read while planning; -o naming it is refused at the write
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"prompt_tokens": 5, "output_tokens": 5}\n')
    list(files.iter_lines(trace, max_line_bytes=100, what="JSONL trace"))
    with pytest.raises(UsageError, match="is the JSONL trace this run read"):
        files.write_atomic(trace, "report", flag="-o")
    assert trace.read_text().startswith('{"prompt_tokens"')


WRITER = """
import os, signal, sys
from planner import files
signal.signal(signal.SIGTERM, signal.SIG_DFL)
real = os.replace
def replace(src, dst):  # the signal arrives mid-write, with the temporary file on disk
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))
    return real(src, dst)
os.replace = replace
out = sys.argv[1]
files.write_all_atomic([("-o", out + "/a.json", "x" * 1000), ("--plot", out + "/b.png", b"png")])
print("not reached: the signal ends the run")
"""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_signal_while_writing_leaves_no_temporary_file(tmp_path: Path, signame: str) -> None:
    import signal
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path), signame],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == -getattr(signal, signame), run.stderr  # it still ends the run
    assert "not reached" not in run.stdout
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert (tmp_path / "a.json").read_text() == "x" * 1000  # all written before it acted


# ------------------------------------------------------------------ issue 26: reading kinds


def test_a_named_pipe_is_read_when_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `kvplan simulate -w <(zcat t.jsonl.gz)`: the user named the pipe, so it is read (bounded)
    monkeypatch.setattr(files, "_NAMED", set())
    read, write = os.pipe()
    os.write(write, b'{"prompt_tokens": 5, "output_tokens": 5}\n')
    os.close(write)
    path = Path(f"/proc/self/fd/{read}")
    with pytest.raises(InputFileError, match="not a regular file"):
        list(files.iter_lines(path, max_line_bytes=100, what="JSONL trace"))
    files.name_on_command_line(["-w", str(path)])
    assert list(files.iter_lines(path, max_line_bytes=100, what="JSONL trace")) == [
        '{"prompt_tokens": 5, "output_tokens": 5}\n'
    ]
    os.close(read)


def test_a_fifo_nobody_named_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)  # no writer: a blocking open would wait forever
    with pytest.raises(InputFileError, match="a FIFO \\(named pipe\\), not a regular file"):
        files.read_text_file(fifo, limit=1000, what="config.json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": {"b": [1, ' + "9" * 5000 + "]}}", "f.json:1: a.b[1]: an integer of 5,000 digits"),
        ('{\n"x":\n 9223372036854775808}', "f.json:3: x: 9223372036854775808 is out of range"),
        ('{"x": -9223372036854775809}', "f.json:1: x: -9223372036854775809 is out of range"),
        ("[" * 50_000 + "]" * 50_000, "f.json:1: nested more than 100 levels deep"),
        ('{"a":\n' + '{"a":' * 120 + "1" + "}" * 121, "f.json:2: a.a.a.a.a"),
        # a key that is a line break (found by test_saved_plan_files_long): one line still
        ('{"\\n": {"": 9223372036854775808}}', "f.json:1: \\n.: 9223372036854775808 is out"),
    ],
)
def test_loads_json_names_file_line_and_key(text: str, message: str) -> None:
    with pytest.raises(InputFileError) as info:
        files.loads_json(text, where="f.json")
    assert str(info.value).startswith(message), str(info.value)


def test_loads_json_keeps_every_number_in_range() -> None:
    # the limits of an int64 are readable; floats are the readers' to judge (rope_theta 1e6)
    text = '{"a": 9223372036854775807, "b": -9223372036854775808, "c": 1e19, "d": 1e-05}'
    assert files.loads_json(text, where="f.json") == {
        "a": 2**63 - 1,
        "b": -(2**63),
        "c": 1e19,
        "d": 1e-05,
    }


def test_yaml_integers_too_long_for_python_are_refused_by_key(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("a: 1\nb:\n  c: [2, " + "9" * 5000 + "]\n")
    with pytest.raises(InputFileError, match=r"w.yaml:3: b.c\[1\]: an integer of 5,000 characters"):
        files.load_yaml(path, limit_bytes=1 << 20, what="workload spec")
    path.write_text("a: 0x8000000000000000\n")  # 2^63 as hex
    with pytest.raises(InputFileError, match="w.yaml:1: a: 9223372036854775808 is out of range"):
        files.load_yaml(path, limit_bytes=1 << 20, what="workload spec")
    assert files.load_yaml(path, limit_bytes=1 << 20, what="plans", range_checked=False) == {
        "a": 2**63
    }
